"""The contract between the operators and ``facefusion-worker``, in one place: the environment variables, the argv
(built by the operators, parsed by the worker), the failure report, the progress line, and the worker's settings read
from its environment. Shared by both sides: stdlib, pydantic and the options model only (no Airflow, no media).

``WorkerSettings`` is the only reader of the worker's ``FACEFUSION_*`` variables: the worker reads them once at its
start and installs them (``using_worker_settings``); its modules ask ``worker_settings()`` instead of the environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from facefusion_provider.exceptions import (
    EXIT_INTERNAL,
    NON_RETRYABLE_EXIT_CODES,
    RETRIES_AT_MOST_BY_CLASS,
    RETRIES_AT_MOST_BY_EXIT_CODE,
    FaceFusionError,
    InvalidOptionError,
    StorageFullError,
    is_no_space,
)
from facefusion_provider.options import Options, add_option_arguments, options_to_argv

# What the operators set for a worker command.
TRY_NUMBER_VARIABLE = "FACEFUSION_TRY_NUMBER"
TASK_KEY_VARIABLE = "FACEFUSION_TASK_KEY"  # dag/run/task/map index: a retry takes over its previous try's claims
RUN_KEY_VARIABLE = "FACEFUSION_RUN_KEY"  # the run's lease key, decided once by validate
TERMINATION_LOG_VARIABLE = "FACEFUSION_TERMINATION_LOG"
ALLOWED_INPUT_PREFIXES_VARIABLE = "FACEFUSION_ALLOWED_INPUT_PREFIXES"
ALLOWED_OUTPUT_PREFIXES_VARIABLE = "FACEFUSION_ALLOWED_OUTPUT_PREFIXES"
HELP_SECONDS_VARIABLE = "FACEFUSION_HELP_OTHER_RUNS_SECONDS"  # a span worker then works other live runs (0: none)
CLAIM_LEASE_SECONDS_VARIABLE = "FACEFUSION_CLAIM_LEASE_SECONDS"
RUN_LEASE_SECONDS_VARIABLE = "FACEFUSION_RUN_LEASE_SECONDS"  # the CLI run's lease TTL (tests shorten it)
METRIC_DAG_ID_VARIABLE = "FACEFUSION_METRIC_DAG_ID"
METRIC_RUN_ID_VARIABLE = "FACEFUSION_METRIC_RUN_ID"
METRIC_TASK_ID_VARIABLE = "FACEFUSION_METRIC_TASK_ID"
METRIC_MAP_INDEX_VARIABLE = "FACEFUSION_METRIC_MAP_INDEX"
METRIC_WORK_ID_VARIABLE = "FACEFUSION_METRIC_WORK_ID"
METRICS_REMOTE_WRITE_URL_VARIABLE = "FACEFUSION_METRICS_REMOTE_WRITE_URL"
# Where models come from (a pod gets them from its volumes and settings).
MODELS_DIR_VARIABLE = "FACEFUSION_MODELS_DIR"
MODELS_URI_VARIABLE = "FACEFUSION_MODELS_URI"
MODELS_CACHE_VARIABLE = "FACEFUSION_MODELS_CACHE"
TRT_CACHE_VARIABLE = "FACEFUSION_TRT_CACHE"
# Storage and tuning a deployment sets on the worker.
S3_ENDPOINT_VARIABLE = "FACEFUSION_S3_ENDPOINT_URL"
S3_MAX_ATTEMPTS_VARIABLE = "FACEFUSION_S3_MAX_ATTEMPTS"
S3_READ_BLOCK_VARIABLE = "FACEFUSION_S3_READ_BLOCK_BYTES"
INPUT_CACHE_DIR_VARIABLE = "FACEFUSION_INPUT_CACHE_DIR"
INPUT_CACHE_MAX_BYTES_VARIABLE = "FACEFUSION_INPUT_CACHE_MAX_BYTES"
MERGE_PREFETCH_VARIABLE = "FACEFUSION_MERGE_PREFETCH"
GPU_MODEL_VARIABLE = "FACEFUSION_GPU_MODEL"  # the worker's GPU model when the driver cannot say (media/hardware.py)

WorkerCommand = Literal["prepare", "swap-span", "merge"]
WORKER_COMMANDS: tuple[WorkerCommand, ...] = ("prepare", "swap-span", "merge")
PROGRAM = "facefusion-worker"
LOG_LEVELS = ("debug", "info", "warning", "error")


class WorkerSettings(BaseModel):
    """Everything the worker reads from its environment, read once at its start (``from_environ(os.environ)``)."""

    model_config = ConfigDict(frozen=True)

    try_number: int = Field(default=1, ge=1)
    task_key: str = ""
    run_key: str = ""
    termination_log: str = ""
    models_dir: str | None = None
    models_uri: str | None = None
    models_cache: str | None = None
    trt_cache: str | None = None
    allowed_input_prefixes: tuple[str, ...] = ()
    allowed_output_prefixes: tuple[str, ...] = ()
    help_other_runs_seconds: float = Field(default=0.0, ge=0)
    claim_lease_seconds: float | None = Field(default=None, gt=0)
    run_lease_seconds: float | None = Field(default=None, gt=0)
    s3_endpoint_url: str | None = None
    s3_max_attempts: int | None = Field(default=None, ge=1)
    s3_read_block_bytes: int | None = Field(default=None, ge=1)
    input_cache_dir: str | None = None
    input_cache_max_bytes: int | None = Field(default=None, ge=0)
    merge_prefetch: int | None = Field(default=None, ge=1)
    metrics_remote_write_url: str | None = None
    metric_dag_id: str = ""
    metric_run_id: str = ""
    metric_task_id: str = ""
    metric_map_index: str = ""
    metric_work_id: str = ""
    gpu_model: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> WorkerSettings:
        """The settings in ``environ``; an unset or empty variable keeps its default. A bad value raises
        ``InvalidOptionError`` naming the variable."""
        values: dict[str, Any] = {}
        for field, variable in _FIELD_VARIABLES.items():
            text = _text(environ, variable)
            if not text:
                continue
            values[field] = split_prefixes(text) if field.startswith("allowed_") else text
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise InvalidOptionError("; ".join(_describe(problem) for problem in error.errors())) from None


def termination_log(environ: Mapping[str, str]) -> str:
    """Where the worker writes its failure report, read apart from the rest: a bad setting is reported there too."""
    return _text(environ, TERMINATION_LOG_VARIABLE)


class _Installed:
    """The settings the worker installed at its start (``using_worker_settings``), if any."""

    settings: WorkerSettings | None = None


def worker_settings() -> WorkerSettings:
    """This process's worker settings: the ones installed at the worker's start, else (a library caller, a test)
    the environment's now."""
    installed = _Installed.settings
    return installed if installed is not None else WorkerSettings.from_environ(os.environ)


