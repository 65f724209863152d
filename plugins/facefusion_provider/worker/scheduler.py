"""The one worker loop's choice of runs (docs/protocol.md): which live runs a worker may take segments of, in what
order, and when it exits. A span task's worker, a helping worker and a standing worker run the same loop and differ
only in their ``Scope``: a span task's worker works its own span first (``worker/span.py`` chooses the segments
within a work, for every scope), then, for ``FACEFUSION_HELP_OTHER_RUNS_SECONDS``, other live runs needing the same
models; a standing worker (``serve``) takes every live run for ever, and also prepares waiting works and merges the
outputs of the works it completes. A run wants work while its lease is live and active: a failed run's lease is
``kept``, its work left to its retry."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime

from facefusion_provider import storage
from facefusion_provider.contract import worker_settings
from facefusion_provider.exceptions import FaceFusionError, InvalidOptionError, InvalidWorkError
from facefusion_provider.options import Options
from facefusion_provider.output.sound import store_sound
from facefusion_provider.work import leases, liveness
from facefusion_provider.work.access import checked_uris, load_work, work_layout
from facefusion_provider.work.claims import (
    SegmentClaims,
    WorkState,
    latest_claims,
    lease_seconds,
    longest_free_run,
    scan_work,
)
from facefusion_provider.work.layout import (
    PREPARE_CLAIM,
    WORK_FOLDER,
    WorkLayout,
    merge_claim_name,
    output_done,
    root_of,
    work_root_of,
)
from facefusion_provider.work.records import RunLease, WorkSpec
from facefusion_provider.worker.prepare import prepare_work
from facefusion_provider.worker.span import FrameProcessors, SpanResult, load_or_prepare, work_segments

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveWork:
    """Another run's work folder, the target its oldest live run reads, when that run started, and the highest
    priority of its live runs."""

    layout: WorkLayout
    target_uri: str
    started_at: datetime
    priority: int = 0
    lease: RunLease | None = None  # the oldest live run's lease: its inputs and options


def live_works(work_root: str, *, besides: str, seen: dict[str, RunLease] | None = None) -> list[LiveWork]:
    """Works under ``work_root`` whose runs want work (a live, active lease naming its target), highest priority
    first, then oldest run first; not ``besides``. One listing of the work folders, then one of each work's leases; a
    lease is read only when its version is new to ``seen`` (a cache by URI and version, kept by the caller)."""
    seen = {} if seen is None else seen
    found = []
    for folder in storage.list_folders(storage.join(work_root, WORK_FOLDER)):
        layout = WorkLayout(folder)
        if layout.work_id == besides:
            continue
        wanting = []
        for item in storage.list_files(layout.runs_dir):
            key = f"{item.uri}@{item.version}"
            if key not in seen:
                seen[key] = leases.read_lease(item.uri) or leases.unreadable_lease(item.uri)
            held = leases.HeldLease(item.uri, seen[key], item.modified, work_root)
            if held.wants_work:
                wanting.append(held.lease)
        if wanting:
            first = min(wanting, key=lambda lease: lease.created_at)
            priority = max(lease.priority for lease in wanting)
            found.append(LiveWork(layout, first.target_uri, first.created_at, priority, first))
    return sorted(found, key=lambda work: (-work.priority, work.started_at))


def same_models(one: Options, other: Options) -> bool:
    """Whether a worker loaded for ``one`` has every model ``other`` needs: helping then loads nothing."""

    from facefusion_provider.engine.processors.registry import chain_of

    def models(options: Options) -> tuple[object, ...]:
        return (
            tuple(options.processors),
            options.face_detector_model,
            options.face_landmarker_model,
            tuple(processor.model(options) for processor in chain_of(options)),
            tuple(options.execution_providers),
            options.execution_thread_count,
        )

    return models(one) == models(other)


@dataclass
class Helped:
    works: set[str] = field(default_factory=set)  # the works of other runs this worker committed segments of
    segments: int = 0

    @property
    def runs(self) -> int:
        return len(self.works)


@dataclass(frozen=True)
class FreeRun:
    """The longest run of free segments of a work when a helper looked: it only shrinks until a claim lapses."""

    length: int
    untouched: bool  # nobody had claimed a segment
    at: float  # liveness.clock.monotonic() of the look


@dataclass
class HelpMemory:
    """What a helping worker remembers between passes, to spare requests: work specs (``work.json`` never changes),
    works it gave up on, what it saw of each work's free segments (a complete work has none, and is looked at again a
    lease later like any other: a merge may have retired a damaged commit). Works no longer live are forgotten."""

    specs: dict[str, WorkSpec] = field(default_factory=dict)
    given_up: dict[str, WorkLayout] = field(default_factory=dict)  # by work id: refused while it stays live
    leases: dict[str, RunLease] = field(default_factory=dict)  # by URI and version: a lease is read once
    free_runs: dict[str, FreeRun] = field(default_factory=dict)
    background: list[threading.Thread] = field(default_factory=list)  # sound being stored for works it prepared
    refuses_as: str = ""  # a standing worker's name: it says in each work it gives up on why (``give_up``)
    prepared_elsewhere: bool = False  # it saw a run's work being prepared by another worker: the signal will change

    def give_up(self, layout: WorkLayout, error: FaceFusionError) -> None:
        """Work no more on ``layout`` while it stays live; a standing worker says why in the work, where the spans
        that wait for it see it (docs/protocol.md, "No unbounded wait")."""
        logger.warning("work %s: not helped (%s)", layout.work_id, error)
        self.given_up[layout.work_id] = layout
        if self.refuses_as:
            leases.record_refusal(layout, self.refuses_as, error)

    def finish(self) -> None:
        """Waits for what it does in the background (storing a work's sound); a standing worker stopping withdraws
        its refusals."""
        for thread in self.background:
            thread.join()
        self.background = []
        self.keep_only(set())

    def keep_only(self, live: set[str]) -> None:
        self.specs = {work: spec for work, spec in self.specs.items() if work in live}
        self.free_runs = {work: seen for work, seen in self.free_runs.items() if work in live}
        for work, layout in list(self.given_up.items()):
            if work not in live:  # forgotten: a later run over it is tried again
                del self.given_up[work]
                if self.refuses_as:
                    leases.withdraw_refusal(layout, self.refuses_as)
        self.leases = {
            key: lease for key, lease in self.leases.items() if WorkLayout(key.rsplit("/runs/")[0]).work_id in live
        }


PIECE_SEGMENTS = 32  # a helper joins a started run only for a free run this long: the seek is < 1 % of its half
FRESH_SECONDS = 0.5  # a look this recent is fresh enough to join on (a new run is looked at, then joined at once)
LOOKS_AT_ONCE = 8  # runs a helper looks at side by side: each look is two listings that wait on the store


@dataclass(frozen=True)
class Scope:
    """Which runs a worker may take segments of, and until when: the one parameter of the worker loop.

    :param work_root: the runs under this root.
    :param owner: the claims' owner (the Airflow task, or the standing worker).
    :param until: ``liveness.clock.monotonic()`` after which it takes no more segments (a standing worker: never).
    :param besides: its own run's work, worked already (a span task's worker).
    :param models: only runs that need no other models than these (a span task's worker has loaded them).
    :param standing: it also prepares waiting works and merges the outputs of the works it completes.
    :param stop: set, it takes no more segments (SIGTERM: the segment in flight is committed first).
    """

    work_root: str
    owner: str
    until: float = math.inf
    besides: str = ""
    models: Options | None = None
    standing: bool = False
    stop: threading.Event | None = None

    def open(self) -> bool:
        return liveness.clock.monotonic() < self.until and not (self.stop is not None and self.stop.is_set())


def work_live_runs(scope: Scope, models_dir: str | None, memory: HelpMemory | None = None) -> Helped:
    """Work the free segments of the live runs in ``scope`` until none is left or the scope closes.

    Highest priority, then oldest run first, but a worker joins a run that others have started only where a free run
    of at least ``PIECE_SEGMENTS`` is left (each join costs a seek and a switch), unless the run's priority is above
    the lowest live one's; failing that, at the end of a pass, the run with the longest free run. Free runs only shrink
    while claims are held, so a run is looked at once (new runs side by side), then again only just before joining
    it, or a lease after it had nothing free (a holder may have died). A run this worker cannot help (its target
    unreadable here, a broken work) is left to its own tasks: helping never fails the worker.

    A ``standing`` worker also prepares a live run's work that has no work.json yet (``prepare_waiting_work``), and
    merges the outputs of the live runs of a work it leaves complete (``merge_waiting_outputs``): a run's GPU work
    then starts and ends without waiting for Airflow to start its prepare and merge tasks."""
    helped, memory = Helped(), memory or HelpMemory()
    owner, models = scope.owner, scope.models

    def join(other: LiveWork) -> int:
        return _help(other, models_dir, memory, helped, scope)

    while scope.open():
        committed, shorter = 0, list[tuple[int, LiveWork]]()
        live = live_works(scope.work_root, besides=scope.besides, seen=memory.leases)
        memory.keep_only({other.layout.work_id for other in live})
        for other in live if scope.standing else []:
            if other.layout.work_id not in memory.specs and other.layout.work_id not in memory.given_up:
                prepare_waiting_work(other, models_dir, memory, owner=owner)
        unseen = [other for other in live if other.layout.work_id not in memory.free_runs]
        with ThreadPoolExecutor(LOOKS_AT_ONCE, thread_name_prefix="facefusion-look") as looks:
            list(looks.map(lambda other: _look(other, models, memory, owner), unseen))  # listings wait on the store
        for other in live:
            if not scope.open():
                break
            seen = _look(other, models, memory, owner)
            first = other.priority > live[-1].priority  # a run before others: any free segment is worth a seek
            if (
                seen is not None
                and (first or _worth_joining(seen))
                and liveness.clock.monotonic() - seen.at > FRESH_SECONDS
            ):
                seen = _look(other, models, memory, owner, fresh=True)  # it may have shrunk since
            if seen is not None and seen.length and (first or _worth_joining(seen)):
                committed += join(other)
            elif seen is not None and seen.length:
                shorter.append((seen.length, other))
        lapsed = [(0, other) for other in live if _may_have_lapsed(memory.free_runs.get(other.layout.work_id))]
        for _, other in sorted(shorter, key=lambda item: -item[0]) + lapsed if not committed else []:
            seen = _look(other, models, memory, owner, fresh=True)
            if seen is not None and seen.length and scope.open():
                committed += join(other)
                break
        if not committed:
            break  # nothing free anywhere (or nothing this worker may take)
    return helped


def _worth_joining(seen: FreeRun) -> bool:
    return seen.untouched or seen.length >= PIECE_SEGMENTS


def _may_have_lapsed(seen: FreeRun | None) -> bool:
    """A run seen with nothing free a lease ago may have a segment free again: its holder may have died."""
    return seen is not None and not seen.length and liveness.clock.monotonic() - seen.at >= lease_seconds()


def _look(
    other: LiveWork, models: Options | None, memory: HelpMemory, owner: str, *, fresh: bool = False
) -> FreeRun | None:
    """What this worker knows of ``other``'s free segments: what it saw last unless ``fresh``, else both listings.
    None when it cannot help there (given up, not prepared yet, other models)."""
    work = other.layout.work_id
    if work in memory.given_up:
        return None
    remembered = memory.free_runs.get(work)
    if remembered is not None and not fresh:
        return remembered  # a free run only shrinks while its claims are held: what was too short stays so
    spec = memory.specs.get(work)
    if spec is None:
        try:
            spec = memory.specs[work] = load_work(other.layout)
        except InvalidWorkError:
            return None  # not prepared yet
        except FaceFusionError as error:
            memory.give_up(other.layout, error)
            return None
    if models is not None and not same_models(models, spec.options):
        return None
    state = scan_work(other.layout)
    claims = SegmentClaims(other.layout, owner=owner)
    free = longest_free_run(range(len(spec.segments)), lambda index: claims.is_free(index, state))
    seen = FreeRun(len(free), not state.committed and not state.claims, liveness.clock.monotonic())
    memory.free_runs[work] = seen
    return seen


def _help(other: LiveWork, models_dir: str | None, memory: HelpMemory, helped: Helped, scope: Scope) -> int:
    """Work ``other``'s free segments, and with ``merge`` the outputs it leaves complete; returns how many segments
    this worker committed."""
    work = other.layout.work_id
    try:
        if storage.exists(other.layout.deleting):
            return 0  # its last run's cleanup is removing it
        target_uri = checked_uris([], other.target_uri, None).target_uri
        spec = memory.specs[work]
        processors = FrameProcessors(spec, models_dir, scope.work_root)  # sessions are cached: models load once
        result = work_segments(
            spec,
            other.layout,
            target_uri,
            range(0),
            processors,
            owner=scope.owner,
            deadline=scope.until,
            stop=scope.stop,
        )
    except FaceFusionError as error:
        memory.give_up(other.layout, error)
        return 0
    memory.free_runs[work] = FreeRun(0, False, liveness.clock.monotonic())  # it took every free segment it found
    if result.committed:
        helped.works.add(work)
        helped.segments += result.committed
    if scope.standing:
        merge_if_complete(other.layout, spec, result.committed, owner=scope.owner, models_dir=models_dir)
    return result.committed


def prepare_waiting_work(other: LiveWork, models_dir: str | None, memory: HelpMemory, *, owner: str) -> None:
    """Writes the work.json of a live run's work from the inputs and options in its lease, once among workers (an
    exclusive claim), unless it exists; the run's prepare task then reuses it. A failure is only logged: the prepare
    task prepares as before and reports it."""

    lease, layout = other.lease, other.layout
    if lease is None or lease.options is None or storage.exists(layout.work_json):
        return
    claims = SegmentClaims(layout, owner=owner)
    if not claims.take_name(PREPARE_CLAIM, WorkState(frozenset(), latest_claims(layout))):
        memory.prepared_elsewhere = True  # another worker prepares it, and announces it when it is written
        return
    try:
        uris = checked_uris(lease.source_uris, lease.target_uri, None)
        options = Options.model_validate(lease.options)
        spec = memory.specs[layout.work_id] = prepare_work(layout, uris, options, models_dir)
    except (FaceFusionError, ValueError) as error:
        logger.warning("work %s: not prepared here (%s); its run's prepare task will", layout.work_id, error)
        return
    logger.info("work %s: prepared for %s before its prepare task", layout.work_id, lease.holder.describe())
    # The workers that saw the run unprepared went back to the signal: they join now, not when the next run comes.
    leases.announce(root_of(layout))
    if (spec.frame_start, spec.frame_end) == (0, spec.probe.frame_count) and spec.probe.streams:
        sound = threading.Thread(target=_store_sound, args=(layout, uris.target_uri), name="facefusion-sound")
        sound.start()  # beside the frames, off the run's critical path: the merge then reads one file
        memory.background.append(sound)


def _store_sound(layout: WorkLayout, target_uri: str) -> None:

    began = time.monotonic()
    try:
        size = store_sound(layout, target_uri)
    except (FaceFusionError, OSError) as error:  # a thread of its own: nothing above it would report it
        logger.warning(
            "work %s: its sound was not stored (%s); the merge reads it from the target", layout.work_id, error
        )
        return
    if size:
        logger.info("work %s: stored its sound (%d bytes) in %.1f s", layout.work_id, size, time.monotonic() - began)


def merge_if_complete(
    layout: WorkLayout, spec: WorkSpec, committed: int, *, owner: str, models_dir: str | None = None
) -> None:
    """Merge the work's live runs' outputs (``merge_waiting_outputs``) when this worker's ``committed`` segments left
    it complete."""
    if committed and len(scan_work(layout).committed) == len(spec.segments):
        merge_waiting_outputs(layout, owner=owner, models_dir=models_dir)


def merge_waiting_outputs(layout: WorkLayout, *, owner: str, models_dir: str | None = None) -> int:
    """Merges the output of every live run on the complete work ``layout`` whose output is not written yet, each
    once among workers (an exclusive merge claim); returns how many it merged.

    The worker that commits a work's last segment merges at once: the run's output appears without waiting for its
    merge task to be scheduled and started, and that task then finds it done. Should this fail, or the worker die
    here, the merge task merges as before and reports the error; so a failure is only logged here.
    """
    from facefusion_provider.worker.healing import merge

    merged, claims = 0, SegmentClaims(layout, owner=owner)
    for held in leases.run_leases(layout):
        lease = held.lease
        if not held.wants_work or output_done(layout.work_id, lease.output_uri) is not None:
            continue  # a kept (failed) run's output is its retry's to write
        state = WorkState(frozenset(), latest_claims(layout))
        if not claims.take_name(merge_claim_name(held.key), state):
            continue  # another worker merges it
        key = held.key
        try:
            result = merge(layout.work_uri, lease.target_uri, lease.output_uri, models_dir=models_dir, owner=owner)
        except FaceFusionError as error:
            logger.warning("run %s: output %s not merged here (%s); its merge task will", key, lease.output_uri, error)
            continue
        merged += 1
        logger.info(
            "run %s: merged %s (%s) as its work's last segment was committed", key, result.output_uri, result.method
        )
    return merged


def swap_span(
    work_uri: str,
    target: str,
    first: int,
    last: int,
    *,
    span: int = 0,
    models_dir: str | None = None,
    owner: str = "",
    run_key: str = "",
    guard: Callable[[], None] | None = None,
) -> SpanResult:
    """Work segments ``[first, last)`` of the work folder (and, when done, other spans' tails) reading ``target``.
    A work removed while its run (``run_key``) was queued past its lease is prepared again from the run's lease. The
    worker that leaves the work complete merges its live runs' outputs (``merge_waiting_outputs``), so an output
    appears without waiting for the merge task to be scheduled and its worker started; that task then finds it done."""
    layout = work_layout(work_uri)
    target_uri = checked_uris([], target, None).target_uri
    spec = load_or_prepare(layout, run_key, models_dir)
    if not 0 <= first < last <= len(spec.segments):
        raise InvalidOptionError(
            f"segments: {first}:{last} is not a range of the work's {len(spec.segments)} segments (0:{len(spec.segments)})"
        )
    processors = FrameProcessors(spec, models_dir, work_root_of(layout))
    own = range(first, last)
    result = work_segments(spec, layout, target_uri, own, processors, span=span, owner=owner, guard=guard)
    merge_if_complete(layout, spec, result.committed, owner=owner, models_dir=models_dir)
    budget = worker_settings().help_other_runs_seconds
    if budget <= 0:
        return result
    began = time.perf_counter()
    scope = Scope(
        work_root_of(layout),
        owner,
        until=liveness.clock.monotonic() + budget,
        besides=spec.work_id,
        models=spec.options,
    )
    helped = work_live_runs(scope, models_dir)
    logger.info("helped %d other runs with %d segments", helped.runs, helped.segments)
    timings = {**result.timings, "help_s": round(time.perf_counter() - began, 3)}
    return replace(result, helped_runs=helped.runs, helped_segments=helped.segments, timings=timings)
