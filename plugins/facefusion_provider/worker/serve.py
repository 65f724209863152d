"""``serve``: a standing worker that works the free segments of every live run under a work root (``worker/helping.py``
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
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from facefusion_provider import storage
from facefusion_provider.job import leases, liveness
from facefusion_provider.job.layout import RootLayout
from facefusion_provider.job.liveness import LeaseKind
from facefusion_provider.job.records import StandingWorker
from facefusion_provider.worker.helping import Helped, HelpMemory, help_other_runs

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often an idle standing worker looks for new runs: a listing or two, for a prompt start


@dataclass(frozen=True)
class ServeResult:
    worker: str
    runs: int  # works it committed segments of
    segments: int
    seconds: float


def serve(
    work_root: str, models_dir: str | None = None, *, idle_exit: float | None = None, poll: float = POLL_SECONDS
) -> ServeResult:
    """Work every live run's free segments until stopped, or until ``idle_exit`` seconds pass with nothing to do."""
    root = storage.normalize_uri(work_root, field="work_root")
    host = socket.gethostname()
    me = StandingWorker(
        name=f"{host}-{os.getpid()}",
        host=host,
        pid=os.getpid(),
        started_at=datetime.now(UTC),
        ttl_seconds=liveness.DEFAULT_TTL_SECONDS[LeaseKind.WORKER],
    )
    began = idle_since = time.monotonic()
    done, memory = Helped(), HelpMemory()
    logger.info("standing worker %s serves the runs under %s", me.name, root)
    with leases.standing_worker_lease(RootLayout(root), me):
        while True:
            helped = help_other_runs(
                root, models_dir, owner=f"standing/{me.name}", deadline=math.inf, memory=memory, standing=True
            )
            done.works |= helped.works
            done.segments += helped.segments
            if helped.segments:
                idle_since = time.monotonic()
                logger.info("%d segments of %d runs committed so far", done.segments, done.runs)
                continue
            if idle_exit is not None and time.monotonic() - idle_since >= idle_exit:
                break
            time.sleep(poll)
        memory.finish()
    return ServeResult(me.name, done.runs, done.segments, round(time.monotonic() - began, 3))
