"""The README's promises that can be checked without running the demo."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from facefusion_provider.options import Processor, options_markdown_table

ROOT = Path(__file__).resolve().parents[2]


def test_readme_options_table_matches_the_options_model() -> None:
    readme = (ROOT / "README.md").read_text()
    assert options_markdown_table() in readme, "regenerate with: .venv/bin/python -m facefusion_provider.options"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme
    assert "\nmake test" in ci


def test_the_readme_processors_table_has_a_row_for_every_processor() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Processors", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip().strip("`") for line in section.splitlines() if line.startswith("| `")}
    assert rows == set(get_args(Processor))
