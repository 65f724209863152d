"""Run leases on shared work, the sweep that removes a work no live run holds, and the change signal
(docs/protocol.md: "A work", "A run lease", "The change signal").

A run writes ``runs/KEY.json`` before it uses the work and renews it while it needs the work; a cleanup removes the
work only when no other run's lease is live by the one liveness rule (``work/liveness.py``), whoever holds it. The two
race safely by writing first and looking second, on both sides: the sweep creates ``deleting.json`` (exclusively) and
then lists the leases; a run writes its lease and then looks for ``deleting.json``. Either the sweep sees the lease and
keeps the work, or the run sees the sweep, waits for it to end and writes its lease again (the sweep may have removed
it) before it uses the work.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from facefusion_provider import storage
from facefusion_provider.exceptions import FaceFusionError, InputMissingError, InvalidWorkError, RetryableError
from facefusion_provider.work import liveness
from facefusion_provider.work.layout import RootLayout, WorkLayout, root_of, work_root_of
from facefusion_provider.work.liveness import LeaseKind
from facefusion_provider.work.records import Refusal, RunHolder, RunLease, StandingWorker, Sweep

logger = logging.getLogger(__name__)

DELETION_WAIT_SECONDS = 300.0  # how long a run waits for another run's sweep to finish removing the work
POLL_SECONDS = 1.0


RENEW_ATTEMPTS = 5  # a renewal raced by the run's other holders looks and writes again this often


class LeaseLostError(RetryableError):
    """This run's lease was removed by a sweep (it was not renewed within its TTL): the work may be gone."""

    failure_class = "lease_lost"


@dataclass(frozen=True)
class HeldLease:
    """A lease as listed: its record and the store's time of its last write."""

    key: str
    lease: RunLease
    written: float
    work_root: str  # whose store's clock judges it

    @property
    def live(self) -> bool:
        """Live by its own written TTL, on the store's clock."""
        return liveness.is_live(self.written, self.lease.ttl_seconds, liveness.store_now(self.work_root))

    @property
    def wants_work(self) -> bool:
        """Live, active and naming its target: workers work this run's segments."""
        return self.live and self.lease.state == "active" and bool(self.lease.target_uri)


def hold(layout: WorkLayout, run_key: str, lease: RunLease, *, wait: float = DELETION_WAIT_SECONDS) -> None:
    """Write this run's lease on the work, after any sweep in progress has finished; announce it.

    Returns only when the lease was written less than half its TTL before the look for a sweep: a holder paused
    between its write and its look (found by the simulation) may find no sweep yet hold a lease that has lapsed, which
    a sweep starting just then would rightly judge dead."""
    deadline = liveness.clock.monotonic() + wait
    data = lease.model_dump_json().encode()
    while True:
        written = liveness.clock.monotonic()
        storage.write_bytes_atomic(layout.run_lease(run_key), data)
        sweep = _sweep(layout)
        if sweep is None and liveness.clock.monotonic() - written < lease.ttl_seconds / 2:
            announce(root_of(layout))
            return
        if sweep is None:
            continue  # too slow between the write and the look: write again
        if not sweep.live:
            logger.warning("%s: removing a stale sweep marker left by run %s", layout.work_uri, sweep.run_key)
            storage.delete(layout.deleting)
            continue
        if liveness.clock.monotonic() > deadline:
            raise RetryableError(f"{layout.work_uri}: still being removed by run {sweep.run_key} after {wait:.0f} s")
        logger.info("%s: run %s is removing this work; waiting for it to finish", layout.work_uri, sweep.run_key)
        liveness.clock.sleep(POLL_SECONDS)


