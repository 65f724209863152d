"""``serve``: a standing worker that works the free segments of every live run under a work root (``worker/scheduler.py``
chooses which: an interactive run before batch runs, then the oldest).

Its models load once per model set for the life of the process, so with ``[facefusion] span_workers = standing`` no
run pays a pod start or a model load: swap_span tasks only wait for their spans to be committed. A standing worker
also prepares a new run's work from its lease, and the worker that commits a work's last segment merges its runs'
outputs: the frames start and the output appears without waiting for Airflow to start the prepare and merge tasks
(which then find their work done). Claims, markers and
leases are the same as for task workers; a killed standing worker loses at most the segments it was working, whose
claims lapse. SIGTERM unwinds (the CLI's handler): the segment in flight is abandoned, the heartbeat removed.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType

from facefusion_provider import storage
from facefusion_provider.work import leases, liveness
from facefusion_provider.work.layout import RootLayout
from facefusion_provider.work.liveness import LeaseKind
from facefusion_provider.work.records import StandingWorker
from facefusion_provider.worker.scheduler import Helped, HelpMemory, Scope, work_live_runs

logger = logging.getLogger(__name__)

FIRST_LOOK_SECONDS = 0.25  # an idle worker's first look at the change signal; then twice as long each time
LONGEST_LOOK_SECONDS = 1.5  # ... up to this: one HEAD every 1.5 s, about $0.69 a month on S3 Standard
SIGNAL_FREE_RESCAN_SECONDS = 60.0  # with live runs, look again this often anyway: a claim's holder may have died
AWAIT_PREPARE_SECONDS = 30.0  # another worker prepares a run: look every FIRST_LOOK_SECONDS for this long at most


@dataclass(frozen=True)
class ServeResult:
    worker: str
    runs: int  # works it committed segments of
    segments: int
    seconds: float
    looks: int = 0  # reads of the change signal while idle


def serve(work_root: str, models_dir: str | None = None, *, idle_exit: float | None = None) -> ServeResult:
    """Work every live run's free segments until stopped (SIGTERM: the segment in flight is finished and committed
    first), or until ``idle_exit`` seconds pass with nothing to do. Idle, it reads the change signal
    (docs/protocol.md) instead of listing the works."""
    root = RootLayout(storage.normalize_uri(work_root, field="work_root"))
    host = socket.gethostname()
    me = StandingWorker(
        name=f"{host}-{os.getpid()}",
        host=host,
        pid=os.getpid(),
        started_at=datetime.now(UTC),
        ttl_seconds=liveness.DEFAULT_TTL_SECONDS[LeaseKind.WORKER],
    )
    began = idle_since = liveness.clock.monotonic()
    done, memory, looks = Helped(), HelpMemory(refuses_as=me.name), 0
    stop = threading.Event()
    scope = Scope(root.root_uri, f"standing/{me.name}", standing=True, stop=stop)
    logger.info("standing worker %s serves the runs under %s", me.name, root.root_uri)
    with leases.standing_worker_lease(root, me), _draining_on_sigterm(stop):
        seen = _signal_version(root)
        while not stop.is_set():
            helped = work_live_runs(scope, models_dir, memory)
            done.works |= helped.works
            done.segments += helped.segments
            if helped.segments:
                idle_since = liveness.clock.monotonic()
                logger.info("%d segments of %d runs committed so far", done.segments, done.runs)
                continue
            until = math.inf if idle_exit is None else idle_since + idle_exit
            if liveness.clock.monotonic() >= until:
                break
            rescan = SIGNAL_FREE_RESCAN_SECONDS if memory.free_runs else math.inf  # live runs seen: claims may lapse
            # A run being prepared by another worker is announced when its work.json is written: join it at once.
            awaiting, memory.prepared_elsewhere = memory.prepared_elsewhere, False
            longest = FIRST_LOOK_SECONDS if awaiting else LONGEST_LOOK_SECONDS
            rescan = min(rescan, AWAIT_PREPARE_SECONDS) if awaiting else rescan
            seen, counted = _wait_for_change(
                root, seen, until=min(until, liveness.clock.monotonic() + rescan), stop=stop, longest=longest
            )
            looks += counted
        memory.finish()
    if stop.is_set():
        logger.info("standing worker %s stopped (SIGTERM) after committing its segment in flight", me.name)
    return ServeResult(me.name, done.runs, done.segments, round(liveness.clock.monotonic() - began, 3), looks)


def _signal_version(root: RootLayout) -> str | None:
    found = storage.stat(root.signal)
    return None if found is None else found.version


def _wait_for_change(
    root: RootLayout, seen: str | None, *, until: float, stop: threading.Event, longest: float = LONGEST_LOOK_SECONDS
) -> tuple[str | None, int]:
    """Read the change signal, backing off from ``FIRST_LOOK_SECONDS`` to ``longest``, until it changes, ``until``
    (monotonic) passes or ``stop`` is set; the version last seen and how many reads it took."""
    delay, looks = FIRST_LOOK_SECONDS, 0
    clock = liveness.clock
    while clock.monotonic() < until and not clock.wait(stop, min(delay, max(until - clock.monotonic(), 0.0))):
        looks += 1
        version = _signal_version(root)
        if version != seen:
            return version, looks
        delay = min(delay * 2, longest)
    return seen, looks


@contextmanager
def _draining_on_sigterm(stop: threading.Event) -> Iterator[None]:
    """SIGTERM (KEDA scaling down, a rollout) sets ``stop``: no new segment is taken, the one in flight is committed,
    then the worker exits; a second SIGTERM unwinds at once. Only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def drain(signal_number: int, frame: FrameType | None) -> None:
        logger.info("SIGTERM: finishing the segment in flight, then stopping")
        stop.set()
        signal.signal(signal_number, previous)

    previous = signal.signal(signal.SIGTERM, drain)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
