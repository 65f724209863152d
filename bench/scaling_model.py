"""The scaling model: swap runs on a GPU pool, played by an event simulation that follows the worker's own rules,
from the worker's costs ``scaling_measure`` measured on this machine and the cluster's costs stated here (``Stated``:
flags of the benchmarks). ``bench/bench_calibration.py`` checks the simulation against real standing workers;
``bench/bench_scaling.py`` and ``bench/bench_factory.py`` run it.

The simulation (worker/span.py, segments.py, scheduler.py, work/claims.py, operators/commands.py):

- spans are pool tasks; a task whose segments are all committed when it starts launches no pod (``completed_work``);
  otherwise its pod pays its fixed cost once, then works segments one after another;
- a pod takes the next segment while it is free, else its span's first free one, else (helping) the back half of
  the longest run of free segments of its work, working forward; a segment that does not follow the previous one
  costs a seek;
- each segment is committed in the background a little after its last frame; a claim held by a dead pod lapses
  after the lease, and a new try of the same task takes it over at once;
- a pod with nothing to claim waits (polling) until its own span is committed, then its task ends; the merge starts
  when every span task of the run has ended.

Options: ``across_runs`` lets a pod with nothing left in its own work take segments of other live runs
(``[facefusion] help_other_runs_seconds``, unbounded here); ``standing`` replaces the span pods by standing workers
(``facefusion-worker serve``, ``span_workers = standing``): ``gpus x pods_per_gpu`` of them, started once, take the
free segments of the oldest live run (the back half of its longest free run, working forward) and stay in that work
until it has no free segment, then wait for its commits (the first to find the work complete merges its output), pay
``switch_s`` (``first_join_s`` more on its first run: its models load then) on moving to another run's work, its claim
written only after that (a worker looking meanwhile sees the run untouched), and when idle look again after
``FIRST_LOOK_S``, backing off to ``LONGEST_LOOK_S`` (the change signal); a run's span tasks wait deferred (no pool
slot). Several pods may share one GPU (``pods_per_gpu``; pods working at once share its speed equally). Times are
seconds; a segment's work is given at a whole GPU's speed.

The costs: a pod's frame rate is the slower of its process stage (GPU inference, then the swap's CPU work, a few
frames side by side) and its CPU cores (decode, encode, the swap's CPU work); with the target's analysis stored,
detection and landmarks leave both. Beyond its frames, a segment costs its encoder's extra work and its commit's CPU
(on the pod's cores), the take's wait where the pipeline's queue does not hide it, a seek where it does not follow the
previous one, and its commit's latency (upload and marker, in the background). The store is S3 in production:
requests as counted through the proxy, each at a stated latency, and bytes at a stated throughput.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from scaling_measure import S3_STORE, Measured

from facefusion_provider.output.merge import MARKER_READS_AT_ONCE
from facefusion_provider.storage import UPLOAD_MIN_PART_BYTES
from facefusion_provider.storage.compose import COMPOSE_REQUESTS_AT_ONCE
from facefusion_provider.work.span_plan import plan_segments, plan_spans

POLL_S = 2.0  # worker/span.py WAIT_SECONDS: how often a pod with nothing to claim looks again at every claim
MARKER_LOOK_S = 0.1  # worker/span.py MARKER_LOOK_SECONDS: between those, how often it asks for its awaited markers
FIRST_LOOK_S = 0.25  # worker/serve.py FIRST_LOOK_SECONDS: an idle standing worker's first look at the change signal
LONGEST_LOOK_S = 1.5  # worker/serve.py LONGEST_LOOK_SECONDS: ... doubling up to this (bench/bench_calibration.py)
STANDING_POLL_S = LONGEST_LOOK_S  # how often a standing worker idle for a while looks for new runs
PREPARE_MID_SEEKS = 2  # prepare seek-decodes the middle and last segment starts (the first is the video's start)
PIECE_SEGMENTS = 32  # worker/scheduler.py: a helper joins a started run only for a free run this long
LOOKS_AT_ONCE = 8  # worker/scheduler.py: runs a helper looks at side by side
Key = tuple[int, int]  # (run, segment)


@dataclass(frozen=True)
class Overheads:
    """What a pod pays per segment beyond its frames, at a whole GPU's speed."""

    per_segment_s: float  # every segment: the encoder's extra work, the commit's CPU, the take's unhidden wait
    seek_s: float  # a segment that does not follow the previous one: the decoder seeks (pre-roll) first
    commit_latency_s: float  # from a segment's last frame to its marker: checksum, upload, marker, in the background


@dataclass(frozen=True)
class RunPlan:
    """One run: its segments' work, its spans, when its spans are queued and how long its merge takes."""

    ready_s: float  # validate, prepare, plan done: the spans join the pool's queue
    work_s: tuple[float, ...]  # each segment's frame work with the target analysed here
    spans: tuple[tuple[int, int], ...]  # [first, last) segments of each span
    overheads: Overheads
    after_s: float  # from the last span task's end to the output: the merge hop
    warm_work_s: tuple[float, ...] | None = None  # the same with the target's stored analysis (None: no reuse)
    target: str = ""  # runs over one target share its analysis


@dataclass(frozen=True)
class Pool:
    gpus: int
    task_s: float  # Airflow's part of a task (scheduling, start, the trigger's poll): holds the pool slot
    pod_fixed_s: float  # pod start, worker start, model load, first listing: holds the GPU, no frames yet
    pods_per_gpu: int = 1
    helping: bool = True
    across_runs: bool = False
    standing: bool = False
    standing_start_s: float = 0.0  # when the standing workers are up (0: running with models loaded before the runs)
    standing_starts_s: tuple[float, ...] = ()  # each standing worker's start (the phase of its idle looks), if given
    first_join_s: float = 0.0  # a standing worker's first run: its models load (and its code is imported) only then
    switch_s: float = 0.0  # a standing or helping worker moving to another run's work: work.json, listings, processor
    look_s: float = 0.0  # a standing or helping worker looking at one run's claims to choose where to go
    lease_s: float = 60.0
    retry_delay_s: float = 30.0


