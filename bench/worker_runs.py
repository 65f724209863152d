"""What the benchmarks share: the worker CLI run as its own process, timed (and measured under ``/usr/bin/time``), a
report written as JSON and text, and the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKER = [sys.executable, "-m", "facefusion_provider.worker"]
WORKER_PROGRAM = str(Path(sys.executable).parent / "facefusion-worker")  # its console script, as a pod runs it
TIME_FORMAT = "%U %S %M"  # /usr/bin/time's user seconds, system seconds, peak resident kilobytes


@dataclass(frozen=True)
class MeasuredRun:
    seconds: float  # wall clock
    cpu_s: float  # user + system, every thread of the process
    peak_rss_mib: float
    stdout: str


def run_worker(args: list[str], env: dict[str, str]) -> tuple[float, str, str]:
    """Seconds, stdout and stderr of one ``facefusion-worker`` command; a failure raises with the end of its log."""
    started = time.perf_counter()
    result = subprocess.run([*WORKER, *args], env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {result.stderr[-2000:]}")
    return time.perf_counter() - started, result.stdout, result.stderr


def measured_run(command: Sequence[str], name: str) -> MeasuredRun:
    """``command`` (a ``facefusion-worker`` command line) run under ``/usr/bin/time``; a failure raises naming it, with
    the end of its log."""
    with tempfile.TemporaryDirectory() as folder:
        timing = Path(folder) / "time.txt"
        started = time.perf_counter()
        result = subprocess.run(
            ["/usr/bin/time", "-f", TIME_FORMAT, "-o", str(timing), *command],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
        if result.returncode != 0:
            raise RuntimeError(f"{name} failed (exit {result.returncode}): {result.stderr[-4000:]}")
        user, system, peak_kib = timing.read_text().split()[-3:]
    return MeasuredRun(seconds, float(user) + float(system), int(peak_kib) / 1024, result.stdout)


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
