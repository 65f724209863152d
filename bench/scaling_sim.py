"""An event simulation of swap runs on a GPU pool, following the worker's own rules (worker/span.py, segments.py,
work/claims.py, operators/commands.py):

- spans are pool tasks; a task whose segments are all committed when it starts launches no pod (``completed_work``);
  otherwise its pod pays its fixed cost once, then works segments one after another;
- a pod takes the next segment while it is free, else its span's first free one, else (balancing) the back half of
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
slot). Checked against real standing workers by ``bench/bench_calibration.py``. Several pods may share one GPU
(``pods_per_gpu``; pods working at once share its speed equally). Times are seconds; a segment's work is given at a
whole GPU's speed.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

POLL_S = 2.0  # worker/span.py WAIT_SECONDS: how often a pod with nothing to claim looks again
FIRST_LOOK_S = 0.25  # worker/serve.py FIRST_LOOK_SECONDS: an idle standing worker's first look at the change signal
LONGEST_LOOK_S = 1.5  # worker/serve.py LONGEST_LOOK_SECONDS: ... doubling up to this (bench/bench_calibration.py)
STANDING_POLL_S = LONGEST_LOOK_S  # how often a standing worker idle for a while looks for new runs
PIECE_SEGMENTS = 32  # worker/helping.py: a helper joins a started run only for a free run this long
LOOKS_AT_ONCE = 8  # worker/helping.py: runs a helper looks at side by side
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
    balancing: bool = True
    across_runs: bool = False
    standing: bool = False
    standing_start_s: float = 0.0  # when the standing workers are up (0: running with models loaded before the runs)
    standing_starts_s: tuple[float, ...] = ()  # each standing worker's start (the phase of its idle looks), if given
    first_join_s: float = 0.0  # a standing worker's first run: its models load (and its code is imported) only then
    switch_s: float = 0.0  # a standing or helping worker moving to another run's work: work.json, listings, processor
    look_s: float = 0.0  # a standing or helping worker looking at one run's claims to choose where to go
    trigger_poll_s: float = (
        5.0  # triggers/span_committed.py POLL_SECONDS: a deferred span task learns of its last commit
    )
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
    looked: dict[int, float] = field(default_factory=dict)  # run -> when this worker last listed its claims
    idle_look_s: float = FIRST_LOOK_S  # a standing worker's next wait for the change signal while idle
    joined: bool = False  # a standing worker has worked a segment (its models are loaded)
    died_at: float | None = None


@dataclass
class Result:
    makespan_s: float
    outputs_s: list[float]
    first_pod_s: float  # the first pod's start on a GPU
    last_span_end_s: float
    busy_s: float  # GPU seconds in which at least one pod works segments
    useful_s: float  # GPU seconds of frame work of the committed segments (each once)
    lost_s: float  # GPU seconds of work killed pods had done on segments they never committed
    pods: int
    stolen: int
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
        self.gpu_busy_since = [0.0] * pool.gpus
        self.open_tasks = [len(run.spans) for run in runs]
        self.task_of: dict[Key, _Worker] = {}
        self.outputs = [0.0] * len(runs)
        self.last_span_end = 0.0
        self.first_pod: float | None = None
        self.busy = self.useful = self.lost = 0.0
        self.pods = self.stolen = self.seeks = self.analysed_count = self.cold_count = 0

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
            busy_s=self.busy,
            useful_s=self.useful,
            lost_s=self.lost,
            pods=self.pods,
            stolen=self.stolen,
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
        (balancing) the back half of the longest run of free segments."""
        previous, run = worker.previous, worker.work_run
        if worker.run < 0:
            return self._pick_standing(worker, now)
        if previous is not None and previous + 1 < len(self.runs[run].work_s):
            following = previous + 1
            own = run == worker.run and following in worker.own
            stealing = run != worker.run or previous not in worker.own
            if (own or stealing) and self._free(worker, run, following, now):
                return run, following
        for index in worker.own:
            if self._free(worker, worker.run, index, now):
                return worker.run, index
        if not self.pool.balancing:
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
        worker.looked.update(dict.fromkeys(unseen, now))
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
        runs = [worker.run, *self._other_runs(now)] if self.pool.balancing else [worker.run]
        indexes = {run: range(len(self.runs[run].work_s)) for run in runs}
        if not self.pool.balancing:
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
        self.stolen += run != worker.run or index not in worker.own
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
        if self._own_committed(worker) and not (self.pool.across_runs and self._anything_free(worker, now)):
            self._finish(worker, now)
        elif self._anything_free(worker, now):
            self._next(worker, now)
        else:
            self._push(now + POLL_S, "check", (worker.number,))

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
        was_busy = bool(self.working[gpu])
        if working:
            worker.state = "working"
            self.working[gpu].add(worker.number)
        else:
            self.working[gpu].discard(worker.number)
        busy = bool(self.working[gpu])
        if busy and not was_busy:
            self.gpu_busy_since[gpu] = now
        elif was_busy and not busy:
            self.busy += now - self.gpu_busy_since[gpu]
        speed = 1.0 / max(1, len(self.working[gpu]))
        for number in self.working[gpu]:
            other = self.workers[number]
            other.version += 1
            self._push(now + max(0.0, other.remaining) / speed, "done", (number, other.version))
