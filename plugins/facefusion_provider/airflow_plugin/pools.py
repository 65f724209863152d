"""A run of this provider's tasks never waits silently on a missing pool: it fails as it starts, naming the pool.

Airflow 3.3 leaves a task whose pool does not exist ``scheduled`` for ever: the scheduler logs "Tasks using
non-existent pool ... will not be scheduled" every loop, the task's page shows nothing, and the DAG warning meant for
it is never produced (the dag-processor sets no known pools). Neither the DAG file (the dag-processor blocks ORM access
while it parses) nor a task (the Task SDK has no pool call) can look pools up; the scheduler can. This listener runs
in the scheduler as a run starts (``on_dag_run_running``, "started"), in the scheduler's own transaction: if a task of
this provider is in a pool that does not exist, the run fails there, before any task runs, with a note that names the
pool and how to create it (the run's page shows the note; the scheduler's log says the same).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from facefusion_provider.settings import SECTION

log = logging.getLogger(__name__)

PROVIDER_PACKAGE = "facefusion_provider"


def provider_task_pools(tasks: Iterable[Any]) -> dict[str, list[str]]:
    """``{pool: [task ids]}`` of the tasks made by this provider's operators (of a serialized DAG)."""
    pools: dict[str, list[str]] = {}
    for task in tasks:
        module = str(getattr(task, "_task_module", "") or "")
        if module == PROVIDER_PACKAGE or module.startswith(PROVIDER_PACKAGE + "."):
            pools.setdefault(str(task.pool), []).append(str(task.task_id))
    return pools


def missing_pool_message(missing: Mapping[str, Collection[str]]) -> str:
    """One line: which pool is missing, for which tasks, and the two ways out."""
    parts = [f"pool {pool!r} (tasks {', '.join(sorted(tasks))}) does not exist" for pool, tasks in missing.items()]
    first = next(iter(missing))
    return (
        f"Not started: {'; '.join(parts)}. Create it (Admin > Pools, or `airflow pools set {first} <slots> "
        f"'<description>'`), or leave [{SECTION}] pool empty to use default_pool; then clear this run."
    )


def existing_pools(session: Any, names: Collection[str]) -> set[str]:
    from airflow.models.pool import Pool
    from sqlalchemy import select

    return set(session.scalars(select(Pool.pool).where(Pool.pool.in_(list(names)))))


def on_dag_run_running(dag_run: Any, msg: str) -> None:
    """As the scheduler starts a run: fail it at once when a task of this provider is in a pool that does not exist."""
    if msg != "started" or getattr(dag_run, "dag", None) is None:
        return
    pools = provider_task_pools(dag_run.dag.tasks)
    if not pools:
        return
    from airflow.utils.state import DagRunState
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    if session is None:
        return
    existing = existing_pools(session, pools)
    missing = {pool: tasks for pool, tasks in pools.items() if pool not in existing}
    if not missing:
        return
    message = missing_pool_message(missing)
    log.error("%s.%s: %s", dag_run.dag_id, dag_run.run_id, message)
    dag_run.set_state(DagRunState.FAILED)
    dag_run.note = message
