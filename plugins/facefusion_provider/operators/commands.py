"""What every backend shares about a worker command: its argv, its environment, when it has nothing to do, and how its
failure becomes a task failure. The local operator and the Kubernetes operator both build on these functions."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from facefusion_provider.exceptions import NON_RETRYABLE_EXIT_CODES, NonRetryableError
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.job.layout import WorkLayout
from facefusion_provider.job.leases import HELP_SECONDS_VARIABLE
from facefusion_provider.operators.run_metrics import worker_metric_environment
from facefusion_provider.options import Options, options_to_argv
from facefusion_provider.settings import load_settings
from facefusion_provider.storage.uris import ALLOWED_INPUT_PREFIXES_VARIABLE, ALLOWED_OUTPUT_PREFIXES_VARIABLE

WorkerCommand = Literal["prepare", "swap-span", "merge"]
WORKER_COMMANDS: tuple[WorkerCommand, ...] = ("prepare", "swap-span", "merge")

TRY_NUMBER_VARIABLE = "FACEFUSION_TRY_NUMBER"
FAULTS_VARIABLE = "FACEFUSION_TEST_FAULTS"
TERMINATION_LOG_VARIABLE = "FACEFUSION_TERMINATION_LOG"
TASK_KEY_VARIABLE = "FACEFUSION_TASK_KEY"


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


def task_key(context: Mapping[str, Any]) -> str:
    """``dag/run/task/map index`` of the running task: a retry's worker takes over its previous try's claims."""
    ti = context["ti"]
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}"


def worker_env(try_number: int, environ: Mapping[str, str], *, key: str = "") -> dict[str, str]:
    """Variables a worker command gets from its task: the try number, the task's key, the allow-lists, and the
    test-only fault switch when it is set."""
    settings = load_settings()
    env = {
        TRY_NUMBER_VARIABLE: str(try_number),
        ALLOWED_INPUT_PREFIXES_VARIABLE: ",".join(settings.allowed_input_prefixes),
        ALLOWED_OUTPUT_PREFIXES_VARIABLE: ",".join(settings.allowed_output_prefixes),
    }
    if key:
        env[TASK_KEY_VARIABLE] = key
    if settings.help_other_runs_seconds > 0:
        env[HELP_SECONDS_VARIABLE] = f"{settings.help_other_runs_seconds:g}"
    if faults := environ.get(FAULTS_VARIABLE):
        env[FAULTS_VARIABLE] = faults
    return env


def task_worker_env(context: Mapping[str, Any], environ: Mapping[str, str], work_uri: str) -> dict[str, str]:
    """Everything a worker command gets from its running task, on every backend: ``worker_env`` and the variables of
    its metrics (where to push them, and the labels that name this task; the job is the work)."""
    ti = context["ti"]
    metric_env = worker_metric_environment(ti, environ, job_id=WorkLayout(work_uri).work_id)
    return {**worker_env(int(ti.try_number), environ, key=task_key(context)), **metric_env}


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


FAILURE_XCOM_KEY = "failure"  # what a task that failed for good pushes, for whoever started the run (ingestion)


def raise_for_failure(failure: WorkerFailure, context: Mapping[str, Any] | None = None) -> NoReturn:
    """Fail the task with ``failure_exception``; a non-retryable failure is also recorded as the task's ``failure``
    XCom, so ingestion never retries bad input."""
    if not failure.retryable and context is not None:
        record_failure(context, failure.failure_class, failure.message)
    raise failure_exception(failure)


def record_failure(context: Mapping[str, Any], failure_class: str, message: str) -> None:
    context["ti"].xcom_push(key=FAILURE_XCOM_KEY, value={"failure_class": failure_class, "message": message})


@contextlib.contextmanager
def fail_on_bad_input(context: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Bad input or a broken job raised on the Airflow side fails the task without retries, with the error's message
    (recorded as the task's ``failure`` XCom when ``context`` is given)."""
    try:
        yield
    except NonRetryableError as error:
        if context is not None:
            record_failure(context, error.failure_class, str(error))
        raise AirflowFailException(str(error)) from error


def completed_work(
    hook: FaceFusionStorageHook,
    command: str,
    work_uri: str,
    output_uri: str,
    span: Mapping[str, Any] | None = None,
) -> str | None:
    """Why ``command`` has nothing left to do for this run, or None when it must run. Checked before launching
    anything: an output whose marker names this work (even after cleanup removed the work), a prepared work, or a span
    whose every segment is committed, needs no process and no pod."""
    work_id = WorkLayout(work_uri).work_id
    if hook.output_done(output_uri, work_id) is not None:
        return f"{output_uri} already holds the output of work {work_id}"
    if command == "prepare" and hook.is_prepared(work_uri):
        return f"work {work_id} is already prepared"
    if command == "swap-span":
        if span is None:
            raise ValueError("swap-span needs its span")
        committed = hook.committed_segments(work_uri)
        if all(index in committed for index in range(int(span["first"]), int(span["last"]))):
            return f"every segment of span {span['index']} ({span.get('label', '')}) is committed"
    return None
