"""What every backend shares about a worker command: its argv, its environment, when it has nothing to do, and how its
failure becomes a task failure. The local operator and the Kubernetes operator both build on these functions."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from facefusion_provider.exceptions import NON_RETRYABLE_EXIT_CODES, NonRetryableError
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.options import Options, options_to_argv

WorkerCommand = Literal["prepare", "swap-chunk", "merge"]
WORKER_COMMANDS: tuple[WorkerCommand, ...] = ("prepare", "swap-chunk", "merge")

TRY_NUMBER_VARIABLE = "FACEFUSION_TRY_NUMBER"
FAULTS_VARIABLE = "FACEFUSION_TEST_FAULTS"
TERMINATION_LOG_VARIABLE = "FACEFUSION_TERMINATION_LOG"


def worker_argv(command: str, job_uri: str, *, index: int | None = None, worker_args: Sequence[str] = ()) -> list[str]:
    """The worker's arguments after the program name, identical for a subprocess and a pod."""
    if command not in WORKER_COMMANDS:
        raise ValueError(f"unknown worker command {command!r}; expected one of {', '.join(WORKER_COMMANDS)}")
    if (command == "swap-chunk") != (index is not None):
        raise ValueError(f"{command}: a chunk index is required for swap-chunk and only for it")
    argv = [command, "--job-uri", job_uri]
    if index is not None:
        argv += ["--index", str(index)]
    return argv + [str(arg) for arg in worker_args]


def prepare_worker_args(
    source_uris: Sequence[str], target_uri: str, output_uri: str, options: Options, *, chunk_wave: int = 0
) -> list[str]:
    """The flags of ``prepare`` after ``--job-uri``: inputs, output, the chunk wave when set, and every option that
    differs from its default."""
    argv: list[str] = []
    for source in source_uris:
        argv += ["--source", source]
    wave = ["--chunk-wave", str(chunk_wave)] if chunk_wave else []
    return [*argv, "--target", target_uri, "--output", output_uri, *wave, *options_to_argv(options)]


def worker_env(try_number: int, environ: Mapping[str, str]) -> dict[str, str]:
    """Variables a worker command gets from its task: the try number, and the test-only fault switch when it is set."""
    env = {TRY_NUMBER_VARIABLE: str(try_number)}
    if faults := environ.get(FAULTS_VARIABLE):
        env[FAULTS_VARIABLE] = faults
    return env


@dataclass(frozen=True)
class WorkerFailure:
    """A worker command that did not succeed: what it reported, and whether a retry can help."""

    exit_code: int | None
    failure_class: str
    retryable: bool
    message: str

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
    return WorkerFailure(exit_code, failure_class, retryable, message)


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


def failure_exception(failure: WorkerFailure, where: str = "") -> AirflowException:
    """The task failure for ``failure`` (``where`` is appended to its message): a non-retryable failure fails the task
    at once (no retries); any other failure lets Airflow retry."""
    if failure.retryable:
        return AirflowException(failure.describe() + where)
    return AirflowFailException(failure.describe() + where)


def raise_for_failure(failure: WorkerFailure) -> NoReturn:
    """Fail the task with ``failure_exception``."""
    raise failure_exception(failure)


@contextlib.contextmanager
def fail_on_bad_input() -> Iterator[None]:
    """Bad input or a broken job raised on the Airflow side fails the task without retries, with the error's message."""
    try:
        yield
    except NonRetryableError as error:
        raise AirflowFailException(str(error)) from error


def prepared_output(worker_args: Sequence[str]) -> str | None:
    """The ``--output`` of ``prepare``'s flags (as ``prepare_worker_args`` writes them)."""
    args = list(worker_args)
    return args[args.index("--output") + 1] if "--output" in args[:-1] else None


def completed_work(
    hook: FaceFusionStorageHook,
    command: str,
    job_uri: str,
    index: int | None = None,
    *,
    worker_args: Sequence[str] = (),
) -> str | None:
    """Why ``command`` has nothing left to do for this job, or None when it must run. Checked before launching anything:
    a prepared job for the same output, a committed chunk, or an output whose marker names this job, needs no process
    and no pod."""
    if command == "prepare":
        job = hook.find_job(job_uri)
        if job is None or job.output_uri != prepared_output(worker_args):
            return None  # the worker prepares the job, or points the prepared one at this run's output
        return f"job {job.job_id} is already prepared ({len(job.chunks)} chunks)"
    if command == "swap-chunk":
        if index is None:
            raise ValueError("swap-chunk needs a chunk index")
        if marker := hook.chunk_marker(job_uri, index):
            return f"chunk {index} (frames {marker.start}-{marker.end - 1}) is already committed"
    job = hook.find_job(job_uri)
    if job and hook.output_is_current(job.output_uri, job.job_id):
        return f"{job.output_uri} already holds the output of job {job.job_id}"
    return None
