"""What every backend shares about a worker command: the call it makes (argv and environment, from the worker
contract), when it has nothing to do, and how its failure becomes a task failure. The local operator and the
Kubernetes operator both build on these functions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from facefusion_provider.contract import (
    ALLOWED_INPUT_PREFIXES_VARIABLE,
    ALLOWED_OUTPUT_PREFIXES_VARIABLE,
    HELP_SECONDS_VARIABLE,
    RUN_KEY_VARIABLE,
    TASK_KEY_VARIABLE,
    TRY_NUMBER_VARIABLE,
    WorkerFailure,
    span_worker_args,
    worker_argv,
)
from facefusion_provider.exceptions import NonRetryableError
from facefusion_provider.hooks.run_metrics import worker_metric_environment
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.settings import load_settings
from facefusion_provider.work.layout import WorkLayout


@dataclass(frozen=True)
class WorkerCall:
    """One worker command of a task, with its templated fields rendered: ``prepare`` and ``merge`` carry their flags
    in ``worker_args``; ``swap-span`` carries this run's ``target_uri`` and its ``span`` (one item of plan's list).
    ``output_done`` is validate's finding, decided once per run and passed on; ``run_lease`` the lease validate wrote
    under ``run_key``, held again as the task starts."""

    command: str
    work_uri: str
    output_uri: str
    output_done: bool = False
    run_key: str = ""
    run_lease: Mapping[str, Any] | None = None
    worker_args: tuple[str, ...] = ()
    target_uri: str = ""
    span: Mapping[str, Any] | None = None

    @property
    def work_id(self) -> str:
        return WorkLayout(self.work_uri).work_id

    def argv(self) -> list[str]:
        """``<command> --work-uri URI [flags]``, identical for a subprocess and a pod."""
        flags = span_worker_args(self.target_uri, self.span) if self.span is not None else self.worker_args
        return worker_argv(self.command, self.work_uri, flags)


def worker_call(
    command: str,
    work_uri: str,
    output_uri: str,
    *,
    output_done: bool = False,
    run_key: str = "",
    run_lease: Mapping[str, Any] | None = None,
    worker_args: Sequence[Any] = (),
    target_uri: str | None = None,
    span: Mapping[str, Any] | None = None,
) -> WorkerCall:
    """The call of an operator's rendered fields; ``swap-span`` without its span or target is a DAG bug."""
    if command == "swap-span" and (span is None or not target_uri):
        raise ValueError("swap-span needs its span and this run's target_uri")
    return WorkerCall(
        command=command,
        work_uri=work_uri,
        output_uri=output_uri,
        output_done=bool(output_done),
        run_key=run_key,
        run_lease=run_lease,
        worker_args=tuple(str(arg) for arg in worker_args),
        target_uri=target_uri or "",
        span=span,
    )


def task_key(context: Mapping[str, Any]) -> str:
    """``dag/run/task/map index`` of the running task: a retry's worker takes over its previous try's claims."""
    ti = context["ti"]
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}"


def worker_call_of(operator: Any) -> WorkerCall:
    """The call a worker operator's fields describe (its templated fields, rendered), on either backend."""
    return worker_call(
        operator.command,
        operator.work_uri,
        operator.output_uri,
        output_done=operator.output_done,
        run_key=operator.run_key,
        run_lease=operator.run_lease,
        worker_args=operator.worker_args,
        target_uri=operator.target_uri,
        span=operator.span,
    )