@dataclass(frozen=True)
class Kill:
    run: int
    span: int
    at_s: float


@dataclass
class _Worker:
    number: int
    run: int  # the task's run and span
    span: int
    gpu: int
    slot: int
    own: range
    state: str = "starting"  # starting, working, waiting, done, dead
    work_run: int = -1  # the run whose segments it works now (its own, or another with ``across_runs``)
    segment: int | None = None
    previous: int | None = None  # the last segment of this decode stream (None: the next one seeks)
    remaining: float = 0.0  # work left on the current segment, at a whole GPU's speed
    total: float = 0.0  # the current segment's whole work, overheads included
    segment_work: float = 0.0  # of that, its frames
    updated: float = 0.0
    version: int = 0
    warm: bool = False
    pending: dict[Key, float] = field(default_factory=dict)  # finished, not yet committed: frame work
    looking_s: float = 0.0  # the last _join's listings, paid before the segment it chose
    looked: set[int] = field(default_factory=set)  # runs whose claims this worker has listed
    idle_look_s: float = FIRST_LOOK_S  # a standing worker's next wait for the change signal while idle
    full_look_at: float = 0.0  # a waiting pod's next look at every claim (before it: its awaited markers only)
    joined: bool = False  # a standing worker has worked a segment (its models are loaded)
    died_at: float | None = None


@dataclass
class Result:
    makespan_s: float
    outputs_s: list[float]
    first_pod_s: float  # the first pod's start on a GPU
    last_span_end_s: float
    useful_s: float  # GPU seconds of frame work of the committed segments (each once)
    lost_s: float  # GPU seconds of work killed pods had done on segments they never committed
    pods: int
    helped: int
    seeks: int
    analysed_segments: int  # segments of a shared target whose faces were stored (each once)
    cold_segments: int  # segments worked without a stored analysis (runs analysing one target at once repeat work)

    def busy_fraction(self, gpus: int, window: tuple[float, float] | None = None) -> float:
        start, end = window or (0.0, self.makespan_s)
        return self.useful_s / (gpus * (end - start))


