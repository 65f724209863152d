"""Run leases on shared work, and its removal when no live run needs it.

A run writes ``runs/KEY.json`` before it uses the work, and cleanup removes the work only when no other live run holds
a lease. The two race safely by writing first and looking second, on both sides: cleanup creates ``deleting.json``
(exclusively) and then lists the leases; a run writes its lease and then looks for ``deleting.json``. Whatever the
interleaving, either the cleanup sees the lease and keeps the work, or the run sees the deletion, waits for it to end
and writes its lease again (the deletion may have removed it); the run then rebuilds what it needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from facefusion_provider import storage
from facefusion_provider.exceptions import FaceFusionError, RetryableError
from facefusion_provider.job.layout import WorkLayout
from facefusion_provider.job.records import Deleting, RunLease

logger = logging.getLogger(__name__)

DELETION_WAIT_SECONDS = 300.0  # how long a run waits for another run's cleanup to finish removing the work
STALE_DELETION = timedelta(minutes=10)  # a deletion marker this old belongs to a cleanup that died
POLL_SECONDS = 1.0


def hold(layout: WorkLayout, run_key: str, lease: RunLease, *, wait: float = DELETION_WAIT_SECONDS) -> None:
    """Write this run's lease on the work, after any removal in progress has finished."""
    deadline = time.monotonic() + wait
    while True:
        storage.write_bytes_atomic(layout.run_lease(run_key), lease.model_dump_json().encode())
        deleting = _deletion(layout)
        if deleting is None:
            return
        if datetime.now(UTC) - deleting.started_at > STALE_DELETION:
            logger.warning("%s: removing a stale deletion marker left by run %s", layout.work_uri, deleting.run_key)
            storage.delete(layout.deleting)
            continue
        if time.monotonic() > deadline:
            raise RetryableError(f"{layout.work_uri}: still being removed by run {deleting.run_key} after {wait:.0f} s")
        logger.info("%s: run %s is removing this work; waiting for it to finish", layout.work_uri, deleting.run_key)
        time.sleep(POLL_SECONDS)


def release(layout: WorkLayout, run_key: str) -> None:
    storage.delete(layout.run_lease(run_key))


def leases(layout: WorkLayout) -> dict[str, RunLease]:
    """Every lease on the work by run key; an unreadable one counts as live (never remove work on a guess)."""
    found: dict[str, RunLease] = {}
    for item in storage.list_files(layout.runs_dir):
        key = item.uri.rsplit("/", 1)[-1].removesuffix(".json")
        try:
            found[key] = RunLease.model_validate_json(storage.read_bytes(item.uri))
        except (FaceFusionError, ValueError):
            found[key] = RunLease(dag_id="?", run_id=key, output_uri="?", created_at=datetime.now(UTC))
    return found


def remove_if_unused(layout: WorkLayout, run_key: str, is_live: Callable[[RunLease], bool]) -> list[str]:
    """Remove the work unless another run holding a lease is live (``is_live``); returns the keys of those runs
    (empty: the work was removed, or another cleanup is removing it now)."""
    marker = Deleting(run_key=run_key, started_at=datetime.now(UTC))
    if not storage.write_bytes_exclusive(layout.deleting, marker.model_dump_json().encode()):
        deleting = _deletion(layout)
        if deleting is not None and datetime.now(UTC) - deleting.started_at <= STALE_DELETION:
            logger.info("%s: run %s is already removing it", layout.work_uri, deleting.run_key)
            return []
        storage.delete(layout.deleting)  # a cleanup that died mid-way: start again
        return remove_if_unused(layout, run_key, is_live)
    try:
        holders = [key for key, lease in leases(layout).items() if key != run_key and is_live(lease)]
        if holders:
            logger.info("%s: kept for runs %s", layout.work_uri, ", ".join(sorted(holders)))
            return holders
        for item in storage.list_files(layout.work_uri):
            if item.uri != layout.deleting:
                storage.delete(item.uri)
        storage.remove_empty_folders(layout.work_uri)
        return []
    finally:
        storage.delete(layout.deleting)
        storage.remove_empty_folders(layout.work_uri)


def _deletion(layout: WorkLayout) -> Deleting | None:
    try:
        return Deleting.model_validate_json(storage.read_bytes(layout.deleting))
    except FaceFusionError:
        return None
    except ValueError:  # half-written by a crashed writer on a store without atomic writes: treat as stale
        return Deleting(run_key="?", started_at=datetime(1970, 1, 1, tzinfo=UTC))