def worker_env(try_number: int, *, key: str = "", run_key: str = "") -> dict[str, str]:
    """Variables a worker command gets from its task: the try number, the task's key, the run's lease key (decided by
    validate), the allow-lists and the budget for helping other runs."""
    settings = load_settings()
    env = {
        TRY_NUMBER_VARIABLE: str(try_number),
        ALLOWED_INPUT_PREFIXES_VARIABLE: ",".join(settings.allowed_input_prefixes),
        ALLOWED_OUTPUT_PREFIXES_VARIABLE: ",".join(settings.allowed_output_prefixes),
    }
    if key:
        env[TASK_KEY_VARIABLE] = key
    if run_key:
        env[RUN_KEY_VARIABLE] = run_key
    if settings.help_other_runs_seconds > 0:
        env[HELP_SECONDS_VARIABLE] = f"{settings.help_other_runs_seconds:g}"
    return env


def task_worker_env(context: Mapping[str, Any], environ: Mapping[str, str], call: WorkerCall) -> dict[str, str]:
    """Everything a worker command gets from its running task, on every backend: ``worker_env`` and the variables of
    its metrics (where to push them, and the labels that name this task; the work's id among them)."""
    ti = context["ti"]
    metric_env = worker_metric_environment(ti, environ, work_id=call.work_id)
    env = worker_env(int(ti.try_number), key=task_key(context), run_key=call.run_key)
    return {**env, **metric_env}


def failure_exception(failure: WorkerFailure, where: str = "", *, try_number: int = 1) -> AirflowException:
    """The task failure for ``failure`` in try ``try_number`` (``where`` is appended to its message): a non-retryable
    failure fails the task at once (no retries), and so does one whose class has had its retries (a full disk: one);
    any other failure lets Airflow retry."""
    if not failure.retryable:
        return AirflowFailException(failure.describe() + where)
    if failure.retried_enough(try_number):
        times = "once" if failure.retries_at_most == 1 else f"{failure.retries_at_most} times"
        return AirflowFailException(
            f"{failure.describe()}{where}; not retried again: {failure.failure_class} is retried {times} at most"
        )
    return AirflowException(failure.describe() + where)


FAILURE_XCOM_KEY = "failure"  # what a task that failed for good pushes, for whoever started the run (ingestion)


def raise_for_failure(failure: WorkerFailure, context: Mapping[str, Any] | None = None) -> NoReturn:
    """Fail the task with ``failure_exception``; a non-retryable failure is also recorded as the task's ``failure``
    XCom, so ingestion never retries bad input."""
    if not failure.retryable and context is not None:
        record_failure(context, failure.failure_class, failure.message)
    raise failure_exception(failure, try_number=1 if context is None else int(context["ti"].try_number))


def record_failure(context: Mapping[str, Any], failure_class: str, message: str) -> None:
    context["ti"].xcom_push(key=FAILURE_XCOM_KEY, value={"failure_class": failure_class, "message": message})


@contextlib.contextmanager
def fail_on_bad_input(context: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Bad input or a broken work raised on the Airflow side fails the task without retries, with the error's message
    (recorded as the task's ``failure`` XCom when ``context`` is given)."""
    try:
        yield
    except NonRetryableError as error:
        if context is not None:
            record_failure(context, error.failure_class, str(error))
        raise AirflowFailException(str(error)) from error


def completed_work(
    hook: FaceFusionStorageHook, call: WorkerCall, committed: frozenset[int] = frozenset()
) -> str | None:
    """Why ``call`` has nothing left to do for this run, or None when it must run. Checked before launching anything:
    an output found done (by validate, or by ``decided_for_this_try``; even after cleanup removed the work), a prepared
    work, or a span whose every segment is in ``committed`` (listed once by the caller) needs no process and no pod."""
    if call.output_done:
        return f"{call.output_uri} already holds the output of work {call.work_id}"
    if call.command == "prepare" and hook.is_prepared(call.work_uri):
        return f"work {call.work_id} is already prepared"
    if call.span is not None and all(index in committed for index in span_segments(call.span)):
        return f"every segment of span {call.span['index']} ({call.span.get('label', '')}) is committed"
    return None


def span_segments(span: Mapping[str, Any]) -> range:
    """The segment indexes of one item of plan's list."""
    return range(int(span["first"]), int(span["last"]))