def renew(layout: WorkLayout, run_key: str, lease: RunLease | None = None) -> None:
    """Rewrite this run's lease (its modification time is its renewal) by a conditional replace of the version just
    looked at, never while a sweep decides: so a renewal never recreates a lease a sweep removed. Raises
    ``LeaseLostError`` when it is gone (the work may be gone too). With ``lease`` given, that record is written (a new
    state or TTL). Another holder of the same run (its other tasks, the span's wait) renewing meanwhile is no loss:
    the look and the write are tried again."""
    uri = layout.run_lease(run_key)
    for _ in range(RENEW_ATTEMPTS):
        found = storage.stat(uri)
        if found is None or storage.exists(layout.deleting):
            raise LeaseLostError(
                f"{layout.work_uri}: the lease of run {run_key} was removed (not renewed within its TTL, the work "
                "was swept); run again to rebuild the work"
            )
        try:
            record = lease.model_dump_json().encode() if lease is not None else storage.read_bytes(uri)
        except InputMissingError:
            continue  # removed since the look: the next look says so
        if storage.write_bytes_if_unchanged(uri, record, found.version):
            if _had_lapsed(found, record, layout):  # live again: idle standing workers had stopped looking at it
                announce(root_of(layout))
            return
    if lease is not None:
        raise RetryableError(f"{uri}: rewritten by others {RENEW_ATTEMPTS} times while this run wrote its state")


def _had_lapsed(found: storage.StoredObject, record: bytes, layout: WorkLayout) -> bool:
    """Whether the lease ``record``, last written at ``found``, had lapsed by its TTL before this renewal."""
    try:
        ttl = RunLease.model_validate_json(record).ttl_seconds
    except ValueError:
        return False
    return not liveness.is_live(found.modified, ttl, liveness.store_now(work_root_of(layout)))


def keep_for_retry(layout: WorkLayout, run_key: str, ttl_seconds: float) -> None:
    """A failed run keeps its work for a retry or a clear: its lease becomes ``kept`` for ``ttl_seconds``."""
    current = read_lease(layout.run_lease(run_key))
    if current is None:
        return
    renew(layout, run_key, current.model_copy(update={"state": "kept", "ttl_seconds": ttl_seconds}))


def release(layout: WorkLayout, run_key: str) -> None:
    storage.delete(layout.run_lease(run_key))
    announce(root_of(layout))


class RunHold:
    """A run's hold on its work while a process renews the lease from a thread: ``check`` raises ``LeaseLostError``
    once a renewal has found the lease removed, so the process stops before it writes into a removed work."""

    def __init__(self, layout: WorkLayout, run_key: str) -> None:
        self.layout, self.run_key = layout, run_key
        self._lost: LeaseLostError | None = None

    def renew(self) -> None:
        try:
            renew(self.layout, self.run_key)
        except LeaseLostError as error:
            self._lost = error
            raise

    def check(self) -> None:
        if self._lost is not None:
            raise self._lost


@contextmanager
def holding(layout: WorkLayout, run_key: str, lease: RunLease) -> Iterator[RunHold]:
    """Hold the work for the block (a CLI run), renewing the lease every quarter TTL from a thread. The lease stays
    when the block ends: its run releases it."""
    hold(layout, run_key, lease)
    with renewing(layout, run_key, lease.ttl_seconds) as held:
        yield held


@contextmanager
def renewing(layout: WorkLayout, run_key: str, ttl_seconds: float | None = None) -> Iterator[RunHold]:
    """Renew a lease its run holds already (a worker command of an Airflow run) every quarter TTL while the block
    runs; the TTL is read from the lease when not given. A block that finds the work, or a file of it, gone while the
    lease went too (a sweep, the process paused past its TTL) fails with ``LeaseLostError`` (I5), which a run's next
    try answers by holding the work again."""
    held = RunHold(layout, run_key)
    if ttl_seconds is None:
        current = read_lease(layout.run_lease(run_key))
        ttl_seconds = current.ttl_seconds if current is not None else liveness.DEFAULT_TTL_SECONDS[LeaseKind.RUN]
    every = liveness.renew_every(ttl_seconds)
    with liveness.repeating(held.renew, every, name="facefusion-lease", what=f"renewing the lease of {run_key}"):
        try:
            yield held
        except (InputMissingError, InvalidWorkError):
            held.renew()  # LeaseLostError when the lease is gone: a sweep took the work with it (paused past its TTL)
            raise


