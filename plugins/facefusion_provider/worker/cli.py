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
from collections.abc import Sequence
from dataclasses import asdict
from types import FrameType
from typing import Any, NoReturn

from facefusion_provider.exceptions import EXIT_INTERNAL, EXIT_OK, FaceFusionError, InvalidOptionError
from facefusion_provider.options import add_option_arguments, options_from_namespace
from facefusion_provider.worker.metrics import worker_metrics

TERMINATION_LOG_VARIABLE = "FACEFUSION_TERMINATION_LOG"
MODELS_DIR_VARIABLE = "FACEFUSION_MODELS_DIR"
TASK_KEY_VARIABLE = "FACEFUSION_TASK_KEY"  # dag/run/task/map index of the Airflow task, set by the operators
LOG_LEVELS = ("debug", "info", "warning", "error")
PROGRAM = "facefusion-worker"


class _Parser(argparse.ArgumentParser):
    """argparse that raises InvalidOptionError (exit code EXIT_INVALID_OPTION) instead of exiting with 2, and takes
    no abbreviated flags (``--output`` must never be read as ``--output-video-quality``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        raise InvalidOptionError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROGRAM, description="Swap faces in a video, segment by segment (see `facefusion-worker run -h`)."
    )
    _add_global_arguments(parser, defaults=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{prepare,swap-span,merge,run,serve}")

    prepare = commands.add_parser(
        "prepare", help="probe the target, plan the segments, compute the identity, write the shared job.json"
    )
    prepare.add_argument("--work-uri", required=True, help="work folder (path or fsspec URI), named by the work id")
    _add_input_arguments(prepare)
    add_option_arguments(prepare)

    swap = commands.add_parser(
        "swap-span", help="work a span's segments, committing each; then help other spans (committed ones are skipped)"
    )
    swap.add_argument("--work-uri", required=True, help="work folder written by prepare")
    swap.add_argument("--target", required=True, metavar="VIDEO", help="this run's target video (same content)")
    swap.add_argument(
        "--segments", required=True, type=_segment_range, metavar="FIRST:LAST", help="segments [FIRST, LAST)"
    )
    swap.add_argument("--span", type=_non_negative, default=0, metavar="N", help="the span's index (logs, faults)")

    merge = commands.add_parser("merge", help="remux the committed segments with the target's audio into the output")
    merge.add_argument("--work-uri", required=True, help="work folder written by prepare")
    merge.add_argument("--target", required=True, metavar="VIDEO", help="this run's target video (its audio)")
    merge.add_argument("--output", required=True, metavar="OUT", help="this run's output video (.mp4, .mov, .mkv, ...)")

    run = commands.add_parser("run", help="prepare, every segment and merge in this process")
    _add_input_arguments(run)
    run.add_argument("--output", required=True, metavar="OUT", help="output video (.mp4, .mov, .mkv, ...)")
    run.add_argument(
        "--work-root", default=None, help="where work folders go (default: $XDG_CACHE_HOME/facefusion-provider)"
    )
    run.add_argument("--keep-work", action="store_true", help="keep the work folder after success")
    add_option_arguments(run)

    serve = commands.add_parser(
        "serve", help="a standing worker: work the free segments of every live run under a work root, until stopped"
    )
    serve.add_argument("--work-root", required=True, help="the [facefusion] work_root the runs use")
    serve.add_argument(
        "--idle-exit", type=float, default=None, metavar="SECONDS", help="exit after this long with nothing to do"
    )

    for command in (prepare, swap, merge, run, serve):
        _add_global_arguments(command, defaults=False)
    return parser


def _add_global_arguments(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """Global flags, accepted before or after the command name."""
    group = parser.add_argument_group("global")
    group.add_argument(
        "--models-dir",
        default=os.environ.get(MODELS_DIR_VARIABLE) if defaults else argparse.SUPPRESS,
        help=f"folder or URI of model files (default: ${MODELS_DIR_VARIABLE})",
    )
    group.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info" if defaults else argparse.SUPPRESS,
        help="log verbosity on stderr",
    )


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _segment_range(text: str) -> tuple[int, int]:
    first, separator, last = text.partition(":")
    if not separator or not first.isdigit() or not last.isdigit() or int(last) <= int(first):
        raise argparse.ArgumentTypeError(f"expected FIRST:LAST with FIRST < LAST, got {text!r}")
    return int(first), int(last)


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", action="append", default=[], metavar="IMG", help="source face image (repeatable)")
    parser.add_argument("--target", required=True, metavar="VIDEO", help="target video")


def execute(args: argparse.Namespace) -> dict[str, Any]:
    """Run the parsed command; returns the JSON-ready summary printed on stdout."""
    from facefusion_provider import worker

    if args.command == "prepare":
        spec = worker.prepare(
            args.work_uri, args.source, args.target, options=options_from_namespace(args), models_dir=args.models_dir
        )
        return {"work_id": spec.work_id, "frames": spec.frame_end - spec.frame_start, "segments": len(spec.segments)}
    if args.command == "swap-span":
        first, last = args.segments
        owner = os.environ.get(TASK_KEY_VARIABLE, "")
        return asdict(
            worker.swap_span(
                args.work_uri, args.target, first, last, span=args.span, models_dir=args.models_dir, owner=owner
            )
        )
    if args.command == "merge":
        return asdict(worker.merge(args.work_uri, args.target, args.output))
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


def failure_report(error: BaseException) -> tuple[int, dict[str, Any]]:
    """The exit code and the one-line JSON report for ``error``."""
    if isinstance(error, FaceFusionError):
        return error.exit_code, {
            "failure_class": error.failure_class,
            "retryable": error.retryable,
            "message": str(error),
        }
    message = f"{type(error).__name__}: {error}"
    return EXIT_INTERNAL, {"failure_class": "internal", "retryable": True, "message": message}


def _report(error: BaseException) -> int:
    code, report = failure_report(error)
    # A no-op unless an exporter is configured; the exit hook pushes it with everything the command counted.
    worker_metrics().failure(report["failure_class"], retryable=report["retryable"])
    line = json.dumps(report, sort_keys=True)
    print(line, file=sys.stderr)
    termination_log = os.environ.get(TERMINATION_LOG_VARIABLE)
    if termination_log:
        try:
            with open(termination_log, "w", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError as write_error:
            print(f"cannot write {TERMINATION_LOG_VARIABLE} {termination_log}: {write_error}", file=sys.stderr)
    return code


def _terminate(signal_number: int, frame: FrameType | None) -> NoReturn:
    """SIGTERM (a deleted pod, a killed task): unwind like an error, so uploads are aborted and temporary files go."""
    signal.signal(signal_number, signal.SIG_IGN)  # a second one must not cut the clean-up short
    raise SystemExit(128 + signal_number)


def main(argv: Sequence[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(
            level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        summary = execute(args)
    except Exception as error:  # every failure becomes a report and an exit code the orchestrator understands
        if not isinstance(error, FaceFusionError):
            logging.getLogger(__name__).exception("unexpected failure")
        return _report(error)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
