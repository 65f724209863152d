"""A deterministic simulation of the coordination protocol (docs/protocol.md), FoundationDB-style.

The real protocol code (``work/leases.py``, ``work/claims.py``, ``work/liveness.py``) runs against an in-memory store
with the same create semantics (exclusive create, atomic replace, delete; the store's clock stamps every write). Every
actor (an Airflow run's tasks, a CLI run, a standing worker, each holder's renewal thread) is a thread, but exactly one
runs at a time: every store operation and every sleep hands control back to the scheduler, which picks the next actor
with a seeded random generator, kills actors before or after any write, pauses them past their TTLs and makes the
clock jump. So a schedule is a pure function of its seed: a failing seed reproduces alone.

What is modelled rather than run: the frames (a segment's content is ``"{work}:{index}"``, computing it takes time),
the merge's join (the output is the segments' contents in order) and Airflow's retries (a killed task starts again
after a delay, as a new try of the same task, holding the work again as every task does when it starts).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, RetryableError
from facefusion_provider.storage import StoredObject
from facefusion_provider.work import leases, liveness
from facefusion_provider.work.claims import SegmentClaims, commit_marker, latest_claims, scan_work
from facefusion_provider.work.layout import (
    PREPARE_CLAIM,
    RootLayout,
    WorkLayout,
    merge_claim_name,
    output_marker_uri,
    segment_file_name,
)
from facefusion_provider.work.leases import LeaseLostError
from facefusion_provider.work.records import RunHolder, RunLease, SegmentMarker

ROOT = "s3://sim/root"
CLAIM_TTL = 60.0
RUN_TTL = 300.0
CLI_TTL = 120.0
KEPT_TTL = 3600.0
SWEEP_TTL = liveness.DEFAULT_TTL_SECONDS[liveness.LeaseKind.SWEEP]
SEGMENT_SECONDS = 10.0
RETRY_DELAY = 30.0


class Killed(BaseException):  # a BaseException: no handler in the real code may swallow it
    """Raised in a killed actor at its next step: its process is gone, it writes nothing more."""


class InvariantError(AssertionError):
    pass


class SegmentsMissingError(Exception):
    """The merge found segments missing: the user clears the run's swap_span tasks (docs/protocol.md)."""


@dataclass
class Actor:
    name: str
    body: Callable[[], None]
    wake: float = 0.0
    killed: bool = False
    done: bool = False
    turn: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    group: str = ""  # actors of one process die together (a task and its renewal thread)
    error: BaseException | None = None


