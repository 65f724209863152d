"""A deterministic simulation of the coordination protocol (docs/protocol.md), FoundationDB-style.

What runs is the real code: the protocol (``work/leases.py``, ``work/claims.py``, ``work/liveness.py``), the worker
loop (``worker/span.py``'s ``work_segments``, ``worker/scheduler.py``'s ``swap_span`` and ``work_live_runs``,
``worker/segments.py``'s picker and committer), the standing worker (``worker/serve.py``), the CLI run
(``worker/run.py``), prepare (``worker/prepare.py``), the merge with its integrity checks and healing
(``worker/healing.py``, ``output/merge.py``, ``output/integrity.py``) and the span's wait (``triggers/span_committed.py``),
against an in-memory store with the same create semantics (exclusive create, atomic replace, conditional replace,
delete; the store's clock stamps every write and keeps each object's checksum from its PUT).

Every actor (an Airflow task, a CLI run, a standing worker, each thread the real code starts through
``liveness.clock.thread``) is a thread, but exactly one runs at a time: every store call and every wait on
``liveness.clock`` hands control back to the scheduler, which picks the next actor with a seeded random generator and
injects faults. So a schedule is a pure function of its seed: a failing seed reproduces alone.

What is stubbed, at the narrowest seams: the frames (``worker/span.py``'s ``frame_work``: each segment the real picker
hands out takes ``SEGMENT_SECONDS`` and its file holds ``"{work}:{index}"``), the probe of a target, the join's media
(``output.merge``'s ``plan_join`` joins the very files the merge checked, in order) and the preview; the thread pools
the real code uses only to overlap requests run their tasks inline. Airflow itself is modelled: its tasks call what
the operators call, a killed task is tried again after a delay, a merge that finds segments missing is answered by the
user clearing the run's swap_span tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import json
import logging
import os
import random
import socket
import threading
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar, cast

import pytest

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidWorkError, RetryableError
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.media import decode, encode, probe
from facefusion_provider.options import Options
from facefusion_provider.output import index_join, publish
from facefusion_provider.output import merge as output_merge
from facefusion_provider.storage import StoredObject, prefetch
from facefusion_provider.triggers import span_committed
from facefusion_provider.triggers.span_committed import SpanCommittedTrigger
from facefusion_provider.types import VideoProbe
from facefusion_provider.work import claims, leases, liveness
from facefusion_provider.work.access import run_held
from facefusion_provider.work.ids import work_id
from facefusion_provider.work.layout import WorkLayout, parse_claim_name
from facefusion_provider.work.records import Claim, RunHolder, RunLease
from facefusion_provider.worker import healing, scheduler, segments, span
from facefusion_provider.worker.segments import Committer, SegmentPicker

# The worker package exports functions under these modules' names: the modules themselves.
prepare = importlib.import_module("facefusion_provider.worker.prepare")
run = importlib.import_module("facefusion_provider.worker.run")
serve = importlib.import_module("facefusion_provider.worker.serve")

ROOT = "s3://sim/root"
RUN_TTL = 300.0
CLI_TTL = 120.0
KEPT_TTL = 3600.0
CLAIM_TTLS = (15.0, 60.0)  # FACEFUSION_CLAIM_LEASE_SECONDS of a process: a world mixes them
SKEW_SECONDS = 900.0  # a skewed process's clock is this far ahead or behind
SWEEP_TTL = liveness.DEFAULT_TTL_SECONDS[liveness.LeaseKind.SWEEP]
SEGMENT_SECONDS = 10.0
SEGMENT_FRAMES = 4
RETRY_DELAY = 30.0
# Each injected fault kind; the test asserts every one fired in some schedule.
FAULT_KINDS = (
    "kill",
    "kill-before-write",
    "kill-after-write",
    "pause",
    "clock-jump",
    "kept",
    "damaged-bytes",
    "truncated-bytes",
    "skewed-clock",
    "mixed-claim-ttls",
)


class Killed(BaseException):  # a BaseException: no handler in the real code may swallow it
    """Raised in a killed actor at its next step: its process is gone, it writes nothing more."""


class InvariantError(AssertionError):
    pass


@dataclass
class Actor:
    name: str
    body: Callable[[], None]
    wake: float = 0.0
    killed: bool = False
    done: bool = False
    turn: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    waiting: threading.Event | None = None  # an event it waits on (``liveness.clock.wait``): runnable once set
    thread: threading.Thread | None = None
    group: str = ""  # actors of one process die together: ``process`` and its threads ``process/...``
    error: BaseException | None = None
    sweeping: bool = False  # inside ``leases.sweep_if_unused``

    @property
    def process(self) -> str:
        return self.group.split("/")[0]


class Scheduler:
    """Runs one actor at a time; picks who runs next, injects faults, owns the clock."""

    def __init__(self, seed: int, *, faults: bool = True) -> None:
        self.rng = random.Random(seed)
        self.now = 1_000_000.0
        self.actors: list[Actor] = []
        self.faults = faults
        self.steps = 0
        self.fired: Counter[str] = Counter()
        self.on_kept: Callable[[str], bool] = lambda process: False
        self._local = threading.local()
        self._yielded = threading.Event()
        self._spawned = 0
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

    def write_point(self, what: str) -> None:
        """A step before a write; the process may die just before it."""
        self.point(what)
        self._kill_at_write("kill-before-write")

    def after_write(self) -> None:
        self._kill_at_write("kill-after-write")

    def _kill_at_write(self, kind: str) -> None:
        actor = self.current()
        if self.faults and self._mortal(actor.process) and self.rng.random() < 0.002:
            self.fire(kind, actor.process)
            self.kill(actor.process)
            raise Killed

    def sleep(self, seconds: float) -> None:
        actor = self.current()
        actor.wake = self.now + max(seconds, 0.001)
        self.point(f"sleep {seconds:.1f}")

    def wait(self, event: threading.Event, seconds: float) -> bool:
        actor = self.current()
        actor.wake, actor.waiting = self.now + max(seconds, 0.001), event
        try:
            self.point(f"wait {seconds:.1f}")
        finally:
            actor.waiting = None
        return event.is_set()

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
                actor.finished.set()
                self._yielded.set()

        actor.thread = threading.Thread(target=main, name=name, daemon=True)
        self.actors.append(actor)
        actor.thread.start()
        return actor

    def thread(self, target: Callable[[], None], name: str) -> liveness.Joinable:
        """A thread the real code starts (a renewal): an actor of the caller's process."""
        parent = self.current()
        self._spawned += 1
        child = self.spawn(f"{parent.name}/{name}", target, group=f"{parent.group}/{name}-{self._spawned}")
        return _Joined(self, child)

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
            runnable = [actor for actor in alive if self._runnable(actor)]
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

    def _runnable(self, actor: Actor) -> bool:
        return actor.wake <= self.now or actor.killed or (actor.waiting is not None and actor.waiting.is_set())

    @staticmethod
    def _mortal(process: str) -> bool:
        return process.startswith(("task", "cli", "standing"))

    def fire(self, kind: str, detail: str) -> None:
        self.fired[kind] += 1
        self.log.append(f"{self.now:.1f} FAULT {kind} {detail}")

    def _fault(self, actor: Actor) -> None:
        roll = self.rng.random()
        process = actor.process
        if roll < 0.003 and self._mortal(process):
            self.fire("kill", process)
            self.kill(process)
        elif roll < 0.006 and self._mortal(process):
            pause = self.rng.uniform(0.5, 3.0) * RUN_TTL  # SIGSTOP, a frozen VM: past claim and run TTLs
            self.fire("pause", f"{process} {pause:.0f}s")
            for other in self.actors:
                if (other.group == process or other.group.startswith(process + "/")) and not other.done:
                    other.wake = self.now + pause
                    other.waiting = None
        elif roll < 0.009:
            jump = self.rng.uniform(0.0, 2.0) * max(CLAIM_TTLS)
            self.fire("clock-jump", f"+{jump:.0f}s")
            self.now += jump
        elif roll < 0.011 and self.on_kept(process):
            self.fire("kept", process)

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
class _Joined:
    scheduler: Scheduler
    actor: Actor

    def join(self) -> None:
        while not self.actor.done:
            self.scheduler.wait(self.actor.finished, 3600.0)


