"""The one liveness rule of the coordination protocol (docs/protocol.md): a lease is live while its holder rewrites it
within its TTL, whoever the holder is. Claims, run leases, standing workers' leases and sweeps all use it.

The clock is the module's ``clock`` object, so the deterministic simulation can run the real protocol code on its
own time (``tests/unit/work/simulation.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum

from facefusion_provider.exceptions import FaceFusionError

logger = logging.getLogger(__name__)

RENEWALS_PER_TTL = 4  # a holder rewrites its lease every quarter TTL: three renewals may fail before it lapses


class LeaseKind(StrEnum):
    RUN = "run"  # runs/{run_key}.json: a run (Airflow or CLI) holds the work
    CLAIM = "claim"  # claims/{name}.{g}.json: a worker works a segment, prepares the work or merges an output
    WORKER = "worker"  # workers/{name}.json: a standing worker is alive
    SWEEP = "sweep"  # deleting.json: a cleanup is removing the work


DEFAULT_TTL_SECONDS: dict[LeaseKind, float] = {
    LeaseKind.RUN: 2 * 3600.0,
    LeaseKind.CLAIM: 60.0,
    LeaseKind.WORKER: 480.0,  # renewed every 2 minutes: about $0.11 a month in PUTs per standing worker
    LeaseKind.SWEEP: 600.0,
}
CLI_RUN_TTL_SECONDS = 600.0  # a CLI run renews its own lease from a thread: a short TTL frees its work soon after


class Clock:
    """Wall time for leases (compared with the store's modification times), monotonic time for deadlines, sleep."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


clock = Clock()


def is_live(written: float, ttl_seconds: float, now: float | None = None) -> bool:
    """The rule: live while ``now - written <= ttl`` (``written``: the store's modification time of the lease)."""
    return (clock.now() if now is None else now) - written <= ttl_seconds


def renew_every(ttl_seconds: float) -> float:
    return ttl_seconds / RENEWALS_PER_TTL


@contextmanager
def repeating(action: Callable[[], None], every: float, *, name: str, what: str) -> Iterator[None]:
    """Call ``action`` in a thread every ``every`` seconds while the block runs (a lease's renewal); a storage failure
    is logged, as the next call may succeed within the TTL."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            try:
                action()
            except FaceFusionError as error:
                logger.warning("%s failed: %s", what, error)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