def run_leases(layout: WorkLayout) -> list[HeldLease]:
    """Every lease on the work with the time of its last write; an unreadable one as an anonymous lease of the
    default TTL (never remove work on a guess, nor keep it for ever)."""
    found = []
    for item in storage.list_files(layout.runs_dir):
        key = item.uri.rsplit("/", 1)[-1].removesuffix(".json")
        lease = read_lease(item.uri) or unreadable_lease(key)
        found.append(HeldLease(key, lease, item.modified, work_root_of(layout)))
    return found


def read_lease(uri: str) -> RunLease | None:
    try:
        return RunLease.model_validate_json(storage.read_bytes(uri))
    except (FaceFusionError, ValueError):
        return None


def unreadable_lease(key: str) -> RunLease:
    return RunLease(
        holder=RunHolder(kind="airflow", run_id=key),
        ttl_seconds=liveness.DEFAULT_TTL_SECONDS[LeaseKind.RUN],
        state="kept",
        output_uri="",
        created_at=datetime.now(UTC),
    )


def sweep_if_unused(layout: WorkLayout, run_key: str, *, wait: float = DELETION_WAIT_SECONDS) -> list[str]:
    """Remove the work unless another run's lease is live; returns the keys of those runs (empty: removed).

    Another run's sweep deciding at the same time may keep the work for the lease this run has just released, so
    this one waits for it to finish and decides again."""
    deadline = liveness.clock.monotonic() + wait
    ttl = liveness.DEFAULT_TTL_SECONDS[LeaseKind.SWEEP]
    marker = Sweep(run_key=run_key, started_at=datetime.now(UTC), ttl_seconds=ttl).model_dump_json().encode()
    created = liveness.clock.monotonic()
    while not storage.write_bytes_exclusive(layout.deleting, marker):
        created = liveness.clock.monotonic()
        other = _sweep(layout)
        if other is None:
            continue  # it ended between our two looks
        if not other.live:
            storage.delete(layout.deleting)  # a sweep that died mid-way: start again
            continue
        if liveness.clock.monotonic() > deadline:
            logger.info("%s: run %s is still deciding after %.0f s; left to it", layout.work_uri, other.run_key, wait)
            return [other.run_key]
        logger.info("%s: run %s is deciding whether to remove it; deciding again after", layout.work_uri, other.run_key)
        liveness.clock.sleep(POLL_SECONDS)
    try:
        # Judged at the listing's time, not later: a sweep paused after its listing would judge a lease renewed
        # meanwhile by the stale time the listing showed.
        now = liveness.store_now(work_root_of(layout))
        listed = run_leases(layout)
        holders = [
            held.key
            for held in listed
            if held.key != run_key and liveness.is_live(held.written, held.lease.ttl_seconds, now)
        ]
        if holders:
            logger.info("%s: kept for runs %s", layout.work_uri, ", ".join(sorted(holders)))
            return holders
        for item in storage.list_files(layout.work_uri):
            if liveness.clock.monotonic() - created >= ttl / 2:
                # Paused this long, our marker may lapse and a run hold the work again: leave the rest to its run.
                logger.warning("%s: the sweep took over %.0f s; the rest is left", layout.work_uri, ttl / 2)
                return [run_key]
            if item.uri != layout.deleting:
                storage.delete(item.uri)
        return []
    finally:
        storage.delete(layout.deleting)
        storage.remove_empty_folders(layout.work_uri)


@dataclass(frozen=True)
class _SweepSeen:
    run_key: str
    live: bool


