"""``facefusion-worker``: prepare, swap-span, merge, run and serve, as a thin layer over ``facefusion_provider.worker``.

Stdout carries one JSON line per command (what the orchestrator reads); logs go to stderr. A failure prints a one-line
JSON report to stderr (and to ``$FACEFUSION_TERMINATION_LOG``, Kubernetes' termination message) and exits with the
failure class's code, so the exit code alone says whether a retry can help.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from types import FrameType
from typing import Any, NoReturn

from facefusion_provider import worker
from facefusion_provider.contract import (
    TERMINATION_LOG_VARIABLE,
    WorkerSettings,
    build_parser,
    failure_report,
    termination_log,
    using_worker_settings,
)
from facefusion_provider.exceptions import EXIT_OK, FaceFusionError, InvalidOptionError
from facefusion_provider.options import options_from_namespace
from facefusion_provider.telemetry.metrics import worker_metrics
from facefusion_provider.work.access import run_held


def execute(args: argparse.Namespace, settings: WorkerSettings) -> dict[str, Any]:
    """Run the parsed command; returns the JSON-ready summary printed on stdout."""

    if args.command in ("prepare", "swap-span", "merge"):
        with run_held(args.work_uri, settings.run_key) as guard:
            return _run_command(args, settings, guard)
    if args.command == "serve":
        return asdict(worker.serve(args.work_root, args.models_dir, idle_exit=args.idle_exit))
    result = worker.run(
        args.source,
        args.target,
        args.output,
        args.work_root,
        keep_work=args.keep_work,
        models_dir=args.models_dir,
        options=options_from_namespace(args),
    )
    return asdict(result)


def _run_command(
    args: argparse.Namespace, settings: WorkerSettings, guard: Callable[[], None] | None
) -> dict[str, Any]:
    """A worker command of a run: prepare, swap-span or merge."""

    if args.command == "prepare":
        spec = worker.prepare(
            args.work_uri, args.source, args.target, options=options_from_namespace(args), models_dir=args.models_dir
        )
        return {"work_id": spec.work_id, "frames": spec.frame_end - spec.frame_start, "segments": len(spec.segments)}
    if args.command == "swap-span":
        first, last = args.segments
        result = worker.swap_span(
            args.work_uri,
            args.target,
            first,
            last,
            span=args.span,
            models_dir=args.models_dir,
            owner=settings.task_key,
            run_key=settings.run_key,
            guard=guard,
        )
        return asdict(result)
    merged = worker.merge(
        args.work_uri,
        args.target,
        args.output,
        models_dir=args.models_dir,
        owner=settings.task_key,
        guard=guard,
        run_key=settings.run_key,
    )
    return asdict(merged)


def _report(error: BaseException, report_path: str, *, counted: bool = True) -> int:
    code, report = failure_report(error)
    if counted:  # a no-op unless an exporter is configured; the exit hook pushes it with everything counted
        worker_metrics().failure(report.failure_class, retryable=report.retryable)
    line = report.line()
    print(line, file=sys.stderr)
    if report_path:
        try:
            with open(report_path, "w", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError as write_error:
            print(f"cannot write {TERMINATION_LOG_VARIABLE} {report_path}: {write_error}", file=sys.stderr)
    return code


def _terminate(signal_number: int, frame: FrameType | None) -> NoReturn:
    """SIGTERM (a deleted pod, a killed task): unwind like an error, so uploads are aborted and temporary files go."""
    signal.signal(signal_number, signal.SIG_IGN)  # a second one must not cut the clean-up short
    raise SystemExit(128 + signal_number)


def main(argv: Sequence[str] | None = None) -> int:
    # Before numpy loads: OpenBLAS starts a spinning thread per core for matrices too small to share.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    previous = signal.signal(signal.SIGTERM, _terminate)
    # Read before the settings are checked: a bad variable is reported where the orchestrator looks too.
    report_path = termination_log(os.environ)
    try:
        settings = WorkerSettings.from_environ(os.environ)  # the worker's one reading of its environment
        with using_worker_settings(settings):
            return _command(argv, settings, report_path)
    except InvalidOptionError as error:  # a bad variable: no settings to count the failure with
        return _report(error, report_path, counted=False)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _command(argv: Sequence[str] | None, settings: WorkerSettings, report_path: str) -> int:
    try:
        args = build_parser(settings.models_dir).parse_args(argv)
        logging.basicConfig(
            level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        summary = execute(args, settings)
    except Exception as error:  # every failure becomes a report and an exit code the orchestrator understands
        if not isinstance(error, FaceFusionError):
            logging.getLogger(__name__).exception("unexpected failure")
        return _report(error, report_path)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
