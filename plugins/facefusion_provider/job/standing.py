"""Standing workers: ``facefusion-worker serve`` processes that take the segments of every live run under a work root.

With ``[facefusion] span_workers = standing`` no swap_span task starts a worker: each waits (deferred, holding no pool
slot) until its span is committed. Each standing worker rewrites ``{work_root}/workers/NAME.json`` every
``HEARTBEAT_SECONDS``, so a waiting task can tell a queue that is moving from one that nobody works.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from facefusion_provider import storage
from facefusion_provider.job.claims import repeating
from facefusion_provider.job.records import StandingWorker

WORKERS_FOLDER = "workers"
HEARTBEAT_SECONDS = 15.0
HEARTBEAT_LAPSE_SECONDS = 4 * HEARTBEAT_SECONDS  # a heartbeat older than this belongs to a worker that died


def workers_dir(work_root: str) -> str:
    return storage.join(work_root, WORKERS_FOLDER)


def heartbeat_uri(work_root: str, name: str) -> str:
    return storage.join(workers_dir(work_root), f"{name}.json")


def live_standing_workers(work_root: str, *, now: float | None = None) -> list[str]:
    """The names of the standing workers whose heartbeat is recent (one listing)."""
    now = time.time() if now is None else now
    return [
        item.uri.rsplit("/", 1)[-1].removesuffix(".json")
        for item in storage.list_files(workers_dir(work_root))
        if item.uri.endswith(".json") and now - item.modified <= HEARTBEAT_LAPSE_SECONDS
    ]


@contextmanager
def heartbeat(work_root: str, worker: StandingWorker, *, every: float = HEARTBEAT_SECONDS) -> Iterator[None]:
    """Rewrite the worker's heartbeat every ``every`` seconds while the block runs; remove it after."""
    uri = heartbeat_uri(work_root, worker.name)
    data = worker.model_dump_json().encode()
    storage.write_bytes_atomic(uri, data)
    try:
        with repeating(lambda: storage.write_bytes_atomic(uri, data), every, name="facefusion-heartbeat", what=uri):
            yield
    finally:
        storage.delete(uri)