@contextlib.contextmanager
def using_worker_settings(settings: WorkerSettings) -> Iterator[WorkerSettings]:
    """Install ``settings`` as this process's worker settings for the ``with`` block (the worker's command)."""
    previous, _Installed.settings = _Installed.settings, settings
    try:
        yield settings
    finally:
        _Installed.settings = previous


_FIELD_VARIABLES: dict[str, str] = {
    "try_number": TRY_NUMBER_VARIABLE,
    "task_key": TASK_KEY_VARIABLE,
    "run_key": RUN_KEY_VARIABLE,
    "termination_log": TERMINATION_LOG_VARIABLE,
    "models_dir": MODELS_DIR_VARIABLE,
    "models_uri": MODELS_URI_VARIABLE,
    "models_cache": MODELS_CACHE_VARIABLE,
    "trt_cache": TRT_CACHE_VARIABLE,
    "allowed_input_prefixes": ALLOWED_INPUT_PREFIXES_VARIABLE,
    "allowed_output_prefixes": ALLOWED_OUTPUT_PREFIXES_VARIABLE,
    "help_other_runs_seconds": HELP_SECONDS_VARIABLE,
    "claim_lease_seconds": CLAIM_LEASE_SECONDS_VARIABLE,
    "run_lease_seconds": RUN_LEASE_SECONDS_VARIABLE,
    "s3_endpoint_url": S3_ENDPOINT_VARIABLE,
    "s3_max_attempts": S3_MAX_ATTEMPTS_VARIABLE,
    "s3_read_block_bytes": S3_READ_BLOCK_VARIABLE,
    "input_cache_dir": INPUT_CACHE_DIR_VARIABLE,
    "input_cache_max_bytes": INPUT_CACHE_MAX_BYTES_VARIABLE,
    "merge_prefetch": MERGE_PREFETCH_VARIABLE,
    "metrics_remote_write_url": METRICS_REMOTE_WRITE_URL_VARIABLE,
    "metric_dag_id": METRIC_DAG_ID_VARIABLE,
    "metric_run_id": METRIC_RUN_ID_VARIABLE,
    "metric_task_id": METRIC_TASK_ID_VARIABLE,
    "metric_map_index": METRIC_MAP_INDEX_VARIABLE,
    "metric_work_id": METRIC_WORK_ID_VARIABLE,
    "gpu_model": GPU_MODEL_VARIABLE,
}