class Scheduler:
    """Runs one actor at a time; picks who runs next, injects faults, owns the clock."""

    def __init__(self, seed: int, *, faults: bool = True) -> None:
        self.rng = random.Random(seed)
        self.now = 1_000_000.0
        self.actors: list[Actor] = []
        self.faults = faults
        self.steps = 0
        self._local = threading.local()
        self._yielded = threading.Event()
        self.log: list[str] = []

    # What actors call.
    def current(self) -> Actor:
        actor: Actor = self._local.actor
        return actor

    def point(self, what: str) -> None:
        """A step: the actor gives the turn back and waits for it."""
        actor = self.current()
        if actor.killed:
            raise Killed
        actor.turn.clear()
        self._yielded.set()
        actor.turn.wait()
        if actor.killed:
            raise Killed
        self.log.append(f"{self.now:.1f} {actor.name}: {what}")

    def sleep(self, seconds: float) -> None:
        actor = self.current()
        actor.wake = self.now + max(seconds, 0.001)
        self.point(f"sleep {seconds:.1f}")

    def spawn(self, name: str, body: Callable[[], None], *, at: float | None = None, group: str = "") -> Actor:
        actor = Actor(name, body, wake=self.now if at is None else at, group=group or name)

        def main() -> None:
            self._local.actor = actor
            actor.turn.wait()
            try:
                if not actor.killed:
                    body()
            except Killed:
                pass
            except BaseException as error:  # an actor's failure is judged by the test, not here
                actor.error = error
            finally:
                actor.done = True
                self._yielded.set()

        actor.thread = threading.Thread(target=main, name=name, daemon=True)
        self.actors.append(actor)
        actor.thread.start()
        return actor

    def kill(self, process: str) -> None:
        """Kill a process: its actors (``process`` and its threads, ``process/...``)."""
        for actor in self.actors:
            if (actor.group == process or actor.group.startswith(process + "/")) and not actor.done:
                actor.killed = True

    # The loop.
    def run(self, max_steps: int, *, until: Callable[[], bool] = lambda: False) -> None:
        for _ in range(max_steps):
            if until():
                return
            alive = [actor for actor in self.actors if not actor.done]
            if not alive:
                break
            runnable = [actor for actor in alive if actor.wake <= self.now or actor.killed]
            if not runnable:
                self.now = min(actor.wake for actor in alive)
                continue
            actor = self.rng.choice(runnable)
            if self.faults and not actor.killed:
                self._fault(actor)
            self.steps += 1
            self._yielded.clear()
            actor.turn.set()
            self._yielded.wait()
            if actor.done and actor.thread is not None:
                actor.thread.join()
            if isinstance(actor.error, InvariantError):
                raise actor.error
        if not until():
            raise InvariantError(f"I4-no-wait-forever: still running after {max_steps} steps: {self._alive()}")

    def _fault(self, actor: Actor) -> None:
        roll = self.rng.random()
        process = actor.group.split("/")[0]
        if roll < 0.004 and process.startswith(("task", "cli", "standing")):
            self.log.append(f"{self.now:.1f} FAULT kill {process}")
            self.kill(process)
        elif roll < 0.008 and process.startswith(("task", "cli", "standing")):
            pause = self.rng.uniform(0.5, 3.0) * RUN_TTL  # SIGSTOP, a frozen VM: past claim and run TTLs
            self.log.append(f"{self.now:.1f} FAULT pause {process} {pause:.0f}s")
            for other in self.actors:
                if (other.group == process or other.group.startswith(process + "/")) and not other.done:
                    other.wake = self.now + pause
        elif roll < 0.012:
            jump = self.rng.uniform(0.0, 2.0) * CLAIM_TTL
            self.log.append(f"{self.now:.1f} FAULT clock +{jump:.0f}s")
            self.now += jump

    def _alive(self) -> list[str]:
        return [f"{actor.name}(wake {actor.wake - self.now:+.0f}s)" for actor in self.actors if not actor.done]

    def stop(self) -> None:
        """End every actor still alive (at the end of a schedule, or when it failed)."""
        for actor in self.actors:
            actor.killed = True
            actor.turn.set()
        for actor in self.actors:
            if actor.thread is not None:
                actor.thread.join(timeout=5)


@dataclass
class Entry:
    data: bytes
    written: float
    version: int