class SimClock(liveness.Clock):
    """The scheduler's time; a skewed process's wall clock is off by its skew (the store stamps true time)."""

    def __init__(self, scheduler: Scheduler, skews: dict[str, float]) -> None:
        self.scheduler, self.skews = scheduler, skews

    def now(self) -> float:
        return self.scheduler.now + self.skews.get(self.scheduler.current().process, 0.0)

    def monotonic(self) -> float:
        return self.scheduler.now

    def sleep(self, seconds: float) -> None:
        self.scheduler.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return self.scheduler.wait(event, seconds)

    def thread(self, target: Callable[[], None], name: str) -> liveness.Joinable:
        return self.scheduler.thread(target, name)


P = ParamSpec("P")
R = TypeVar("R")


class InlineExecutor(Executor):
    """The real code's thread pools overlap requests only: here their tasks run in the caller, one step at a time."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        future: Future[R] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as error:
            future.set_exception(error)
        return future


@dataclass
class Entry:
    data: bytes
    written: float
    version: int
    sha256: str | None = None  # the checksum the store keeps from a checked PUT


def segment_content(work: str, index: int) -> bytes:
    return f"{work}:{index}".encode()


class SimStore:
    """The store: exclusive create, atomic and conditional replace, delete, listings, checksums; every call is one
    step of its actor."""

    def __init__(self, scheduler: Scheduler, world: World) -> None:
        self.scheduler, self.world = scheduler, world
        self.objects: dict[str, Entry] = {}
        self.versions = 0

    def _put(self, uri: str, data: bytes, sha256: str | None = None) -> None:
        self.versions += 1
        self.objects[uri] = Entry(bytes(data), self.scheduler.now, self.versions, sha256)
        self.world.written(uri, data)
        self.scheduler.after_write()

    def _get(self, uri: str) -> Entry:
        if uri not in self.objects:
            raise InputMissingError(f"{uri} does not exist")
        return self.objects[uri]

    def exists(self, uri: str) -> bool:
        self.scheduler.point(f"exists {uri}")
        return uri in self.objects

    def read_bytes(self, uri: str) -> bytes:
        self.scheduler.point(f"read {uri}")
        return self._get(uri).data

    def read_json(self, uri: str) -> Any:
        return json.loads(self.read_bytes(uri))

    def write_bytes_atomic(self, uri: str, data: bytes) -> None:
        self.scheduler.write_point(f"put {uri}")
        self._put(uri, data)

    def write_bytes_exclusive(self, uri: str, data: bytes) -> bool:
        self.scheduler.write_point(f"create {uri}")
        if uri in self.objects:
            return False
        self.world.creating(uri, data)
        self._put(uri, data)
        return True

    def write_bytes_if_unchanged(self, uri: str, data: bytes, version: str) -> bool:
        self.scheduler.write_point(f"put if-match {uri}")
        entry = self.objects.get(uri)
        if entry is None or str(entry.version) != version:
            return False
        self._put(uri, data)
        return True

    def put_file_checked(self, local: str | os.PathLike[str], uri: str, sha256: str) -> None:
        self.scheduler.write_point(f"put checked {uri}")
        with open(local, "rb") as file:
            data = file.read()
        assert hashlib.sha256(data).hexdigest() == sha256, "the store refuses a PUT whose bytes differ from its sha256"
        self._put(uri, data, sha256)

    def delete(self, uri: str) -> None:
        self.scheduler.write_point(f"delete {uri}")
        if uri in self.objects:
            self.world.deleting(uri)
            del self.objects[uri]
        self.scheduler.after_write()

    def stat(self, uri: str) -> StoredObject | None:
        self.scheduler.point(f"head {uri}")
        entry = self.objects.get(uri)
        return None if entry is None else StoredObject(uri, str(entry.version), len(entry.data), entry.written)

    def stored_sha256(self, uri: str) -> str | None:
        self.scheduler.point(f"head checksum {uri}")
        entry = self.objects.get(uri)
        return None if entry is None else entry.sha256

    def object_sha256(self, uri: str) -> str:
        return hashlib.sha256(self.read_bytes(uri)).hexdigest()

    def content_id(self, uri: str) -> str:
        self.scheduler.point(f"head {uri}")
        return self.identity(uri)

    def identity(self, uri: str) -> str:
        data = self._get(uri).data
        return f"etag:{hashlib.sha256(data).hexdigest()[:16]}:{len(data)}"

    @contextmanager
    def open_input(self, uri: str, *, block_size: int | None = None) -> Iterator[str]:
        self.scheduler.point(f"open {uri}")
        self._get(uri)
        yield uri

    def compose(self, uri: str, pieces: Sequence[storage.Piece]) -> storage.Composed:
        """The output from the pieces the merge planned: every one a segment file, checked against what it must hold
        (I2) and the whole against a run alone (I3, when its marker is written)."""
        parts = []
        for piece in pieces:
            assert isinstance(piece, storage.ByteSlice)
            data = self.read_bytes(piece.uri)[piece.start : piece.end]
            work, index = piece.uri.split("/work/")[1].split("/")[0], int(piece.uri.rsplit("/", 1)[1][:5])
            if data != segment_content(work, index):
                raise InvariantError(f"I2-one-commit: the merge joined {piece.uri}, which holds {data!r}")
            parts.append(data)
        data = b"|".join(parts)
        self.scheduler.write_point(f"compose {uri}")
        self._put(uri, data)
        return storage.Composed(len(data), len(data), 0, len(pieces))

    def list_files(self, prefix: str) -> list[StoredObject]:
        self.scheduler.point(f"list {prefix}")
        base = prefix.rstrip("/")
        listed = [
            StoredObject(uri, str(entry.version), len(entry.data), entry.written)
            for uri, entry in sorted(self.objects.items())
            if uri == base or uri.startswith(base + "/")
        ]
        self.world.listed(listed)
        return listed

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


STORE_CALLS = (
    "exists",
    "read_bytes",
    "read_json",
    "write_bytes_atomic",
    "write_bytes_exclusive",
    "write_bytes_if_unchanged",
    "put_file_checked",
    "delete",
    "stat",
    "stored_sha256",
    "object_sha256",
    "content_id",
    "open_input",
    "compose",
    "list_files",
    "list_folders",
    "remove_empty_folders",
)


@contextmanager
def stub_frame_work(
    spec: Any,
    target_uri: str,
    processors: Any,
    metrics: Any,
    decoding: Any,
    progress: Any,
    own: range,
    span_number: int,
    label: str,
) -> Iterator[span.EncodeSegments]:
    """``worker/span.py``'s frame work without frames: the segments the real picker hands out (as ``SegmentFrames``
    asks for them) take ``SEGMENT_SECONDS`` each, and their files, holding ``"{work}:{index}"``, go to the real
    committer as the real encoder's would."""

    def encode(picker: SegmentPicker, committer: Committer, folder: str) -> int:
        frames, previous = 0, None
        while (segment := picker.take(previous)) is not None:
            liveness.clock.sleep(SEGMENT_SECONDS)
            path = os.path.join(folder, f"{segment.index:05d}.mp4")
            with open(path, "wb") as file:
                file.write(segment_content(spec.work_id, segment.index))
            committer.submit(segment, path, segment.frame_count, {}, SEGMENT_SECONDS)
            frames, previous = frames + segment.frame_count, segment.index
        return frames

    yield encode


