"""What the benchmarks share: the worker CLI run as its own process, timed, a report written as JSON and text, and
the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKER = [sys.executable, "-m", "facefusion_provider.worker"]


def run_worker(args: list[str], env: dict[str, str]) -> tuple[float, str, str]:
    """Seconds, stdout and stderr of one ``facefusion-worker`` command; a failure raises with the end of its log."""
    started = time.perf_counter()
    result = subprocess.run([*WORKER, *args], env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {result.stderr[-2000:]}")
    return time.perf_counter() - started, result.stdout, result.stderr


def write_report(out: Path, name: str, report: dict[str, Any], markdown: Callable[[dict[str, Any]], str]) -> None:
    """``out/<name>.json`` and ``out/<name>.md``; the markdown is printed too."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (out / f"{name}.md").write_text(text)
    print(text)


def machine() -> str:
    """The machine, and its load now: other work on a shared machine stretches every wall-clock figure."""
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load average {load} at the end"
    )