class Simulation:
    """One simulation: ``runs`` on ``pool``, with ``kills``."""

    def __init__(self, runs: Sequence[RunPlan], pool: Pool, kills: Sequence[Kill] = ()) -> None:
        self.runs, self.pool, self.kills = list(runs), pool, list(kills)
        self.events: list[tuple[float, int, str, tuple[int, ...]]] = []
        self.order = itertools.count()
        self.committed = [[False] * len(run.work_s) for run in runs]
        self.holder: list[list[_Worker | None]] = [[None] * len(run.work_s) for run in runs]
        self.claimed_at = [[0.0] * len(run.work_s) for run in runs]  # when the holder's claim is written
        self.analysed: dict[str, set[int]] = {}
        self.queue: list[tuple[float, int, int]] = []  # (ready, run, span) waiting for a slot
        self.free_slots = list(range(pool.gpus * pool.pods_per_gpu))
        self.workers: list[_Worker] = []
        self.working: list[set[int]] = [set() for _ in range(pool.gpus)]
        self.open_tasks = [len(run.spans) for run in runs]
        self.task_of: dict[Key, _Worker] = {}
        self.outputs = [0.0] * len(runs)
        self.last_span_end = 0.0
        self.first_pod: float | None = None
        self.useful = self.lost = 0.0
        self.pods = self.helped = self.seeks = self.analysed_count = self.cold_count = 0

    def run(self) -> Result:
        if self.pool.standing:
            assert not self.kills, "kills are modelled for span pods only"
            for slot in range(self.pool.gpus * self.pool.pods_per_gpu):
                gpu = slot // self.pool.pods_per_gpu
                worker = _Worker(len(self.workers), -1, -1, gpu, slot, range(0), state="waiting")
                self.workers.append(worker)
                self.pods += 1
                starts = self.pool.standing_starts_s
                self._push(
                    starts[slot] if slot < len(starts) else self.pool.standing_start_s, "check", (worker.number,)
                )
        for number, plan in enumerate(self.runs):
            for span in range(len(plan.spans) if not self.pool.standing else 0):
                self._push(plan.ready_s, "ready", (number, span))
        for kill in self.kills:
            self._push(kill.at_s, "kill", (kill.run, kill.span))
        handlers: dict[str, Callable[[float, tuple[int, ...]], None]] = {
            "ready": self._ready,
            "launch": self._launch,
            "start": self._start,
            "done": self._segment_done,
            "commit": self._commit,
            "check": self._check,
            "drained": self._drained,
            "kill": self._kill,
        }
        while self.events:
            now, _, kind, payload = heapq.heappop(self.events)
            handlers[kind](now, payload)
        return Result(
            makespan_s=max(self.outputs),
            outputs_s=list(self.outputs),
            first_pod_s=self.first_pod or 0.0,
            last_span_end_s=self.last_span_end,
            useful_s=self.useful,
            lost_s=self.lost,
            pods=self.pods,
            helped=self.helped,
            seeks=self.seeks,
            analysed_segments=self.analysed_count,
            cold_segments=self.cold_count,
        )

    def _push(self, at: float, kind: str, payload: tuple[int, ...]) -> None:
        heapq.heappush(self.events, (at, next(self.order), kind, payload))

    # --- tasks and pods --------------------------------------------------------------------------------------

    def _ready(self, now: float, payload: tuple[int, ...]) -> None:
        self.queue.append((now, payload[0], payload[1]))
        self.queue.sort()
        self._dispatch(now)

    def _dispatch(self, now: float) -> None:
        """Free pool slots take the oldest queued tasks; a slot belongs to one GPU."""
        while self.free_slots and self.queue:
            _, run, span = self.queue.pop(0)
            slot = self.free_slots.pop(0)
            first, last = self.runs[run].spans[span]
            gpu = slot // self.pool.pods_per_gpu
            worker = _Worker(len(self.workers), run, span, gpu, slot, range(first, last), work_run=run)
            self.workers.append(worker)
            self.task_of[run, span] = worker
            self._push(now + self.pool.task_s, "launch", (worker.number,))

    def _launch(self, now: float, payload: tuple[int, ...]) -> None:
        """The operator looks at the markers first: a committed span needs no pod."""
        worker = self.workers[payload[0]]
        if worker.state == "dead":
            return
        if self._own_committed(worker):
            self._finish(worker, now)
            return
        self.pods += 1
        self._push(now + self.pool.pod_fixed_s, "start", (worker.number,))

    def _start(self, now: float, payload: tuple[int, ...]) -> None:
        worker = self.workers[payload[0]]
        if worker.state == "dead":
            return
        self.first_pod = now - self.pool.pod_fixed_s if self.first_pod is None else self.first_pod
        if self._own_committed(worker):
            self._finish(worker, now)  # committed by others while the pod started: the worker exits at once
            return
        self._next(worker, now)

    def _own_committed(self, worker: _Worker) -> bool:
        return all(self.committed[worker.run][index] for index in worker.own)

    def _finish(self, worker: _Worker, now: float) -> None:
        worker.state = "done"
        self._release(worker.slot, now)
        self.last_span_end = max(self.last_span_end, now)
        self.open_tasks[worker.run] -= 1
        if self.open_tasks[worker.run] == 0:
            self.outputs[worker.run] = now + self.runs[worker.run].after_s

    def _release(self, slot: int, now: float) -> None:
        self.free_slots.append(slot)
        self.free_slots.sort()
        self._dispatch(now)

    # --- choosing segments -----------------------------------------------------------------------------------

    def _free(self, worker: _Worker, run: int, index: int, now: float) -> bool:
        """SegmentClaims.is_free: not committed, and unclaimed, or its holder's lease lapsed, or held by this task's
        previous try."""
        if self.committed[run][index]:
            return False
        holder = self.holder[run][index]
        if holder is None:
            return True
        if holder.died_at is None:
            return False
        lapsed = now - holder.died_at > self.pool.lease_s
        same_task = worker.run >= 0 and (holder.run, holder.span) == (worker.run, worker.span)
        return lapsed or (same_task and holder is not worker)

    def _longest_free(self, worker: _Worker, run: int, now: float) -> tuple[int, int]:
        """(start, length) of the longest run of free segments of ``run``: the tail of its busiest span."""
        best_start, best_length, start, length = 0, 0, 0, 0
        for index in range(len(self.runs[run].work_s)):
            if self._free(worker, run, index, now):
                start, length = (start, length + 1) if length else (index, 1)
                if length > best_length:
                    best_start, best_length = start, length
            else:
                length = 0
        return best_start, best_length

    def _other_runs(self, now: float) -> list[int]:
        """Runs whose segments other pods may take (``across_runs``, ``standing``): planned, not yet merged."""
        if self.pool.standing:
            return [run for run, plan in enumerate(self.runs) if plan.ready_s <= now and not all(self.committed[run])]
        if not self.pool.across_runs:
            return []
        return [run for run, plan in enumerate(self.runs) if plan.ready_s <= now and self.open_tasks[run] > 0]

    def _pick(self, worker: _Worker, now: float) -> Key | None:
        """SegmentPicker._candidates: the next one while it is free, else its own span's first free one, else
        (helping) the back half of the longest run of free segments."""
        previous, run = worker.previous, worker.work_run
        if worker.run < 0:
            return self._pick_standing(worker, now)
        if previous is not None and previous + 1 < len(self.runs[run].work_s):
            following = previous + 1
            own = run == worker.run and following in worker.own
            helping = run != worker.run or previous not in worker.own
            if (own or helping) and self._free(worker, run, following, now):
                return run, following
        for index in worker.own:
            if self._free(worker, worker.run, index, now):
                return worker.run, index
        if not self.pool.helping:
            return None
        start, length = self._longest_free(worker, worker.run, now)
        if length:
            return worker.run, start + length // 2  # its own run's tail first
        return self._join(worker, now, self._other_runs(now)) if self.pool.across_runs else None

    def _pick_standing(self, worker: _Worker, now: float) -> Key | None:
        """A standing worker: the next segment while it is free, else the back half of its work's longest free run
        (``work_segments`` keeps to one work until it has no free segment), else ``_join``."""
        previous, run = worker.previous, worker.work_run
        if (
            previous is not None
            and previous + 1 < len(self.runs[run].work_s)
            and self._free(worker, run, previous + 1, now)
        ):
            return run, previous + 1
        if run >= 0:
            start, length = self._longest_free(worker, run, now)
            if length:
                return run, start + length // 2
        return self._join(worker, now, self._other_runs(now))

    def _join(self, worker: _Worker, now: float, runs: Sequence[int]) -> Key | None:
        """help_other_runs: oldest run first, a started one only for a free run of ``PIECE_SEGMENTS``, an untouched
        one whole; else the longest free run. A look is two listings (``Pool.look_s`` each): one for each run this
        worker has not looked at yet, ``LOOKS_AT_ONCE`` side by side (a free run only shrinks meanwhile), and one
        before joining."""
        best: tuple[int, int, int] = (0, 0, 0)  # length, run, start
        unseen = [run for run in runs if run not in worker.looked]
        worker.looked.update(unseen)
        looks = -(-len(unseen) // LOOKS_AT_ONCE)
        for run in sorted(runs, key=lambda number: (self.runs[number].ready_s, number)):
            if run == worker.run:
                continue
            start, length = self._longest_free(worker, run, now)
            # A claim is written after the join's setup: a worker looking before then sees the run untouched.
            claims = zip(self.holder[run], self.claimed_at[run], strict=True)
            untouched = not any(self.committed[run]) and all(holder is None or at > now for holder, at in claims)
            if length >= PIECE_SEGMENTS or (untouched and length):
                best = (length, run, start)
                break
            if length > best[0]:
                best = (length, run, start)
        length, other, start = best
        worker.looking_s = 2 * (looks + bool(length)) * self.pool.look_s
        return (other, start + length // 2) if length else None

    def _anything_free(self, worker: _Worker, now: float) -> bool:
        if worker.run < 0:
            return self._pick_standing(worker, now) is not None
        runs = [worker.run, *self._other_runs(now)] if self.pool.helping else [worker.run]
        indexes = {run: range(len(self.runs[run].work_s)) for run in runs}
        if not self.pool.helping:
            indexes = {worker.run: worker.own}
        return any(self._free(worker, run, index, now) for run, found in indexes.items() for index in found)

    # --- working segments ------------------------------------------------------------------------------------

    def _next(self, worker: _Worker, now: float) -> None:
        picked = self._pick(worker, now)
        if picked is None:
            self._stream_ends(worker, now)
            return
        run, index = picked
        plan = self.runs[run]
        self.holder[run][index] = worker
        analysed = self.analysed.setdefault(plan.target or str(run), set())
        worker.warm = plan.warm_work_s is not None and index in analysed
        self.cold_count += plan.warm_work_s is not None and not worker.warm
        work = plan.warm_work_s[index] if worker.warm and plan.warm_work_s is not None else plan.work_s[index]
        seek = worker.previous is None or run != worker.work_run or index != worker.previous + 1
        switch = self.pool.switch_s if run != worker.work_run and (worker.run < 0 or run != worker.run) else 0.0
        if worker.run < 0 and not worker.joined:
            switch, worker.joined = switch + self.pool.first_join_s, True
        worker.idle_look_s = FIRST_LOOK_S
        switch, worker.looking_s = switch + worker.looking_s, 0.0
        self.claimed_at[run][index] = now + switch
        self.seeks += seek
        self.helped += run != worker.run or index not in worker.own
        if self.first_pod is None:
            self.first_pod = now  # standing workers: the first segment's start
        worker.work_run, worker.segment, worker.segment_work, worker.updated = run, index, work, now
        worker.total = work + plan.overheads.per_segment_s + (plan.overheads.seek_s if seek else 0.0) + switch
        worker.remaining = worker.total
        self._set_working(worker, now, working=True)

    def _stream_ends(self, worker: _Worker, now: float) -> None:
        """Nothing to claim: the pipeline drains, the commits land, then the pod looks whether its span is done."""
        self._set_working(worker, now, working=False)
        worker.previous, worker.state = None, "waiting"
        latency = (
            self.runs[worker.work_run].overheads.commit_latency_s if worker.pending and worker.work_run >= 0 else 0.0
        )
        self._push(now + latency, "check", (worker.number,))

    def _check(self, now: float, payload: tuple[int, ...]) -> None:
        worker = self.workers[payload[0]]
        if worker.state != "waiting":
            return
        if worker.run < 0:  # a standing worker: work, or poll until every run is committed
            if self._anything_free(worker, now):
                self._next(worker, now)
            elif not all(all(committed) for committed in self.committed):
                self._push(now + worker.idle_look_s, "check", (worker.number,))
                worker.idle_look_s = min(2 * worker.idle_look_s, LONGEST_LOOK_S)
            return
        own_done = self._own_committed(worker)
        full_look = own_done or now >= worker.full_look_at  # its awaited markers landed: it looks again at once
        if own_done and not (self.pool.across_runs and self._anything_free(worker, now)):
            self._finish(worker, now)
        elif full_look and self._anything_free(worker, now):
            worker.full_look_at = 0.0
            self._next(worker, now)
        else:
            worker.full_look_at = now + POLL_S if full_look else worker.full_look_at
            self._push(now + MARKER_LOOK_S, "check", (worker.number,))

    def _segment_done(self, now: float, payload: tuple[int, ...]) -> None:
        worker = self.workers[payload[0]]
        if worker.state != "working" or payload[1] != worker.version:
            return
        run, index = worker.work_run, worker.segment
        assert index is not None
        plan = self.runs[run]
        if not worker.warm and plan.warm_work_s is not None:
            analysed = self.analysed.setdefault(plan.target or str(run), set())
            self.analysed_count += index not in analysed
            analysed.add(index)  # the worker stores a segment's faces once its last frame is analysed
        worker.pending[run, index] = worker.segment_work
        self._push(now + plan.overheads.commit_latency_s, "commit", (worker.number, run, index))
        worker.previous, worker.segment = index, None
        self._advance(worker.gpu, now)
        if worker.run < 0 and not any(self._free(worker, run, at, now) for at in range(len(plan.work_s))):
            # A standing worker leaving a work waits for its commits, then merges if the work is complete.
            self._set_working(worker, now, working=False)
            worker.state = "waiting"
            self._push(now + plan.overheads.commit_latency_s, "drained", (worker.number, run))
            return
        self._next(worker, now)

    def _drained(self, now: float, payload: tuple[int, ...]) -> None:
        """A standing worker's commits landed: the first to find its work complete merges its output, then looks."""
        worker, run = self.workers[payload[0]], payload[1]
        merges = all(self.committed[run]) and not self.outputs[run]
        if merges:
            self.last_span_end = max(self.last_span_end, now)
            self.outputs[run] = now + self.runs[run].after_s
        self._push(now + (self.runs[run].after_s if merges else 0.0), "check", (worker.number,))

    def _commit(self, now: float, payload: tuple[int, ...]) -> None:
        worker, run, index = self.workers[payload[0]], payload[1], payload[2]
        if worker.state == "dead":
            return  # killed with the upload in flight: the segment stays claimed by the dead pod
        work = worker.pending.pop((run, index))
        if not self.committed[run][index]:  # the marker is created exclusively: one commit counts
            self.committed[run][index] = True
            self.useful += work
        self.holder[run][index] = None

    def _kill(self, now: float, payload: tuple[int, ...]) -> None:
        """The pod dies: the segment in flight and those still uploading are lost; Airflow retries the task."""
        worker = self.task_of.get((payload[0], payload[1]))
        if worker is None or worker.state in ("done", "dead"):
            return
        if worker.state == "working":
            self._advance(worker.gpu, now)
            self.lost += worker.total - max(0.0, worker.remaining)
        self.lost += sum(worker.pending.values())
        self._set_working(worker, now, working=False)
        worker.state, worker.died_at = "dead", now
        self._push(now + self.pool.retry_delay_s, "ready", (worker.run, worker.span))
        self._release(worker.slot, now)

    # --- GPU sharing -----------------------------------------------------------------------------------------

    def _advance(self, gpu: int, now: float) -> None:
        """Bring every working pod on ``gpu`` to ``now`` at the speed they had."""
        speed = 1.0 / max(1, len(self.working[gpu]))
        for number in self.working[gpu]:
            other = self.workers[number]
            other.remaining -= (now - other.updated) * speed
            other.updated = now

    def _set_working(self, worker: _Worker, now: float, *, working: bool) -> None:
        gpu = worker.gpu
        self._advance(gpu, now)
        if working:
            worker.state = "working"
            self.working[gpu].add(worker.number)
        else:
            self.working[gpu].discard(worker.number)
        speed = 1.0 / max(1, len(self.working[gpu]))
        for number in self.working[gpu]:
            other = self.workers[number]
            other.version += 1
            self._push(now + max(0.0, other.remaining) / speed, "done", (number, other.version))


# --- the costs the simulation plays -----------------------------------------------------------------------------------


PIPELINE_QUEUE_FRAMES = 16  # worker/pipeline.py: QUEUE_BATCHES x the GPU batch (8) frames decoded ahead
LIST_PAGE_KEYS = 1000  # S3 ListObjectsV2 returns at most this many keys a request


@dataclass(frozen=True)
class Stated:
    """Costs that need a cluster or a GPU to measure: stated, and flags to change them."""

    video_seconds: float = 3600.0
    frame_rate: float = 30.0
    bitrate_mbps: float = 8.0  # 1080p H.264 input and output
    # Of the target, the merge reads the ranges that hold its audio: all of a file that interleaves audio between every
    # frame (FFmpeg's muxer), far less of one that groups it per second (cameras). Fetched ahead, beside the remux.
    merge_target_read_fraction: float = 1.0
    gpu_inference_fps: float = 120.0  # detect + landmarks + inswapper_128 per frame on one GPU, batched
    gpu_analysis_share: float = 0.25  # of that inference, detection and landmarks: skipped with a stored analysis
    faces_per_frame: float = 1.0  # faces swapped per frame on average (face_selector_mode one: at most 1)
    frame_threads: int = 4  # execution_thread_count: frames a GPU worker processes side by side
    worker_cpu_cores: int = 4  # [facefusion] worker_cpu: the cores for decode, encode and the swap's CPU work
    model_load_s: float = 6.0  # CUDA context and onnxruntime sessions of detector, landmarker and swapper
    airflow_task_s: float = 4.0  # scheduling a task instance, starting it, deferring, the trigger's 2 s poll
    pod_start_s: float = 3.0  # a pod on a warm node with the image cached: scheduling to running
    image_pull_s: float = 90.0  # the CUDA worker image (about 4 GB) on a fresh node
    node_scale_up_s: float = 180.0  # the autoscaler adding a GPU node
    s3_mb_per_s: float = 300.0  # one pod's S3 throughput each way
    s3_request_s: float = 0.02  # one small S3 request (PUT, HEAD, GET of a marker or a claim), in-region
    s3_list_page_s: float = 0.06  # one LIST page (up to 1000 keys)
    upload_part_mb: float = 16.0  # the merge's upload parts (worker.publish): two go up after the muxer closes
    identity_s: float = 1.0  # prepare's source identity (a few images through detector and recognizer)
    audio_kbps: float = (
        128.0  # the target's sound: the merge copies it (stored by a standing worker, or from the target)
    )
    s3_copy_part_s: float = 0.25  # S3 copying one segment (UploadPartCopy, a few MB) into the output, server-side
    lease_s: float = 60.0  # FACEFUSION_CLAIM_LEASE_SECONDS default
    retry_delay_s: float = 30.0  # [facefusion] retry_delay_seconds default

    @property
    def frames(self) -> int:
        return round(self.video_seconds * self.frame_rate)

    @property
    def mb_per_frame(self) -> float:
        return self.bitrate_mbps / 8 / self.frame_rate


@dataclass(frozen=True)
class PodRate:
    """One GPU pod's frame rate: the slower of its process stage and its CPU cores (decode, inference and encode
    overlap in the worker's bounded pipeline)."""

    inference_s: float  # one frame's inference on the GPU
    swap_cpu_s: float  # the swap's CPU work on one frame's faces (and reading the stored analysis, when warm)
    codec_s: float  # decode + encode of one swapped frame on one core
    cores: int
    frame_threads: int
    side_by_side_efficiency: float  # measured: what each of the threads adds, relative to one

    @classmethod
    def of(cls, measured: Measured, stated: Stated, *, warm: bool = False) -> PodRate:
        """``warm``: the target's analysis is stored, so detection and landmarks are skipped (GPU and CPU)."""
        worker = measured.worker
        swap_cpu = worker.swap_cpu_s_per_face * stated.faces_per_frame
        inference = 1.0 / stated.gpu_inference_fps
        if warm:
            swap_cpu -= worker.detector_cpu_s_per_frame
            swap_cpu += measured.seek.analysis_load_s / 256
            inference *= 1 - stated.gpu_analysis_share
        return cls(
            inference_s=inference,
            swap_cpu_s=swap_cpu,
            codec_s=worker.decode_cpu_s_per_frame + worker.encode_cpu_s_per_frame + worker.encoder_rgb_s_per_frame,
            cores=stated.worker_cpu_cores,
            frame_threads=stated.frame_threads,
            side_by_side_efficiency=worker.side_by_side_efficiency,
        )

    @property
    def process_fps(self) -> float:
        """T frames side by side, each its inference then its CPU work; the GPU runs one batch at a time."""
        threads = max(1.0, self.frame_threads * self.side_by_side_efficiency)
        return min(1.0 / self.inference_s, threads / (self.inference_s + self.swap_cpu_s))

    @property
    def cores_fps(self) -> float:
        return self.cores / (self.codec_s + self.swap_cpu_s)

    @property
    def fps(self) -> float:
        return min(self.process_fps, self.cores_fps)

    @property
    def bound_by(self) -> str:
        return "process stage" if self.process_fps <= self.cores_fps else "CPU cores"


def mean_list_pages(segments: int) -> float:
    """LIST requests of one ``scan_work`` averaged over a run: ``segments/`` holds a file and a marker per committed
    segment, ``claims/`` a claim per claimed one; a run goes from none to all of them."""
    steps = range(0, segments + 1, max(1, segments // 50))

    def pages(keys: int) -> int:
        return max(1, math.ceil(keys / LIST_PAGE_KEYS))

    return sum(pages(2 * done) + pages(done) for done in steps) / len(steps)


@dataclass(frozen=True)
class SegmentModel:
    """One segment's costs beyond its frames for ``frames`` frames a segment and ``segments`` segments a work."""

    frames: int
    segments: int
    frame_s: float
    encoder_cpu_s: float
    commit_cpu_s: float
    take_s: float
    commit_latency_s: float
    # The decoder's pre-roll before a seek's first frame, and the encode thread's wait in the encoder's flush at a
    # segment's end: their measured CPU seconds over the pod's cores (its threads run on all of them; CPU time stays
    # steady on a loaded machine, where wall time does not).
    seek_s: float
    flush_s: float
    scan_s: float
    slack_s: float  # the pipeline's queue: a wait on the decode thread shorter than this costs nothing
    cores: int

    @classmethod
    def of(
        cls,
        measured: Measured,
        stated: Stated,
        frames: int,
        segments: int,
        *,
        warm: bool = False,
    ) -> SegmentModel:
        costs = measured.stores[S3_STORE]  # the requests counted on moto, at a stated latency; bytes at a stated rate
        frame_s = 1.0 / PodRate.of(measured, stated, warm=warm).fps
        megabytes = frames * stated.mb_per_frame
        measured_mb = costs.segment_bytes_per_frame * 256 / 1e6
        sha_s = costs.sha256_s_per_mb * megabytes
        commit_cpu = max(0.0, costs.commit_cpu_s - costs.sha256_s_per_mb * measured_mb) + sha_s
        scan_s = mean_list_pages(segments) * stated.s3_list_page_s
        take_s = scan_s + (costs.requests["take"] - costs.requests["scan"]) * stated.s3_request_s
        latency = sha_s + megabytes / stated.s3_mb_per_s + costs.requests["commit"] * stated.s3_request_s
        return cls(
            frames=frames,
            segments=segments,
            frame_s=frame_s,
            encoder_cpu_s=costs.encoder_segment_cpu_s,
            commit_cpu_s=commit_cpu,
            take_s=take_s,
            commit_latency_s=latency,
            seek_s=measured.seek.seek_cpu_s / stated.worker_cpu_cores,
            flush_s=costs.encoder_close_cpu_s / stated.worker_cpu_cores,
            scan_s=scan_s,
            slack_s=PIPELINE_QUEUE_FRAMES * frame_s,
            cores=stated.worker_cpu_cores,
        )

    @property
    def work_s(self) -> float:
        return self.frames * self.frame_s

    @property
    def per_segment_s(self) -> float:
        """What every segment adds to the pod's time: CPU shared by the pod's cores, and the waits the pipeline's
        queue does not hide: the take on the decode thread, the encoder's flush on the encode thread."""
        waits = max(0.0, self.take_s - self.slack_s) + max(0.0, self.flush_s - self.slack_s)
        return (self.encoder_cpu_s + self.commit_cpu_s) / self.cores + waits

    @property
    def seek_stall_s(self) -> float:
        return max(0.0, self.seek_s - self.slack_s)

    @property
    def resume_s(self) -> float:
        """A new try's look at the work before its first frame: both listings, then a seek to its first segment."""
        return self.scan_s + self.seek_s

    def overheads(self) -> Overheads:
        return Overheads(self.per_segment_s, self.seek_stall_s, self.commit_latency_s)

    def ratios(self) -> dict[str, float]:
        """Each cost as a fraction of the segment's own frame work on the pod."""
        work = self.work_s
        return {
            "commit_cpu": (self.encoder_cpu_s + self.commit_cpu_s) / self.cores / work,
            "commit_latency": self.commit_latency_s / work,
            "take": self.take_s / work,
            "take_unhidden": max(0.0, self.take_s - self.slack_s) / work,
            "per_segment": self.per_segment_s / work,
            "seek": self.seek_s / work,
            "resume": self.resume_s / work,
        }


@dataclass(frozen=True)
class Hops:
    """The serial hops of one run (DESIGN.md: validate, prepare, plan, the spans, merge, cleanup), in seconds."""

    validate_s: float
    prepare_s: float
    plan_s: float
    span_task_s: float  # Airflow's part of each span task (holds a pool slot)
    span_pod_s: float  # each span pod before its first frame: pod start, worker start, model load, first listing
    merge_s: float
    cleanup_s: float
    # Standing workers: one prepares the work from the run's lease, one poll after validate, and announces it; the
    # others join at their next close look; the worker that commits the last segment merges (the stored sound, no
    # Airflow task, no pod).
    standing_ready_s: float = 0.0
    standing_merge_s: float = 0.0

    @classmethod
    def of(cls, measured: Measured, stated: Stated, frames: int, segments: SegmentModel) -> Hops:
        run = measured.run
        pod = stated.pod_start_s + run.worker_start_s
        probe = frames * (run.probe_s_per_frame + run.probe_bytes_per_frame / 1e6 / stated.s3_mb_per_s)
        checks = run.target_checks_s + PREPARE_MID_SEEKS * measured.seek.seek_cpu_s
        # The sources' identity beside the target's probe and checks (worker/prepare.py), then work.json written.
        prepare_work = max(stated.identity_s, checks + probe) + 3 * stated.s3_request_s
        return cls(
            validate_s=stated.airflow_task_s,
            prepare_s=stated.airflow_task_s + pod + prepare_work,
            plan_s=stated.airflow_task_s,
            span_task_s=stated.airflow_task_s,
            span_pod_s=pod + stated.model_load_s + segments.scan_s + 3 * stated.s3_request_s,
            # The span pod that commits the last segment merges at once (worker/scheduler.py swap_span): no task, no
            # pod; the merge task then finds the output done.
            merge_s=index_merge_s(measured, stated, frames, segments.segments),
            cleanup_s=stated.airflow_task_s,
            # The lease seen at an idle worker's steady look; the work.json announced to the others, which look
            # every FIRST_LOOK_S while another worker prepares (worker/serve.py).
            standing_ready_s=stated.airflow_task_s + STANDING_POLL_S / 2 + prepare_work + FIRST_LOOK_S / 2,
            standing_merge_s=index_merge_s(measured, stated, frames, segments.segments, stored_sound=True),
        )

    def standing_serial_s(self) -> float:
        """Trigger to output, less the frame work, with standing workers."""
        return self.standing_ready_s + self.standing_merge_s

    @property
    def before_spans_s(self) -> float:
        return self.validate_s + self.prepare_s + self.plan_s

    @property
    def serial_s(self) -> float:
        """Trigger to output, less the spans' frame work: what no GPU count shortens (one span pod included)."""
        return self.before_spans_s + self.span_task_s + self.span_pod_s + self.merge_s

    def as_dict(self) -> dict[str, float]:
        return {
            "validate": self.validate_s,
            "prepare": self.prepare_s,
            "plan": self.plan_s,
            "span task (Airflow)": self.span_task_s,
            "span pod before its first frame": self.span_pod_s,
            "merge": self.merge_s,
            "cleanup (after the output)": self.cleanup_s,
            "standing: validate to frames": self.standing_ready_s,
            "standing: last commit to output": self.standing_merge_s,
        }


def index_merge_s(
    measured: Measured, stated: Stated, frames: int, segments: int, *, stored_sound: bool = False
) -> float:
    """The merge joining the output from the indexes (``output/merge.py``, ``output/mp4join.py``), on S3: one listing,
    the markers read side by side (each holds its segment's moov), the join's CPU (measured), the target's moov, then
    one multipart upload in which S3 copies every segment of at least its smallest part and the stored sound, and
    this process sends the head and whatever is smaller; a run whose sound is not stored reads it from the target
    (``merge_target_read_fraction`` of it: a muxer interleaves the sound between frames)."""
    join = measured.join
    segment_mb = frames / segments * stated.mb_per_frame
    copied = segments if segment_mb * 1e6 >= UPLOAD_MIN_PART_BYTES else 0
    sound_mb = stated.video_seconds * stated.audio_kbps / 8 / 1000
    moved_mb = (segments - copied) * segment_mb + frames * join.moov_bytes_per_frame / 1e6
    if not stored_sound:
        moved_mb += sound_mb + stated.merge_target_read_fraction * frames * stated.mb_per_frame
    requests = (
        math.ceil((2 * segments + 16) / LIST_PAGE_KEYS) * stated.s3_list_page_s
        + math.ceil(segments / MARKER_READS_AT_ONCE) * stated.s3_request_s
        + 3 * stated.s3_request_s  # the target's moov: its head, its size, the moov
        + math.ceil((copied + int(stored_sound)) / COMPOSE_REQUESTS_AT_ONCE) * stated.s3_copy_part_s
        + 2 * stated.s3_request_s  # the upload begun and completed
        + 4 * stated.s3_request_s  # the preview's thumbnails, the preview, the output's marker
    )
    return float(requests + segments * join.per_segment_s + frames * join.per_frame_s + moved_mb / stated.s3_mb_per_s)


def segment_works(
    frames: int, size: int, frame_s: float, *, skew: tuple[float, float, float] | None = None
) -> tuple[float, ...]:
    """Each segment's frame work; ``skew`` (first, last, factor): segments in that fraction of the video that much
    slower (a crowd scene: more faces, more work)."""
    segments = plan_segments(0, frames, size)
    factors = [1.0] * len(segments)
    if skew is not None:
        first, last, factor = skew
        for segment in segments:
            if first * len(segments) <= segment.index < last * len(segments):
                factors[segment.index] = factor
    return tuple(segment.frame_count * frame_s * factor for segment, factor in zip(segments, factors, strict=True))


def run_plan(
    measured: Measured,
    stated: Stated,
    size: int,
    wave: int,
    *,
    frames: int | None = None,
    skew: tuple[float, float, float] | None = None,
    reuse_analysis: bool = False,
    standing: bool = False,
) -> tuple[RunPlan, Hops, SegmentModel]:
    """One run of ``frames`` (default: the stated video) in segments of ``size``, ``wave`` spans; ``standing``: the
    segments are free for standing workers once one of them has prepared the work (``Hops.standing_ready_s``), and
    the one that commits the last merges. Runs planned here share one target (the stated video) and its analysis."""
    frames = frames or stated.frames
    segments = plan_segments(0, frames, size)
    model = SegmentModel.of(measured, stated, size, len(segments))
    hops = Hops.of(measured, stated, frames, model)
    spans = plan_spans(segments, wave)
    warm = None
    if reuse_analysis:
        warm_s = SegmentModel.of(measured, stated, size, len(segments), warm=True).frame_s
        warm = segment_works(frames, size, warm_s, skew=skew)
    plan = RunPlan(
        ready_s=hops.standing_ready_s if standing else hops.before_spans_s,
        work_s=segment_works(frames, size, model.frame_s, skew=skew),
        spans=tuple((span.first, span.last) for span in spans),
        overheads=model.overheads(),
        after_s=hops.standing_merge_s if standing else hops.merge_s,
        warm_work_s=warm,
        target="stated",
    )
    return plan, hops, model


SWITCH_REQUESTS = 10  # moving to another run's work: work.json (2), two scans (4), the target (1), the write probe (3)


def switch_s(measured: Measured, stated: Stated) -> float:
    """A standing or helping worker moving to another run's work (the seek is counted apart)."""
    return float(measured.seek.switch_s + SWITCH_REQUESTS * stated.s3_request_s)


# Who works the spans, and what each is in [facefusion].
SPAN_PODS, HELPING, STANDING = "span pods", "span pods, then other runs", "standing workers"
WORKERS_SETTING = {
    SPAN_PODS: "span_workers = task",
    HELPING: "span_workers = task, help_other_runs_seconds > 0",
    STANDING: "span_workers = standing",
}


def simulate(
    measured: Measured,
    stated: Stated,
    size: int,
    gpus: int,
    *,
    runs: int = 1,
    wave: int | None = None,
    frames: int | None = None,
    workers: str = SPAN_PODS,
    pods_per_gpu: int = 1,
    helping: bool = True,
    kills: Sequence[Kill] = (),
    skew: tuple[float, float, float] | None = None,
    reuse_analysis: bool = False,
    started_with_runs: bool = False,
    worker_prepare_s: float = 0.0,
) -> tuple[Result, Hops, SegmentModel]:
    """``runs`` runs of ``frames`` (default: the stated video) triggered together on ``gpus``, each in one wave of
    ``wave`` spans (default one per GPU), worked by ``workers``. Standing workers are up, models loaded, before the
    runs; ``started_with_runs``: they start with them (a pod's start and model load first). ``worker_prepare_s``:
    prepare work beyond the stated identity (a voice's extraction) that a standing worker does for each run before its
    frames, charged to that run's work, spread over its segments (a standing worker takes a run whole)."""
    standing = workers == STANDING
    plan, hops, model = run_plan(
        measured, stated, size, wave or gpus, frames=frames, skew=skew, reuse_analysis=reuse_analysis, standing=standing
    )
    if standing and worker_prepare_s:
        plan = replace(
            plan,
            work_s=_spread(plan.work_s, worker_prepare_s),
            warm_work_s=None if plan.warm_work_s is None else _spread(plan.warm_work_s, worker_prepare_s),
        )
    pool = Pool(
        gpus=gpus,
        task_s=hops.span_task_s,
        pod_fixed_s=hops.span_pod_s,
        pods_per_gpu=pods_per_gpu,
        helping=helping,
        across_runs=workers == HELPING,
        standing=standing,
        standing_start_s=hops.span_pod_s if started_with_runs else 0.0,
        switch_s=switch_s(measured, stated),
        look_s=stated.s3_list_page_s,
        lease_s=stated.lease_s,
        retry_delay_s=stated.retry_delay_s,
    )
    return Simulation([plan] * runs, pool, kills).run(), hops, model


def _spread(works: tuple[float, ...], extra_s: float) -> tuple[float, ...]:
    return tuple(work + extra_s / len(works) for work in works)


def single_process_s(measured: Measured, stated: Stated, size: int) -> float:
    """``facefusion-worker run`` on one GPU machine: one process, one model load, the same S3 reads and writes."""
    frames = stated.frames
    segments = plan_segments(0, frames, size)
    model = SegmentModel.of(measured, stated, size, len(segments))
    hops = Hops.of(measured, stated, frames, model)
    merge_work = hops.merge_s
    prepare_work = hops.prepare_s - stated.airflow_task_s - stated.pod_start_s - measured.run.worker_start_s
    return float(
        measured.run.worker_start_s
        + prepare_work
        + stated.model_load_s
        + frames * model.frame_s
        + len(segments) * model.per_segment_s
        + merge_work
    )