def _text(environ: Mapping[str, str], variable: str) -> str:
    return environ.get(variable, "").strip()


def split_prefixes(text: str) -> tuple[str, ...]:
    """A comma-separated list of prefixes as written (``storage.normalize_prefixes`` checks each)."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _describe(problem: Any) -> str:
    """One bad variable, named as the user set it: ``FACEFUSION_MERGE_PREFETCH: ..., got '0'``."""
    field = str(problem["loc"][0]) if problem["loc"] else ""
    return f"{_FIELD_VARIABLES.get(field, field)}: {problem['msg'].lower()}, got {problem['input']!r}"


# The argv: built by the operators, parsed by the worker.


def worker_argv(command: str, work_uri: str, worker_args: Sequence[str] = ()) -> list[str]:
    """The worker's arguments after the program name, identical for a subprocess and a pod."""
    if command not in WORKER_COMMANDS:
        raise ValueError(f"unknown worker command {command!r}; expected one of {', '.join(WORKER_COMMANDS)}")
    return [command, "--work-uri", work_uri, *(str(arg) for arg in worker_args)]


def prepare_worker_args(source_uris: Sequence[str], target_uri: str, options: Options) -> list[str]:
    """The flags of ``prepare`` after ``--work-uri``: inputs and every option that differs from its default."""
    argv: list[str] = []
    for source in source_uris:
        argv += ["--source", source]
    return [*argv, "--target", target_uri, *options_to_argv(options)]


def span_worker_args(target_uri: str, span: Mapping[str, Any]) -> list[str]:
    """The flags of ``swap-span``: this run's target and the span (one item of ``plan``'s list)."""
    return ["--target", target_uri, "--segments", f"{span['first']}:{span['last']}", "--span", str(span["index"])]


def merge_worker_args(target_uri: str, output_uri: str) -> list[str]:
    return ["--target", target_uri, "--output", output_uri]


class _Parser(argparse.ArgumentParser):
    """argparse that raises InvalidOptionError (exit code EXIT_INVALID_OPTION) instead of exiting with 2, and takes
    no abbreviated flags (``--output`` must never be read as ``--output-video-quality``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        raise InvalidOptionError(f"{self.prog}: {message}")


def build_parser(models_dir_default: str | None = None) -> argparse.ArgumentParser:
    """The worker's argv parser; ``--models-dir`` defaults to ``models_dir_default`` (the worker's settings)."""
    parser = _Parser(
        prog=PROGRAM, description="Swap faces in a video, segment by segment (see `facefusion-worker run -h`)."
    )
    _add_global_arguments(parser, models_dir_default)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{prepare,swap-span,merge,run,serve}")

    prepare = commands.add_parser(
        "prepare", help="probe the target, plan the segments, compute the identity, write the shared work.json"
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
    merge.add_argument(
        "--output",
        required=True,
        metavar="OUT",
        help="this run's output (.mp4, .mov, .mkv, ...; an image's: .png, .jpg, .webp)",
    )

    run = commands.add_parser("run", help="prepare, every segment and merge in this process")
    _add_input_arguments(run)
    run.add_argument(
        "--output",
        required=True,
        metavar="OUT",
        help="output video (.mp4, .mov, .mkv, ...), or image for an image target",
    )
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
        _add_global_arguments(command, None, suppress=True)
    return parser


def parse_worker_argv(argv: Sequence[str], models_dir_default: str | None = None) -> argparse.Namespace:
    """The worker's reading of ``argv`` (after the program name); bad argv raises ``InvalidOptionError``."""
    return build_parser(models_dir_default).parse_args(list(argv))