class SimStore:
    """The store: exclusive create, atomic replace, delete, listings; every call is one step of its actor."""

    def __init__(
        self, scheduler: Scheduler, on_delete: Callable[[str], None], on_create: Callable[[str], None]
    ) -> None:
        self.scheduler = scheduler
        self.objects: dict[str, Entry] = {}
        self.versions = 0
        self.on_delete, self.on_create = on_delete, on_create

    def _put(self, uri: str, data: bytes) -> None:
        self.versions += 1
        self.objects[uri] = Entry(bytes(data), self.scheduler.now, self.versions)

    def exists(self, uri: str) -> bool:
        self.scheduler.point(f"exists {uri}")
        return uri in self.objects

    def read_bytes(self, uri: str) -> bytes:
        self.scheduler.point(f"read {uri}")
        if uri not in self.objects:
            raise InputMissingError(f"{uri} does not exist")
        return self.objects[uri].data

    def write_bytes_atomic(self, uri: str, data: bytes) -> None:
        self.scheduler.point(f"put {uri}")
        self._put(uri, data)

    def write_bytes_exclusive(self, uri: str, data: bytes) -> bool:
        self.scheduler.point(f"create {uri}")
        if uri in self.objects:
            return False
        self._put(uri, data)
        self.on_create(uri)
        return True

    def write_bytes_if_unchanged(self, uri: str, data: bytes, version: str) -> bool:
        self.scheduler.point(f"put if-match {uri}")
        entry = self.objects.get(uri)
        if entry is None or str(entry.version) != version:
            return False
        self._put(uri, data)
        return True

    def delete(self, uri: str) -> None:
        self.scheduler.point(f"delete {uri}")
        if self.objects.pop(uri, None) is not None:
            self.on_delete(uri)

    def stat(self, uri: str) -> StoredObject | None:
        self.scheduler.point(f"head {uri}")
        entry = self.objects.get(uri)
        return None if entry is None else StoredObject(uri, str(entry.version), len(entry.data), entry.written)

    def list_files(self, prefix: str) -> list[StoredObject]:
        self.scheduler.point(f"list {prefix}")
        base = prefix.rstrip("/")
        return [
            StoredObject(uri, str(entry.version), len(entry.data), entry.written)
            for uri, entry in sorted(self.objects.items())
            if uri == base or uri.startswith(base + "/")
        ]

    def list_folders(self, prefix: str) -> list[str]:
        self.scheduler.point(f"list folders {prefix}")
        base = prefix.rstrip("/") + "/"
        return sorted(
            {
                base + uri[len(base) :].split("/")[0]
                for uri in self.objects
                if uri.startswith(base) and "/" in uri[len(base) :]
            }
        )

    def remove_empty_folders(self, uri: str) -> None:
        """Folders are not objects here."""


class SimClock(liveness.Clock):
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def now(self) -> float:
        return self.scheduler.now

    def monotonic(self) -> float:
        return self.scheduler.now

    def sleep(self, seconds: float) -> None:
        self.scheduler.sleep(seconds)


@contextmanager
def simulated(monkeypatch: pytest.MonkeyPatch, scheduler: Scheduler, store: SimStore) -> Iterator[None]:
    for name in (
        "exists",
        "read_bytes",
        "write_bytes_atomic",
        "write_bytes_exclusive",
        "write_bytes_if_unchanged",
        "delete",
        "stat",
        "list_files",
        "list_folders",
        "remove_empty_folders",
    ):
        monkeypatch.setattr(storage, name, getattr(store, name))
    monkeypatch.setattr(liveness, "clock", SimClock(scheduler))
    monkeypatch.setattr(leases, "POLL_SECONDS", 5.0)
    try:
        yield
    finally:
        scheduler.stop()


@dataclass
class RunPlan:
    key: str
    work: str
    segments: int
    kind: str  # "airflow" or "cli"
    start: float
    mode: str  # "task": its own span workers; "standing": standing workers work it


@dataclass
class RunRecord:
    plan: RunPlan
    finished: bool = False
    stopped: str = ""  # why it stopped for good (a CLI run that lost its lease, or was killed)
    tries: int = 0
    holding: bool = False  # it finished ``hold`` and has not released
    lapsed: bool = False  # it let its lease lapse since it last held the work
    last_write: float = 0.0  # when it last wrote its lease (hold or renewal)
    clears: int = 0  # how often "the user" cleared its swap_span tasks (a merge found segments missing)