def _sweep(layout: WorkLayout) -> _SweepSeen | None:
    """The sweep in progress, if any, and whether its marker is live."""
    listed = storage.stat(layout.deleting)
    if listed is None:
        return None
    try:
        sweep = Sweep.model_validate_json(storage.read_bytes(layout.deleting))
    except FaceFusionError:
        return None  # it ended between the listing and the read
    except ValueError:  # half-written by a crashed writer on a store without atomic writes: treat as lapsed
        return _SweepSeen("?", False)
    now = liveness.store_now(work_root_of(layout))
    return _SweepSeen(sweep.run_key, liveness.is_live(listed.modified, sweep.ttl_seconds, now))


def announce(root: RootLayout) -> None:
    """Rewrite the change signal: idle standing workers look at the works again (docs/protocol.md)."""
    storage.write_bytes_atomic(root.signal, uuid.uuid4().hex.encode())


def live_standing_workers(root: RootLayout) -> list[str]:
    """The names of the standing workers whose lease is live by its own written TTL (one listing; a lease is read
    once per version, and a worker rewrites the same bytes)."""
    now = liveness.store_now(root.root_uri)
    return [
        item.uri.rsplit("/", 1)[-1].removesuffix(".json")
        for item in storage.list_files(root.workers_dir)
        if item.uri.endswith(".json") and liveness.is_live(item.modified, _worker_ttl(item.uri, item.version), now)
    ]


@functools.lru_cache(maxsize=1024)
def _worker_ttl(uri: str, version: str | None) -> float:
    """The TTL written in a standing worker's lease (its kind's default where it cannot be read)."""
    try:
        return StandingWorker.model_validate_json(storage.read_bytes(uri)).ttl_seconds
    except (FaceFusionError, ValueError):
        return liveness.DEFAULT_TTL_SECONDS[LeaseKind.WORKER]


def record_refusal(layout: WorkLayout, worker: str, error: FaceFusionError) -> None:
    """Say in the work why standing worker ``worker`` gave up on it (docs/protocol.md, "No unbounded wait")."""
    refusal = Refusal(worker=worker, failure_class=error.failure_class, retryable=error.retryable, message=str(error))
    storage.write_bytes_atomic(layout.refusal(worker), refusal.model_dump_json().encode())


def withdraw_refusal(layout: WorkLayout, worker: str) -> None:
    """Standing worker ``worker`` no longer refuses the work (it forgot it, or stops)."""
    storage.delete(layout.refusal(worker))


def standing_refusal(layout: WorkLayout, live_workers: list[str]) -> Refusal | None:
    """Why no standing worker will work ``layout``: one refusal standing for all, once every live standing worker
    (``live_workers``) has refused it; None while one has not (one listing, then one read per refusal). Retryable
    only if one of them was."""
    listed = {
        item.uri.rsplit("/", 1)[-1].removesuffix(".json"): item.uri
        for item in storage.list_files(layout.refusals_dir)
        if item.uri.endswith(".json")
    }
    if not live_workers or not set(live_workers) <= listed.keys():
        return None
    refusals = []
    for worker in sorted(live_workers):
        try:
            refusals.append(Refusal.model_validate_json(storage.read_bytes(listed[worker])))
        except (FaceFusionError, ValueError):
            return None  # withdrawn meanwhile, or unreadable: not a refusal to fail a run on
    first = refusals[0]
    retryable = any(refusal.retryable for refusal in refusals)
    return first.model_copy(update={"retryable": retryable, "worker": ", ".join(sorted(live_workers))})


@contextmanager
def standing_worker_lease(root: RootLayout, worker: StandingWorker) -> Iterator[None]:
    """Hold a standing worker's lease while the block runs (renewed every quarter TTL); remove it after."""
    uri = root.worker(worker.name)
    data = worker.model_dump_json().encode()
    storage.write_bytes_atomic(uri, data)
    try:
        every = liveness.renew_every(worker.ttl_seconds)
        with liveness.repeating(
            lambda: storage.write_bytes_atomic(uri, data), every, name="facefusion-worker", what=uri
        ):
            yield
    finally:
        storage.delete(uri)
