"""The run's page says how this provider's run ended: a note the provider writes, and takes back when it no longer
holds.

One scheduler listener for the run's lifecycle (so the order of its steps is fixed, not pluggy's):
- a run starts (also after a clear): a note the provider wrote before is removed, then the start checks run (a
  missing pool, a number no task can receive), each of which may fail the run with a new note;
- a run fails: its note names the failed task and the one-line reason its ``failure`` XCom holds (bad input: the
  field by its form title and its key, ``Output video (output_uri): ...``), or says which task to look at;
- a run succeeds: a note the provider wrote is removed.
A note a person wrote is never touched. Notes are written in the scheduler's own transaction (Airflow's public
``DagRun.note``); a task cannot write one through the Task SDK.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from airflow.listeners import hookimpl

from facefusion_provider.airflow_plugin import conf_limits, pools
from facefusion_provider.airflow_plugin.trigger_errors import DAG_IDS

log = logging.getLogger(__name__)
Listener = TypeVar("Listener", bound=Callable[..., None])


def never_raises(listener: Listener) -> Listener:
    """A listener runs inside the scheduler (or ``dags test``): a note it cannot write is logged, never raised (a run
    detached from its session, as ``dags test`` hands some, has no note to load)."""

    @functools.wraps(listener)
    def guarded(*args: Any, **kwargs: Any) -> None:
        try:
            listener(*args, **kwargs)
        except Exception:
            log.warning("facefusion run note not written (%s)", listener.__name__, exc_info=True)

    return guarded  # type: ignore[return-value]


NOT_STARTED, FAILED = "Not started: ", "Failed in "
PROVIDER_NOTE_PREFIXES = (NOT_STARTED, FAILED)
FAILURE_XCOM_KEY = "failure"  # operators/commands.py: what a task that failed for good pushes
NOTE_LIMIT = 1000  # the dag_run_note.content column


def is_provider_note(dag_run: Any) -> bool:
    """Whether the run's note is one this provider wrote (no user, one of its prefixes)."""
    note = getattr(dag_run, "dag_run_note", None)
    content = getattr(note, "content", None) if note is not None else getattr(dag_run, "note", None)
    user = getattr(note, "user_id", None) if note is not None else None
    return isinstance(content, str) and user is None and content.startswith(PROVIDER_NOTE_PREFIXES)


def has_note(dag_run: Any) -> bool:
    return bool(getattr(dag_run, "note", None))


def failure_note(failures: Mapping[str, str], failed_tasks: Iterable[str]) -> str:
    """``Failed in validate: Output video (output_uri): ...``: each failed task with its reason, or its log."""
    from facefusion_provider.operators.params import titled_reason

    parts = [f"{task}: {titled_reason(message)}" for task, message in failures.items()]
    others = sorted(set(failed_tasks) - set(failures))
    if others:
        parts.append(f"{', '.join(others)}: see the task's log")
    text = FAILED + "; ".join(parts) if parts else FAILED + "a task: see the failed task's log"
    return text if len(text) <= NOTE_LIMIT else text[: NOTE_LIMIT - 3] + "..."


def task_label(task_id: str, map_index: int, rendered: str | None) -> str:
    if map_index < 0:
        return task_id
    return f"{task_id} [{rendered or map_index}]"


def run_failures(session: Any, dag_run: Any) -> tuple[dict[str, str], list[str]]:
    """``({task label: failure message}, [failed task labels])`` of a failed run, from its task instances and their
    ``failure`` XComs."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    failed = session.scalars(
        select(TaskInstance).where(
            TaskInstance.dag_id == dag_run.dag_id,
            TaskInstance.run_id == dag_run.run_id,
            TaskInstance.state == TaskInstanceState.FAILED,
        )
    ).all()
    labels = {(ti.task_id, ti.map_index): task_label(ti.task_id, ti.map_index, ti.rendered_map_index) for ti in failed}
    failures: dict[str, str] = {}
    query = XComModel.get_many(run_id=dag_run.run_id, key=FAILURE_XCOM_KEY, dag_ids=dag_run.dag_id)
    for row in session.scalars(query):
        value = XComModel.deserialize_value(row)
        label = labels.get((row.task_id, row.map_index))
        if label is not None and isinstance(value, dict) and value.get("message"):
            failures[label] = str(value["message"])
    return failures, sorted(labels.values())


def forget_provider_note(dag_run: Any) -> None:
    if is_provider_note(dag_run):
        dag_run.note = None


@hookimpl
@never_raises
def on_dag_run_running(dag_run: Any, msg: str) -> None:
    """As a run starts: the provider's old note goes, then the start checks (each may fail the run with a note)."""
    if msg != "started":
        return
    if getattr(dag_run, "dag_id", None) in DAG_IDS:
        forget_provider_note(dag_run)
    pools.on_dag_run_running(dag_run=dag_run, msg=msg)
    if str(getattr(dag_run, "state", "")) != "failed":
        conf_limits.on_dag_run_running(dag_run=dag_run, msg=msg)


@hookimpl
@never_raises
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    """A failed run of this provider's DAGs says why on its page (unless a person wrote a note, or one is there)."""
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    if session is None or getattr(dag_run, "dag_id", None) not in DAG_IDS:
        return  # detached (``dags test``): nothing to write the note with
    if has_note(dag_run) and not is_provider_note(dag_run):
        return
    if has_note(dag_run) and str(dag_run.note).startswith(NOT_STARTED):
        return  # failed by a start check: its note already says why
    failures, failed_tasks = run_failures(session, dag_run)
    dag_run.note = failure_note(failures, failed_tasks)
    log.info("%s.%s: %s", dag_run.dag_id, dag_run.run_id, dag_run.note)


@hookimpl
@never_raises
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    """A run that succeeds keeps no note of the provider's about an earlier failure."""
    if getattr(dag_run, "dag_id", None) in DAG_IDS:
        forget_provider_note(dag_run)