class World:
    """One schedule: works, runs and standing workers over one simulated store, and the invariants."""

    def __init__(self, seed: int, monkeypatch: pytest.MonkeyPatch, *, faults: bool = True) -> None:
        self.seed = seed
        self.scheduler = Scheduler(seed, faults=faults)
        self.store = SimStore(self.scheduler, self._deleted, self._created)
        self.sweeps_began: dict[str, float] = {}  # sweeping actor -> when it created its marker
        self.lost: set[str] = set()  # processes whose renewal found their run's lease removed
        self.stale_sweeps = 0
        self.monkeypatch = monkeypatch
        self.runs: dict[str, RunRecord] = {}
        self.root = RootLayout(ROOT)
        self.sweeping: dict[str, str] = {}  # work -> the run whose sweep is deleting it
        self.outputs: dict[str, bytes] = {}
        rng = random.Random(seed ^ 0x5EED)
        works = [f"w{number}" for number in range(rng.randint(1, 3))]
        sizes = {work: rng.randint(1, 5) for work in works}
        for number in range(rng.randint(2, 5)):
            work = rng.choice(works)
            kind = "cli" if rng.random() < 0.25 else "airflow"
            mode = "standing" if kind == "airflow" and rng.random() < 0.4 else "task"
            plan = RunPlan(f"run{number}", work, sizes[work], kind, rng.uniform(0, 200), mode)
            self.runs[plan.key] = RunRecord(plan)
        self.standing = rng.randint(1, 2) if any(r.plan.mode == "standing" for r in self.runs.values()) else 0

    # Invariants.
    def _created(self, uri: str) -> None:
        actor = self.scheduler.current()
        if uri.endswith("/deleting.json"):
            self.sweeps_began[actor.name] = self.scheduler.now
        if "/segments/" in uri and uri.endswith(".json"):
            process = actor.group.split("/")[0]
            if process in self.lost:
                raise InvariantError(f"I5-lost-lease-stops: {process} committed {uri} after it found its lease lost")

    def _deleted(self, uri: str) -> None:
        actor = self.scheduler.current()
        if not actor.name.startswith("sweep") or uri.endswith("/deleting.json"):
            return  # only what a sweep removes of the work itself
        if self.scheduler.now - self.sweeps_began.get(actor.name, self.scheduler.now) > SWEEP_TTL:
            self.stale_sweeps += 1  # paused past its marker's TTL between its last look at the clock and this delete
            return
        work = uri.split("/work/")[1].split("/", maxsplit=1)[0] if "/work/" in uri else ""
        for record in self.runs.values():
            ttl = RUN_TTL if record.plan.kind == "airflow" else CLI_TTL
            live = self.scheduler.now - record.last_write <= ttl
            if record.plan.work == work and record.holding and not record.lapsed and live:
                raise InvariantError(
                    f"I1-held-work-stays: {actor.name} deleted {uri} while {record.plan.key} held the work "
                    f"(lease last written {self.scheduler.now - record.last_write:.0f} s ago, TTL {ttl:.0f} s)"
                )

    def check_output(self, plan: RunPlan, data: bytes) -> None:
        expected = "|".join(f"{plan.work}:{index}" for index in range(plan.segments)).encode()
        if data != expected:
            raise InvariantError(f"I3-output-equals-alone: {plan.key} wrote {data!r}, a run alone writes {expected!r}")

    # Actors.
    def layout(self, work: str) -> WorkLayout:
        return WorkLayout.under(ROOT, work)

    def lease_of(self, plan: RunPlan) -> RunLease:
        holder = (
            RunHolder(kind="airflow", dag_id="facefusion_swap", run_id=plan.key)
            if plan.kind == "airflow"
            else RunHolder(kind="cli", host="laptop", pid=1)
        )
        return RunLease(
            holder=holder,
            ttl_seconds=RUN_TTL if plan.kind == "airflow" else CLI_TTL,
            output_uri=self.output_uri(plan),
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            target_uri=f"s3://sim/in/{plan.work}.mp4",
            options={"segments": plan.segments},
        )

    def output_uri(self, plan: RunPlan) -> str:
        return f"s3://sim/out/{plan.key}.mp4"

    def hold(self, record: RunRecord) -> leases.RunHold:
        layout = self.layout(record.plan.work)
        leases.hold(layout, record.plan.key, self.lease_of(record.plan))
        record.holding, record.lapsed, record.last_write = True, False, self._written(layout, record)
        return leases.RunHold(layout, record.plan.key)

    def _written(self, layout: WorkLayout, record: RunRecord) -> float:
        """When the store last wrote the run's lease (a look, not a step)."""
        entry = self.store.objects.get(layout.run_lease(record.plan.key))
        return entry.written if entry is not None else 0.0

    def renewer(self, record: RunRecord, held: leases.RunHold, claims: list[SegmentClaims], process: str) -> None:
        """The holder's renewal thread: its run's lease and its claims, every quarter TTL."""
        ttl = RUN_TTL if record.plan.kind == "airflow" else CLI_TTL

        def body() -> None:
            while True:
                self.scheduler.sleep(min(ttl, CLAIM_TTL) / liveness.RENEWALS_PER_TTL)
                try:
                    held.renew()
                except LeaseLostError:
                    self.lost.add(process)
                    return
                written = self._written(self.layout(record.plan.work), record)
                if written - record.last_write > ttl:
                    record.lapsed = True  # paused past its TTL: a sweep may have judged it, rightly
                record.last_write = written
                for claim_set in claims:
                    claim_set.renew()

        self.scheduler.spawn(f"{process}/renew", body, group=f"{process}/renew")

    def prepare(self, layout: WorkLayout, segments: int) -> None:
        if not storage.exists(layout.work_json):
            storage.write_bytes_exclusive(layout.work_json, str(segments).encode())

    def work_segments(
        self, layout: WorkLayout, segments: int, claims: SegmentClaims, guard: Callable[[], None]
    ) -> None:
        """The span worker's loop (worker/span.py): take a free segment, compute it, commit it; until all are committed
        (waiting on segments others hold)."""
        while True:
            guard()
            state = scan_work(layout)
            if len(state.committed) >= segments:
                return
            free = [index for index in range(segments) if claims.is_free(index, state)]
            if not free:
                self.scheduler.sleep(2.0)
                continue
            index = free[0] if self.scheduler.rng.random() < 0.7 else self.scheduler.rng.choice(free)
            if not claims.take(index, state):
                continue
            if storage.exists(layout.segment_marker(index)):
                claims.release(index)
                continue
            self.compute_and_commit(layout, index, claims, guard)

    def merge(self, layout: WorkLayout, plan: RunPlan) -> bytes:
        """Every committed segment's file, in order (the join), published at the output with its marker. Missing
        segments (the work was swept while the run was queued past its TTL) fail it, naming them; a marker whose file
        a sweep removed is deleted first, so the segment can be computed again."""
        parts, missing = [], []
        for index in range(plan.segments):
            try:
                marker = SegmentMarker.model_validate_json(storage.read_bytes(layout.segment_marker(index)))
            except InputMissingError:
                missing.append(index)
                continue
            try:
                content = storage.read_bytes(layout.segment_file(marker.file))
            except InputMissingError:
                storage.delete(layout.segment_marker(index))
                missing.append(index)
                continue
            if content != f"{layout.work_id}:{index}".encode():
                raise InvariantError(
                    f"I2-one-commit: segment {index}'s marker names {marker.file}, holding {content!r}"
                )
            parts.append(content)
        if missing:
            raise SegmentsMissingError(f"{plan.key}: segments {missing} are not committed")
        data = b"|".join(parts)
        self.check_output(plan, data)
        storage.write_bytes_atomic(self.output_uri(plan), data)
        storage.write_bytes_atomic(output_marker_uri(self.output_uri(plan)), layout.work_id.encode())
        return data

    def output_done(self, layout: WorkLayout, plan: RunPlan) -> bool:
        marker = output_marker_uri(self.output_uri(plan))
        return storage.exists(marker) and storage.read_bytes(marker) == layout.work_id.encode()

    def airflow_task(self, record: RunRecord, step: str) -> None:
        """One try of one task of an Airflow run; a killed try is tried again after a delay."""
        plan = record.plan
        record.tries += 1
        process = f"task-{plan.key}-{step}-{record.tries}"
        layout = self.layout(plan.work)
        owner = f"facefusion_swap/{plan.key}/swap_span/0"
        following = {"validate": "prepare", "prepare": "span", "span": "merge", "merge": "cleanup", "cleanup": ""}

        def body() -> None:
            if step == "cleanup":
                record.holding = False
                leases.release(layout, plan.key)
                self.scheduler.current().name = f"sweep-{plan.key}"
                leases.sweep_if_unused(layout, plan.key)
                record.finished = True
                return
            held = self.hold(record)  # every task holds the work as it starts
            if step == "prepare":
                self.prepare(layout, plan.segments)
            elif step == "span" and not self.output_done(layout, plan):
                self.prepare(layout, plan.segments)  # the work may have been removed while the run was queued
                claims = SegmentClaims(layout, owner=owner, lease=CLAIM_TTL, holder=process)
                self.renewer(record, held, [claims], process)
                if plan.mode == "task":
                    self.work_segments(layout, plan.segments, claims, held.check)
                else:
                    while len(scan_work(layout).committed) < plan.segments and not self.output_done(layout, plan):
                        held.check()
                        self.scheduler.sleep(10.0)  # the trigger's poll
            elif step == "merge" and not self.output_done(layout, plan):
                self.renewer(record, held, [], process)
                self.merge(layout, plan)
            self.scheduler.kill(f"{process}/renew")  # the process ends, and its threads with it
            if following[step]:
                self.schedule_task(record, following[step], self.scheduler.now + self.scheduler.rng.uniform(0, 20))

        def watchdog() -> None:
            """Airflow notices a dead try (a zombie) and starts the next one; a merge that found segments missing
            is answered by the user, who clears the run's swap_span tasks."""
            while not task.done:
                self.scheduler.sleep(RETRY_DELAY)
            self.scheduler.kill(process)  # its renewal thread ends with its process
            if task.killed or isinstance(task.error, RetryableError):  # LeaseLostError among them
                self.schedule_task(record, step, self.scheduler.now + RETRY_DELAY)
            elif isinstance(task.error, SegmentsMissingError):
                record.clears += 1
                self.schedule_task(record, "span", self.scheduler.now + RETRY_DELAY)
            elif task.error is not None:
                raise task.error

        task = self.scheduler.spawn(f"task-{plan.key}-{step}", body, group=process)
        self.scheduler.spawn(f"watch-{process}", watchdog, group=f"watch-{process}")

    def schedule_task(self, record: RunRecord, step: str, at: float) -> None:
        def start() -> None:
            self.airflow_task(record, step)

        self.scheduler.spawn(f"start-{record.plan.key}-{step}", start, at=at, group=f"start-{record.plan.key}")

    def cli_run(self, record: RunRecord) -> None:
        plan = record.plan
        group = f"cli-{plan.key}"
        layout = self.layout(plan.work)

        def body() -> None:
            try:
                held = self.hold(record)
                claims = SegmentClaims(layout, lease=CLAIM_TTL, holder=group)
                self.renewer(record, held, [claims], group)
                self.prepare(layout, plan.segments)
                self.work_segments(layout, plan.segments, claims, held.check)
                held.check()
                self.merge(layout, plan)
            except (RetryableError, SegmentsMissingError) as error:
                record.stopped = str(error)  # I5: it stops with a clear error instead of writing into a removed work
                record.holding = False
                return
            finally:
                self.scheduler.kill(f"{group}/renew")
            record.holding = False
            leases.release(layout, plan.key)
            self.scheduler.current().name = f"sweep-{plan.key}"
            leases.sweep_if_unused(layout, plan.key)
            record.finished = True

        actor = self.scheduler.spawn(group, body, at=plan.start, group=group)
        self._watch_cli(record, actor)

    def _watch_cli(self, record: RunRecord, actor: Actor) -> None:
        def watch() -> None:
            while not actor.done:
                self.scheduler.sleep(RETRY_DELAY)
            if actor.killed and not record.finished:
                record.stopped = "killed"
                record.holding = False
            self.scheduler.kill(actor.group)

        self.scheduler.spawn(f"watch-{actor.name}", watch, group=f"watch-{actor.name}")

    def standing_worker(self, number: int) -> None:
        """``serve`` (worker/scheduler.py, standing scope): prepares, works and merges every run that wants work."""
        group = f"standing-{number}"

        def body() -> None:
            while True:
                worked = False
                for folder in storage.list_folders(self.root.works_dir):
                    layout = WorkLayout(folder)
                    wanting = [held for held in leases.run_leases(layout) if held.wants_work]
                    if not wanting:
                        continue
                    segments = int(wanting[0].lease.options["segments"]) if wanting[0].lease.options else 0
                    claims = SegmentClaims(
                        layout, owner=group, lease=CLAIM_TTL, holder=f"{group}-{self.scheduler.steps}"
                    )
                    if not storage.exists(layout.work_json):
                        if claims.take_name(PREPARE_CLAIM, _state(layout)):
                            self.prepare(layout, segments)
                        continue
                    if len(scan_work(layout).committed) < segments:
                        self._standing_slice(layout, segments, claims)
                        worked = True
                        continue
                    for held in wanting:
                        plan = self.runs[held.key].plan
                        if not self.output_done(layout, plan) and claims.take_name(
                            merge_claim_name(held.key), _state(layout)
                        ):
                            with contextlib.suppress(SegmentsMissingError):  # a swept work: the segments come again
                                self.merge(layout, plan)
                if not worked:
                    self.scheduler.sleep(2.0)

        worker = self.scheduler.spawn(group, body, group=group)

        def deployment() -> None:
            """Its Deployment starts a new pod when one dies."""
            while not worker.done:
                self.scheduler.sleep(RETRY_DELAY)
            self.standing_worker(number)

        self.scheduler.spawn(f"deployment-{group}", deployment, group=f"deployment-{group}")

    def _standing_slice(self, layout: WorkLayout, segments: int, claims: SegmentClaims) -> None:
        state = scan_work(layout)
        free = [index for index in range(segments) if claims.is_free(index, state)]
        if not free or not claims.take(free[0], state):
            self.scheduler.sleep(1.0)
            return
        self.compute_and_commit(layout, free[0], claims, lambda: None)  # shorter than a claim TTL: no renewal

    def compute_and_commit(
        self, layout: WorkLayout, index: int, claims: SegmentClaims, guard: Callable[[], None]
    ) -> None:
        """A claimed segment: computed (its content is "{work}:{index}"), its file put, then its marker committed
        (worker/segments.py's Committer: ``guard`` first), its claim released."""
        self.scheduler.sleep(SEGMENT_SECONDS)
        name = segment_file_name(index, claims.holder)
        storage.write_bytes_atomic(layout.segment_file(name), f"{layout.work_id}:{index}".encode())
        guard()
        marker = SegmentMarker(
            work_id=layout.work_id,
            index=index,
            start=index,
            end=index + 1,
            frame_count=1,
            file=name,
            sha256="0" * 64,
            size=1,
            writer=claims.holder,
        )
        commit_marker(layout, index, marker.model_dump_json().encode(), file=name, writer=claims.holder)
        claims.release(index)

    # The schedule.
    def play(self, fault_steps: int = 1500, settle_steps: int = 20000) -> None:
        with simulated(self.monkeypatch, self.scheduler, self.store):
            for record in self.runs.values():
                if record.plan.kind == "cli":
                    self.cli_run(record)
                else:
                    self.schedule_task(record, "validate", record.plan.start)
            for number in range(self.standing):
                self.standing_worker(number)
            try:
                self.scheduler.run(fault_steps, until=self.settled)
            except InvariantError as error:
                if "I4" not in str(error):
                    raise
            self.scheduler.faults = False
            self.scheduler.run(settle_steps, until=self.settled)
            for actor in self.scheduler.actors:
                if actor.error is not None and not isinstance(
                    actor.error, (Killed, RetryableError, SegmentsMissingError)
                ):
                    raise actor.error

    def settled(self) -> bool:
        """Every run finished or stopped for good (standing workers and their Deployments run for ever)."""
        return all(record.finished or record.stopped for record in self.runs.values())


def _state(layout: WorkLayout) -> Any:
    from facefusion_provider.work.claims import WorkState

    return WorkState(frozenset(), latest_claims(layout))
