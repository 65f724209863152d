"""The worker command under ``bench_serial.py``: ``facefusion-worker`` in this process, timed from the process's start.

``[facefusion] worker_command`` points here, so every worker a ``dags test`` run starts writes one JSON line to
``$SERIAL_PROBE_LOG``: the command, the process's start (from ``/proc``), when its CLI was imported, when its first and
last frame reached the encoder, the wall and CPU seconds of a few named steps (wrapped when their module is imported,
so the import timing is the worker's own), its CPU (user + sys) and its exit. The worker itself is unchanged.

    python bench/serial_probe.py swap-span --work-uri ...   # as facefusion-worker swap-span --work-uri ...
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

LOG_VARIABLE = "SERIAL_PROBE_LOG"
# Named steps, by module: each function's calls summed (wall and this process's CPU). Missing ones are skipped, so
# the same probe times an older commit too.
STEPS: dict[str, tuple[str, ...]] = {
    "facefusion_provider.worker.prepare": (
        "content_ids",
        "_probe_video_target",
        "output_frame_size",
        "_analysis_id",
        "_identity",
    ),
    "facefusion_provider.output.merge": ("_committed", "damaged_segments", "plan_join", "_remux"),
    "facefusion_provider.output.publish": ("finish_merge",),
    "facefusion_provider.worker.span": ("frame_work",),
}
FIRST_FRAME_MODULE = "facefusion_provider.worker.pipeline"

record: dict[str, Any] = {"argv": sys.argv[1:], "steps": {}}


def process_started() -> float:
    """This process's start on the wall clock (``/proc/self/stat`` field 22, in clock ticks after boot)."""
    with open("/proc/self/stat") as handle:
        ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as handle:
        uptime = float(handle.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.time(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            step = record["steps"].setdefault(name, {"wall_s": 0.0, "cpu_s": 0.0, "calls": 0, "first_at": wall})
            step["wall_s"] += time.time() - wall
            step["cpu_s"] += time.process_time() - cpu
            step["calls"] += 1

    return wrapper


def wrap_steps(module: ModuleType) -> None:
    for name in STEPS.get(module.__name__, ()):
        function = getattr(module, name, None)
        if callable(function):
            setattr(module, name, timed(f"{module.__name__.rsplit('.', 1)[1]}.{name}", function))
    if module.__name__ == FIRST_FRAME_MODULE:
        run_pipeline = module.run_pipeline

        @functools.wraps(run_pipeline)
        def first_frame(frames: Any, encode: Callable[..., None], processor: Any) -> Any:
            def encode_timed(*args: Any) -> None:
                now = time.time()
                record.setdefault("first_frame_at", now)
                encode(*args)
                record["last_frame_at"] = time.time()

            return run_pipeline(frames, encode_timed, processor)

        module.run_pipeline = first_frame  # type: ignore[attr-defined]


class AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the named steps of a module once it has been executed (its import timed as the worker's own)."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name not in STEPS and name != FIRST_FRAME_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            wrap_steps(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def write_record(exit_code: int) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record.update(exited_at=time.time(), exit_code=exit_code, cpu_s=usage.ru_utime + usage.ru_stime)
    record["max_rss_mib"] = usage.ru_maxrss / 1024
    with open(os.environ[LOG_VARIABLE], "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def main() -> int:
    record["started_at"] = process_started()
    record["probe_at"] = time.time()  # the interpreter up, the probe's own imports done
    sys.meta_path.insert(0, AfterImport())
    cpu = time.process_time()
    from facefusion_provider.worker.cli import main as worker_main

    record["imported_at"] = time.time()
    record["import_cpu_s"] = time.process_time() - cpu
    cli = sys.modules["facefusion_provider.worker.cli"]
    execute = cli.execute  # the summary the worker prints, kept for the report

    def summarised(*args: Any) -> Any:
        record["summary"] = summary = execute(*args)
        return summary

    setattr(cli, "execute", summarised)  # noqa: B010 (a module's attribute, replaced)
    code = 1
    atexit.register(lambda: write_record(code))  # after the worker's own exit hooks registered later have run
    code = worker_main(sys.argv[1:])
    return code


if __name__ == "__main__":
    sys.exit(main())