def stub_plan_join(
    spec: Any, layout: WorkLayout, markers: list[Any], sizes: dict[str, int], target_uri: str, output_uri: str
) -> index_join.JoinPlan:
    """The join of exactly the files the merge checked against their markers, in order (the real one reads their
    indexes)."""
    return index_join.JoinPlan([storage.ByteSlice(layout.segment_file(m.file), 0, m.size) for m in markers], 0.0)


class _InlineAsyncio:
    """The trigger's asyncio, as the simulation runs it: storage calls inline, sleeps on the simulated clock."""

    @staticmethod
    async def to_thread(function: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        return function(*args, **kwargs)

    @staticmethod
    async def sleep(seconds: float) -> None:
        liveness.clock.sleep(seconds)


@dataclass
class RunPlan:
    key: str
    work: str  # the target's name
    segments: int
    kind: str  # "airflow" or "cli"
    start: float
    mode: str  # "task": its own span workers; "standing": standing workers work it
    spans: int = 1


@dataclass
class RunRecord:
    plan: RunPlan
    finished: bool = False
    stopped: str = ""  # why it stopped for good (a CLI run that lost its lease, or was killed)
    tries: int = 0
    holding: bool = False  # it finished ``hold`` and has not released
    lapsed: bool = False  # it let its lease lapse since it last held the work
    last_write: float = 0.0  # when its lease was last written (hold, renewal, kept)
    ttl: float = 0.0  # the TTL last written in its lease
    clears: int = 0  # how often "the user" cleared its swap_span tasks (a merge found segments missing)
    spans_done: set[int] = field(default_factory=set)


class World:
    """One schedule: works, runs and standing workers over one simulated store, and the invariants."""

    def __init__(self, seed: int, monkeypatch: pytest.MonkeyPatch, *, faults: bool = True) -> None:
        self.seed = seed
        self.scheduler = Scheduler(seed, faults=faults)
        self.scheduler.on_kept = self._keep_for_retry
        self.store = SimStore(self.scheduler, self)
        self.monkeypatch = monkeypatch
        self.sweeps_began: dict[str, float] = {}  # sweeping actor -> when it created its marker
        self.lost: dict[str, int] = {}  # process -> the step its renewal found its run's lease removed
        self.checked: dict[str, int] = {}  # actor -> the step it last passed its lease's guard
        self.stale_sweeps = 0
        self.live_claims_taken = 0
        self.claims_seen: dict[str, dict[str, float]] = {}  # actor -> claim -> its written time in the last listing
        self.runs: dict[str, RunRecord] = {}
        self.ran: Counter[str] = Counter()  # the real loop functions, by name, as they were called
        rng = random.Random(seed ^ 0x5EED)
        self.rng = rng
        names = [f"w{number}" for number in range(rng.randint(1, 3))]
        sizes = {name: rng.randint(1, 5) for name in names}
        for number in range(rng.randint(2, 5)):
            name = rng.choice(names)
            kind = "cli" if rng.random() < 0.25 else "airflow"
            mode = "standing" if kind == "airflow" and rng.random() < 0.4 else "task"
            spans = rng.randint(1, min(2, sizes[name])) if mode == "task" else 1
            plan = RunPlan(f"run{number}", name, sizes[name], kind, rng.uniform(0, 200), mode, spans)
            self.runs[plan.key] = RunRecord(plan)
        self.standing = rng.randint(1, 2) if any(r.plan.mode == "standing" for r in self.runs.values()) else 0
        self.standing_pods = 0
        self.options = {name: Options(processors=[], segment_size=SEGMENT_FRAMES) for name in names}
        self.claim_ttls: dict[str, float] = {}  # process -> its claim TTL (chosen when it first asks)
        self.mixed_ttls = rng.random() < 0.5
        self.skewed = rng.random() < 0.4  # one process of this world runs on a clock a quarter hour off
        self.skews: dict[str, float] = {}
        self.damaged: set[str] = set()
        self.merging: Counter[str] = Counter()  # work -> merges in progress on it
        for name in names:
            self.store.objects[self.target_uri(name)] = Entry(name.encode(), self.scheduler.now, 0)
        self.work_ids = {
            name: work_id(self.store.identity(self.target_uri(name)), [], self.options[name]) for name in names
        }

    # Invariants and what they watch.
    def creating(self, uri: str, data: bytes) -> None:
        actor = self.scheduler.current()
        if uri.endswith("/deleting.json"):
            self.sweeps_began[actor.name] = self.scheduler.now
        if "/segments/" in uri and uri.endswith(".json") and not uri.endswith(".retired.json"):
            lost = self.lost.get(actor.process)
            if lost is not None and self.checked.get(actor.name, -1) > lost:
                raise InvariantError(
                    f"I5-lost-lease-stops: {actor.process} committed {uri} after it found its lease lost"
                )
        if "/claims/" in uri:
            self._taking_claim(uri, data)

    def listed(self, items: list[StoredObject]) -> None:
        """What this actor's last listing showed of each claim: its written time then."""
        seen = self.claims_seen.setdefault(self.scheduler.current().name, {})
        for item in items:
            if "/claims/" in item.uri:
                seen[item.uri] = item.modified

    def _taking_claim(self, uri: str, data: bytes) -> None:
        """Counts a claim taken over that was live, by its holder's own TTL and the store's clock, as the taker saw it
        (its listing's written time, now): a reader's clock or TTL decided (one renewed since the listing is not)."""
        parsed = parse_claim_name(uri.rsplit("/", 1)[-1])
        if parsed is None or not parsed[0].isdigit() or parsed[1] < 2:
            return
        previous_uri = uri.rsplit("/", 1)[0] + f"/{parsed[0]}.{parsed[1] - 1:04d}.json"
        previous = self.store.objects.get(previous_uri)
        seen = self.claims_seen.get(self.scheduler.current().name, {}).get(previous_uri)
        if previous is None or seen is None:
            return
        held, taker = Claim.model_validate_json(previous.data), Claim.model_validate_json(data)
        segments_dir = uri.split("/claims/", maxsplit=1)[0] + "/segments/"
        retired = any(
            name.startswith(segments_dir + f"{int(parsed[0]):05d}.")
            and name.endswith(".retired.json")
            and entry.written >= seen
            for name, entry in self.store.objects.items()
        )
        live = self.scheduler.now - seen <= held.ttl_seconds
        if live and not retired and held.owner != taker.owner:
            self.live_claims_taken += 1
            self.scheduler.log.append(f"{self.scheduler.now:.1f} LIVE CLAIM TAKEN {uri}")

    def written(self, uri: str, data: bytes) -> None:
        if "/runs/" in uri:
            lease = RunLease.model_validate_json(data)
            record = self._record_of(lease.output_uri)
            if record is not None:
                if record.holding and self.scheduler.now - record.last_write > record.ttl:
                    record.lapsed = True  # paused past its TTL: a sweep may have judged it, rightly
                record.last_write, record.ttl = self.scheduler.now, lease.ttl_seconds
        for record in self.runs.values():
            if uri == self.output_uri(record.plan):
                expected = b"|".join(
                    segment_content(self.work_ids[record.plan.work], index) for index in range(record.plan.segments)
                )
                if data != expected:
                    raise InvariantError(
                        f"I3-output-equals-alone: {record.plan.key} wrote {data!r}, a run alone writes {expected!r}"
                    )

    def deleting(self, uri: str) -> None:
        actor = self.scheduler.current()
        if not actor.sweeping or uri.endswith("/deleting.json") or "/work/" not in uri:
            return  # only what a sweep removes of the work itself
        if self.scheduler.now - self.sweeps_began.get(actor.name, self.scheduler.now) > SWEEP_TTL:
            self.stale_sweeps += 1  # paused past its marker's TTL between its last look at the clock and this delete
            return
        work = uri.split("/work/")[1].split("/", maxsplit=1)[0]
        for record in self.runs.values():
            live = self.scheduler.now - record.last_write <= record.ttl
            if self.work_ids[record.plan.work] == work and record.holding and not record.lapsed and live:
                raise InvariantError(
                    f"I1-held-work-stays: {actor.name} deleted {uri} while {record.plan.key} held the work "
                    f"(lease last written {self.scheduler.now - record.last_write:.0f} s ago, TTL {record.ttl:.0f} s)"
                )

    def _record_of(self, output_uri: str) -> RunRecord | None:
        return next((r for r in self.runs.values() if self.output_uri(r.plan) == output_uri), None)

    # The seams the real code is watched and driven through.
    def _hold(self, real: Callable[..., None]) -> Callable[..., None]:
        def hold(layout: WorkLayout, run_key: str, lease: RunLease, **kwargs: Any) -> None:
            real(layout, run_key, lease, **kwargs)
            record = self._record_of(lease.output_uri)
            written = self.store.objects.get(layout.run_lease(run_key))
            if record is not None and written is not None:
                record.holding, record.lapsed = True, False
                record.last_write, record.ttl = written.written, lease.ttl_seconds

        return hold

    def _release(self, real: Callable[[WorkLayout, str], None]) -> Callable[[WorkLayout, str], None]:
        def release(layout: WorkLayout, run_key: str) -> None:
            process = self.scheduler.current().process  # a CLI run's key is its own: its process names the run
            for record in self.runs.values():
                if run_key == record.plan.key or process == f"cli-{record.plan.key}":
                    record.holding = False
            real(layout, run_key)

        return release

    def _sweep(self, real: Callable[..., list[str]]) -> Callable[..., list[str]]:
        def sweep_if_unused(layout: WorkLayout, run_key: str, **kwargs: Any) -> list[str]:
            actor = self.scheduler.current()
            actor.sweeping = True
            try:
                return real(layout, run_key, **kwargs)
            finally:
                actor.sweeping = False

        return sweep_if_unused

    def _renew(self, real: Callable[[leases.RunHold], None]) -> Callable[[leases.RunHold], None]:
        def renew(held: leases.RunHold) -> None:
            try:
                real(held)
            except leases.LeaseLostError:
                self.lost.setdefault(self.scheduler.current().process, self.scheduler.steps)
                raise

        return renew

    def _check(self, real: Callable[[leases.RunHold], None]) -> Callable[[leases.RunHold], None]:
        def check(held: leases.RunHold) -> None:
            real(held)
            self.checked[self.scheduler.current().name] = self.scheduler.steps

        return check

    def _counted(self, name: str, real: Callable[P, R]) -> Callable[P, R]:
        def counted(*args: P.args, **kwargs: P.kwargs) -> R:
            self.ran[name] += 1
            return real(*args, **kwargs)

        return counted

    def _merging(self, real: Callable[..., Any]) -> Callable[..., Any]:
        """The checked merge, counted, and marked as in progress on its work: damage at rest is injected between
        merges, not between a merge's check of a file and its join of it (no merge can see that)."""

        def merge_work(spec: Any, *args: Any, **kwargs: Any) -> Any:
            self.ran["merge_work"] += 1
            self.merging[spec.work_id] += 1
            try:
                return real(spec, *args, **kwargs)
            finally:
                self.merging[spec.work_id] -= 1

        return merge_work

    def claim_ttl(self) -> float:
        """This process's ``FACEFUSION_CLAIM_LEASE_SECONDS``: with mixed TTLs each process has its own."""
        process = self.scheduler.current().process
        if process not in self.claim_ttls:
            self.claim_ttls[process] = self.rng.choice(CLAIM_TTLS) if self.mixed_ttls else CLAIM_TTLS[-1]
        return self.claim_ttls[process]

    def hostname(self) -> str:
        """Each simulated process is a host of its own (its probes, claims and worker name say so)."""
        return self.scheduler.current().process

    def probe_video(self, target: str, uri: str) -> VideoProbe:
        self.scheduler.point(f"probe {uri}")
        name = uri.rsplit("/", 1)[-1].removesuffix(".mp4")
        frames = next(r.plan.segments for r in self.runs.values() if r.plan.work == name) * SEGMENT_FRAMES
        return VideoProbe(
            container="mov,mp4,m4a,3gp,3g2,mj2",
            codec="h264",
            width=64,
            height=64,
            pix_fmt="yuv420p",
            frame_rate="25/1",
            time_base="1/25",
            frame_count=frames,
            pts=list(range(frames)),
            duration_seconds=frames / 25,
        )

    def _offsets(self) -> dict[str, tuple[float, float]]:
        """``liveness``'s clock offsets, one table per simulated process (each measures its own)."""
        world = self

        class PerProcess(dict[str, tuple[float, float]]):
            def get(self, key: str, default: Any = None) -> Any:
                return super().get(f"{world.scheduler.current().process} {key}", default)

            def __setitem__(self, key: str, value: tuple[float, float]) -> None:
                super().__setitem__(f"{world.scheduler.current().process} {key}", value)

        return PerProcess()

    def _uuid4(self) -> Any:
        counter = iter(range(1 << 62))
        return lambda: uuid.UUID(int=self.rng.getrandbits(64) << 64 | next(counter))

    @contextmanager
    def simulated(self) -> Iterator[None]:
        patch = self.monkeypatch
        for name in STORE_CALLS:
            patch.setattr(storage, name, getattr(self.store, name))
        patch.setattr(liveness, "clock", SimClock(self.scheduler, self.skews))
        patch.setattr(liveness, "_offsets", self._offsets())
        patch.setattr(liveness, "CLI_RUN_TTL_SECONDS", CLI_TTL)
        patch.setattr(leases, "POLL_SECONDS", 5.0)
        patch.setattr(serve, "FIRST_LOOK_SECONDS", 2.0)  # an idle worker's looks at the signal: fewer, fewer steps
        patch.setattr(serve, "LONGEST_LOOK_SECONDS", 10.0)
        patch.setattr(leases, "hold", self._hold(leases.hold))
        patch.setattr(leases, "release", self._release(leases.release))
        patch.setattr(leases, "sweep_if_unused", self._sweep(leases.sweep_if_unused))
        patch.setattr(leases.RunHold, "renew", self._renew(leases.RunHold.renew))
        patch.setattr(leases.RunHold, "check", self._check(leases.RunHold.check))
        patch.setattr(claims, "_CHECKED_ROOTS", set())
        leases._worker_ttl.cache_clear()  # read once per version: versions start again with each schedule
        patch.setattr(claims, "lease_seconds", self.claim_ttl)
        patch.setattr(scheduler, "lease_seconds", self.claim_ttl)
        patch.setattr(socket, "gethostname", self.hostname)
        patch.setattr(uuid, "uuid4", self._uuid4())
        for module in (segments, scheduler, prefetch):
            patch.setattr(module, "ThreadPoolExecutor", InlineExecutor)
        patch.setattr(span, "frame_work", stub_frame_work)
        patch.setattr(probe, "probe_video", self.probe_video)
        patch.setattr(decode, "check_seek_decode", lambda *args, **kwargs: None)
        patch.setattr(encode, "judged_here", lambda *args, **kwargs: False)
        patch.setattr(output_merge, "plan_join", stub_plan_join)
        patch.setattr(publish, "preview_sheet", lambda spec, layout: b"preview")
        patch.setattr(span_committed, "asyncio", _InlineAsyncio)
        patch.setattr(FaceFusionStorageHook, "s3_credentials", lambda hook: None)
        for owner, name, label in (
            (scheduler, "work_segments", "work_segments"),
            (healing, "work_segments", "work_segments"),
            (run, "work_segments", "work_segments"),
            (scheduler, "work_live_runs", "work_live_runs"),
            (serve, "work_live_runs", "work_live_runs"),
            (scheduler, "swap_span", "swap_span"),
            (healing, "merge", "merge"),
            (scheduler, "merge_waiting_outputs", "merge_waiting_outputs"),
            (run, "run", "run"),
            (serve, "serve", "serve"),
            (SpanCommittedTrigger, "run", "SpanCommittedTrigger.run"),
            (Committer, "_commit", "_commit"),
        ):
            patch.setattr(owner, name, self._counted(label, getattr(owner, name)))
        patch.setattr(output_merge, "merge_work", self._merging(output_merge.merge_work))
        logging.disable(logging.WARNING)  # thousands of schedules: their log lines cost more than the schedules
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)
            self.scheduler.stop()

    # Faults that need the world.
    def _keep_for_retry(self, process: str) -> bool:
        """An Airflow task fails (killed here) and its failure callback rewrites the run's lease as ``kept``."""
        if not process.startswith("task-") or "-cleanup" in process or "-validate" in process:
            return False
        key = process.split("-")[1]
        record = self.runs[key]
        self.scheduler.kill(process)

        def callback() -> None:
            with contextlib.suppress(RetryableError):  # swept meanwhile: nothing to keep
                leases.keep_for_retry(self.layout(record.plan), key, KEPT_TTL)

        self.scheduler.spawn(f"callback-{process}", callback)
        return True

    def damage(self) -> None:
        """Bytes of one committed segment file changed in the store (flipped, or cut short), its checksum gone."""
        committed = [
            uri
            for uri, entry in self.store.objects.items()
            if "/segments/" in uri
            and uri.endswith(".mp4")
            and entry.sha256 is not None
            and uri not in self.damaged
            and not self.merging[uri.split("/work/")[1].split("/")[0]]
        ]
        if not committed:
            return
        uri = self.rng.choice(sorted(committed))
        entry = self.store.objects[uri]
        truncated = self.rng.random() < 0.5
        entry.data = entry.data[:-1] if truncated else entry.data[:-1] + b"#"
        entry.sha256 = None
        self.damaged.add(uri)
        self.scheduler.fire("truncated-bytes" if truncated else "damaged-bytes", uri)

    def chaos(self) -> None:
        """Damages a committed segment now and then while faults are on."""
        while self.scheduler.faults:
            self.scheduler.sleep(self.rng.uniform(20.0, 200.0))
            if self.scheduler.faults and self.rng.random() < 0.3:
                self.damage()

    # Actors.
    def layout(self, plan: RunPlan) -> WorkLayout:
        return WorkLayout.under(ROOT, self.work_ids[plan.work])

    def target_uri(self, name: str) -> str:
        return f"s3://sim/in/{name}.mp4"

    def output_uri(self, plan: RunPlan) -> str:
        return f"s3://sim/out/{plan.key}.mp4"

    def lease_of(self, plan: RunPlan) -> RunLease:
        return RunLease(
            holder=RunHolder(kind="airflow", dag_id="facefusion_swap", run_id=plan.key),
            ttl_seconds=RUN_TTL,
            output_uri=self.output_uri(plan),
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            target_uri=self.target_uri(plan.work),
            options=self.options[plan.work].model_dump(mode="json"),
        )

    def span_range(self, plan: RunPlan, number: int) -> tuple[int, int]:
        return plan.segments * number // plan.spans, plan.segments * (number + 1) // plan.spans

    def airflow_task(self, record: RunRecord, step: str, number: int = 0) -> None:
        """One try of one task of an Airflow run, calling what its operator calls; a failed try is tried again."""
        plan = record.plan
        record.tries += 1
        process = f"task-{plan.key}-{step}{number}-{record.tries}"
        layout, target, output = self.layout(plan), self.target_uri(plan.work), self.output_uri(plan)
        owner = f"facefusion_swap/{plan.key}/{step}/{number}"

        def body() -> None:
            if step == "cleanup":
                leases.release(layout, plan.key)
                leases.sweep_if_unused(layout, plan.key)
                record.finished = True
                return
            leases.hold(layout, plan.key, self.lease_of(plan))  # every task holds the work as it starts
            done = self._output_done(layout, output)
            if step == "prepare" and not done:
                with run_held(layout.work_uri, plan.key):
                    prepare.prepare(layout.work_uri, [], target, options=self.options[plan.work])
            elif step == "span" and not done and plan.mode == "task":
                first, last = self.span_range(plan, number)
                with run_held(layout.work_uri, plan.key) as guard:
                    scheduler.swap_span(
                        layout.work_uri, target, first, last, span=number, owner=owner, run_key=plan.key, guard=guard
                    )
            elif step == "span" and not done:
                self._wait_for_standing_workers(layout, plan)
            elif step == "merge" and not done:
                with run_held(layout.work_uri, plan.key) as guard:
                    healing.merge(layout.work_uri, target, output, owner=owner, guard=guard, run_key=plan.key)
            self._next(record, step, number)

        def watchdog() -> None:
            """Airflow notices a dead try (a zombie) and starts the next one; a merge that found segments missing
            is answered by the user, who clears the run's swap_span tasks."""
            while not task.done:
                self.scheduler.sleep(RETRY_DELAY)
            self.scheduler.kill(process)  # its threads end with its process
            error = task.error
            if task.killed or isinstance(error, RetryableError):  # LeaseLostError among them
                self.schedule_task(record, step, self.scheduler.now + RETRY_DELAY, number)
            elif isinstance(error, InvalidWorkError) and "are not committed" in str(error):
                record.clears += 1
                record.spans_done = set()
                for span_number in range(plan.spans):
                    self.schedule_task(record, "span", self.scheduler.now + RETRY_DELAY, span_number)
            elif error is not None:
                raise error

        task = self.scheduler.spawn(f"task-{plan.key}-{step}{number}", body, group=process)
        self.scheduler.spawn(f"watch-{process}", watchdog, group=f"watch-{process}")

    def _output_done(self, layout: WorkLayout, output: str) -> bool:
        from facefusion_provider.work.layout import output_done

        return output_done(layout.work_id, output) is not None

    def _wait_for_standing_workers(self, layout: WorkLayout, plan: RunPlan) -> None:
        """The span's deferral: the real trigger, its loop on the simulated clock; a span whose standing workers were
        all gone too long fails and is retried (KEDA scales them up)."""
        trigger = SpanCommittedTrigger(layout.work_uri, 0, plan.segments, run_key=plan.key, renew_seconds=RUN_TTL / 4)

        async def first_event() -> Any:
            events = cast("AsyncGenerator[Any, None]", trigger.run())  # an async generator: it can be closed
            try:
                return (await anext(events)).payload
            finally:
                await events.aclose()

        event = _run_coroutine(first_event())
        if event is None or event["status"] != "committed":
            raise RetryableError(f"span of {plan.key}: {event}")

    def _next(self, record: RunRecord, step: str, number: int) -> None:
        at = self.scheduler.now + self.scheduler.rng.uniform(0, 20)
        if step == "validate":
            self.schedule_task(record, "prepare", at)
        elif step == "prepare":
            for span_number in range(record.plan.spans):
                self.schedule_task(record, "span", at, span_number)
        elif step == "span":
            record.spans_done.add(number)
            if len(record.spans_done) == record.plan.spans:
                self.schedule_task(record, "merge", at)
        elif step == "merge":
            self.schedule_task(record, "cleanup", at)

    def schedule_task(self, record: RunRecord, step: str, at: float, number: int = 0) -> None:
        def start() -> None:
            self.airflow_task(record, step, number)

        self.scheduler.spawn(f"start-{record.plan.key}-{step}", start, at=at, group=f"start-{record.plan.key}")

    def cli_run(self, record: RunRecord) -> None:
        """``facefusion-worker run``: the real ``worker.run.run`` in a process of its own."""
        plan = record.plan
        process = f"cli-{plan.key}"

        def body() -> None:
            try:
                run.run([], self.target_uri(plan.work), self.output_uri(plan), ROOT, options=self.options[plan.work])
            except RetryableError as error:  # I5: it stops with a clear error instead of writing into a removed work
                record.stopped = str(error)
                record.holding = False
                return
            record.finished = True

        actor = self.scheduler.spawn(process, body, at=plan.start, group=process)

        def watch() -> None:
            while not actor.done:
                self.scheduler.sleep(RETRY_DELAY)
            if not record.finished and not record.stopped:
                record.stopped = "killed" if actor.killed else repr(actor.error)
                record.holding = False
                if actor.error is not None and not isinstance(actor.error, Killed):
                    raise actor.error
            self.scheduler.kill(process)

        self.scheduler.spawn(f"watch-{process}", watch, group=f"watch-{process}")

    def standing_worker(self, number: int) -> None:
        """``facefusion-worker serve``: the real ``serve``; its Deployment starts a new pod (a new host) when one dies."""
        self.standing_pods += 1
        process = f"standing-{number}.{self.standing_pods}"

        def body() -> None:
            serve.serve(ROOT)

        worker = self.scheduler.spawn(process, body, group=process)

        def deployment() -> None:
            while not worker.done:
                self.scheduler.sleep(RETRY_DELAY)
            self.scheduler.kill(process)
            self.standing_worker(number)

        self.scheduler.spawn(f"deployment-{process}", deployment, group=f"deployment-{process}")

    # The schedule.
    def play(self, fault_steps: int = 1500, settle_steps: int = 30000) -> None:
        with self.simulated():
            processes = []
            for record in self.runs.values():
                if record.plan.kind == "cli":
                    self.cli_run(record)
                    processes.append(f"cli-{record.plan.key}")
                else:
                    self.schedule_task(record, "validate", record.plan.start)
            for number in range(self.standing):
                self.standing_worker(number)
            if self.skewed:  # a CLI run or the first standing worker: their clocks judge claims and sweeps
                skewed = self.rng.choice([*processes, *(f"standing-{n}.{n + 1}" for n in range(self.standing))] or [""])
                if skewed:
                    self.skews[skewed] = self.rng.choice((-SKEW_SECONDS, SKEW_SECONDS))
                    self.scheduler.fire("skewed-clock", f"{skewed} {self.skews[skewed]:+.0f}s")
            if self.mixed_ttls:
                self.scheduler.fire("mixed-claim-ttls", "")
            self.scheduler.spawn("chaos", self.chaos)
            try:
                self.scheduler.run(fault_steps, until=self.settled)
            except InvariantError as error:
                if "I4" not in str(error):
                    raise
            self.scheduler.faults = False
            self.scheduler.run(settle_steps, until=self.settled)
            for actor in self.scheduler.actors:
                if actor.error is not None and not isinstance(actor.error, (Killed, RetryableError)):
                    if isinstance(actor.error, InvalidWorkError) and "are not committed" in str(actor.error):
                        continue
                    raise actor.error

    def settled(self) -> bool:
        """Every run finished or stopped for good (standing workers and their Deployments run for ever)."""
        return all(record.finished or record.stopped for record in self.runs.values())


def _run_coroutine(coroutine: Coroutine[Any, Any, R]) -> R:
    """Runs ``coroutine`` on an event loop of this actor's thread (the triggerer's, in Airflow)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())  # the trigger's inner generator, closed here, not by GC
        loop.close()