def _add_global_arguments(parser: argparse.ArgumentParser, models_dir: str | None, *, suppress: bool = False) -> None:
    """Global flags, accepted before or after the command name."""
    group = parser.add_argument_group("global")
    group.add_argument(
        "--models-dir",
        default=argparse.SUPPRESS if suppress else models_dir,
        help=f"folder or URI of model files (default: ${MODELS_DIR_VARIABLE})",
    )
    group.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=argparse.SUPPRESS if suppress else "info",
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
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="FILE",
        help="source face image, or a voice (an audio file) for lip sync (repeatable)",
    )
    parser.add_argument("--target", required=True, metavar="TARGET", help="target video, or image (.jpg, .png, .webp)")


# The failure report: one JSON line on stderr and in the termination log.


class FailureReport(BaseModel):
    failure_class: str
    retryable: bool
    message: str

    def line(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)


def failure_report(error: BaseException) -> tuple[int, FailureReport]:
    """The exit code and the report for ``error``; a full disk that nothing named is named by its file."""
    if isinstance(error, OSError) and is_no_space(error):
        error = StorageFullError.of(error)
    if isinstance(error, FaceFusionError):
        report = FailureReport(failure_class=error.failure_class, retryable=error.retryable, message=str(error))
        return error.exit_code, report
    message = f"{type(error).__name__}: {error}"
    return EXIT_INTERNAL, FailureReport(failure_class="internal", retryable=True, message=message)


@dataclass(frozen=True)
class WorkerFailure:
    """A worker command that did not succeed: what it reported, and whether a retry can help."""

    exit_code: int | None
    failure_class: str
    retryable: bool
    message: str
    retries_at_most: int | None = None  # fewer than the task's retries (a full disk: one)

    def retried_enough(self, try_number: int) -> bool:
        """Whether this failure, in try ``try_number`` (the first is 1), has had all the retries its class gets."""
        return self.retries_at_most is not None and try_number > self.retries_at_most

    def describe(self) -> str:
        code = "" if self.exit_code is None else f", exit code {self.exit_code}"
        return f"worker failed ({self.failure_class}{code}): {self.message}"


def parse_failure_report(exit_code: int | None, report: str | None) -> WorkerFailure:
    """Read the worker's one-line JSON report. The exit code decides retries when there is one (bad input never
    retries); without one (a pod's termination message alone) the report's ``retryable`` does."""
    details = _report_fields(report)
    if exit_code is not None and exit_code < 0:
        name = signal.Signals(-exit_code).name if -exit_code in signal.valid_signals() else str(-exit_code)
        return WorkerFailure(exit_code, "killed", True, f"worker killed by signal {name} (out of memory or stopped)")
    if exit_code is not None:
        retryable = exit_code not in NON_RETRYABLE_EXIT_CODES
    else:
        retryable = bool(details.get("retryable", True))
    failure_class = str(details.get("failure_class") or ("retryable" if retryable else "invalid_input"))
    message = str(details.get("message") or (report or "").strip() or "no failure report")
    if exit_code is not None:
        retries_at_most = RETRIES_AT_MOST_BY_EXIT_CODE.get(exit_code)
    else:
        retries_at_most = RETRIES_AT_MOST_BY_CLASS.get(failure_class)
    return WorkerFailure(exit_code, failure_class, retryable, message, retries_at_most)


def _report_fields(report: str | None) -> dict[str, object]:
    """The last line of ``report`` that is a JSON object with a ``failure_class``, or nothing."""
    for line in reversed((report or "").strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "failure_class" in value:
            return value
    return {}


# The progress line: a span's worker writes one at each commit.

PROGRESS_PREFIX = "facefusion.progress "  # a worker log line with this, then the JSON of a ``SpanProgress``


class SpanProgress(BaseModel):
    model_config = ConfigDict(extra="forbid")

    span: int
    segments_committed: int  # of the span's own segments, by any worker
    segments_total: int
    committed_here: int  # segments this worker committed, its own and other spans'
    frames_done: int  # frames this worker encoded

    def line(self) -> str:
        return PROGRESS_PREFIX + self.model_dump_json()


def progress_in_line(line: str) -> dict[str, Any] | None:
    """The progress a worker log line carries (anywhere in it: a pod's log may prefix it), or None."""
    position = line.find(PROGRESS_PREFIX)
    if position < 0:
        return None
    try:
        progress = json.loads(line[position + len(PROGRESS_PREFIX) :])
    except ValueError:
        return None
    return progress if isinstance(progress, dict) else None
