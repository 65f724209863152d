"""Confinement on a real Airflow (``airflow dags test``): a symbolic link under the allowed input prefix that points at
a private video fails validate with one line naming the field, and nothing is written anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow_harness import conf, make_clip, make_image
from demo_airflow import dags_test, run_succeeded

pytestmark = pytest.mark.slow


def test_a_symlinked_input_is_refused_at_validate_naming_the_field(
    dags_test_env: dict[str, str], tmp_path: Path
) -> None:
    inputs, outputs, private = tmp_path / "in", tmp_path / "out", tmp_path / "private"
    for folder in (inputs, outputs, private):
        folder.mkdir()
    make_image(inputs / "face.png")
    make_clip(private / "secret.mp4", frames=8)
    (inputs / "talk.mp4").symlink_to(private / "secret.mp4")
    env = {
        **dags_test_env,
        "AIRFLOW__FACEFUSION__ALLOWED_INPUT_PREFIXES": str(inputs),
        "AIRFLOW__FACEFUSION__ALLOWED_OUTPUT_PREFIXES": str(outputs),
    }

    result = dags_test(conf([inputs / "face.png"], inputs / "talk.mp4", outputs / "swapped.mp4"), env, timeout=300)

    text = result.stdout + result.stderr
    assert not run_succeeded(result), text[-4000:]
    assert (
        f"Target video (target_uri): {(inputs / 'talk.mp4').as_uri()} resolves, through a symbolic link, outside"
        in text
    ), text[-4000:]
    assert list(outputs.iterdir()) == []
    assert sorted(path.name for path in private.iterdir()) == ["secret.mp4"]
