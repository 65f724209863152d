"""Run leases on shared work, and its removal when no live run needs it.

A run writes ``runs/KEY.json`` before it uses the work, and cleanup removes the work only when no other live run holds
a lease. The two race safely by writing first and looking second, on both sides: cleanup creates ``deleting.json``
(exclusively) and then lists the leases; a run writes its lease and then looks for ``deleting.json``. Whatever the
interleaving, either the cleanup sees the lease and keeps the work, or the run sees the deletion, waits for it to end
and writes its lease again (the deletion may have removed it); the run then rebuilds what it needs. Two cleanups at
once: the second waits for the first's ``deleting.json`` to go and decides again, as the first may have kept the work
for the lease the second had only just released.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from facefusion_provider import storage
from facefusion_provider.exceptions import FaceFusionError, InputMissingError, RetryableError
from facefusion_provider.job.layout import WorkLayout
from facefusion_provider.job.records import Deleting, RunLease

logger = logging.getLogger(__name__)

DELETION_WAIT_SECONDS = 300.0  # how long a run waits for another run's cleanup to finish removing the work
STALE_DELETION = timedelta(minutes=10)  # a deletion marker this old belongs to a cleanup that died
POLL_SECONDS = 1.0
# How long a span worker done with its own run works other live runs' segments (worker/helping.py; 0 or unset: none).
HELP_SECONDS_VARIABLE = "FACEFUSION_HELP_OTHER_RUNS_SECONDS"


def help_seconds() -> float:
    """How long a span worker helps other runs after its own span (0: it exits at once, the default)."""
    raw = os.environ.get(HELP_SECONDS_VARIABLE, "").strip()
    try:
        seconds = float(raw) if raw else 0.0
    except ValueError:
        raise ValueError(f"{HELP_SECONDS_VARIABLE}: expected seconds, got {raw!r}") from None
    return max(seconds, 0.0)


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


def renew(layout: WorkLayout, run_key: str) -> None:
    """Rewrite this run's lease as it is (its modification time says the run still waits); a released one stays gone."""
    try:
        data = storage.read_bytes(layout.run_lease(run_key))
    except InputMissingError:
        return
    storage.write_bytes_atomic(layout.run_lease(run_key), data)


def release(layout: WorkLayout, run_key: str) -> None:
    storage.delete(layout.run_lease(run_key))


def leases(layout: WorkLayout) -> dict[str, RunLease]:
    """Every lease on the work by run key; an unreadable one counts as live (never remove work on a guess)."""
    return {
        item.uri.rsplit("/", 1)[-1].removesuffix(".json"): read_lease(item.uri)
        for item in storage.list_files(layout.runs_dir)
    }


def read_lease(uri: str) -> RunLease:
    """The lease at ``uri``; an unreadable one as a live lease of an unknown run (no target: nobody helps it)."""
    try:
        return RunLease.model_validate_json(storage.read_bytes(uri))
    except (FaceFusionError, ValueError):
        key = uri.rsplit("/", 1)[-1].removesuffix(".json")
        return RunLease(dag_id="?", run_id=key, output_uri="?", created_at=datetime.now(UTC))


def remove_if_unused(
    layout: WorkLayout, run_key: str, is_live: Callable[[RunLease], bool], *, wait: float = DELETION_WAIT_SECONDS
) -> list[str]:
    """Remove the work unless another run holding a lease is live (``is_live``); returns the keys of those runs
    (empty: the work was removed).

    Another run's cleanup deciding at the same time may keep the work for the lease this run has just released, so
    this one waits for it to finish and decides again."""
    deadline = time.monotonic() + wait
    marker = Deleting(run_key=run_key, started_at=datetime.now(UTC))
    while not storage.write_bytes_exclusive(layout.deleting, marker.model_dump_json().encode()):
        deleting = _deletion(layout)
        if deleting is None:
            continue  # it ended between our two looks
        if datetime.now(UTC) - deleting.started_at > STALE_DELETION:
            storage.delete(layout.deleting)  # a cleanup that died mid-way: start again
            continue
        if time.monotonic() > deadline:
            logger.info(
                "%s: run %s is still deciding after %.0f s; left to it", layout.work_uri, deleting.run_key, wait
            )
            return [deleting.run_key]
        logger.info(
            "%s: run %s is deciding whether to remove it; deciding again after it", layout.work_uri, deleting.run_key
        )
        time.sleep(POLL_SECONDS)
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
