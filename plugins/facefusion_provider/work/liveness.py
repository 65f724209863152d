"""The one liveness rule of the coordination protocol (docs/protocol.md): a lease is live while its holder rewrites it
within its TTL, whoever the holder is. Claims, run leases, standing workers' leases and sweeps all use it.

A lease's age is judged on the store's clock: its written time is the store's modification time, and "now" is this
process's clock moved by the offset between the two, measured by writing a probe under the work root and reading its
modification time back (``store_now``). So a host whose clock is off declares nobody dead early; it says so in its log.

The process clock is the module's ``clock`` object: every wait of the protocol and of the worker loop goes through it
(sleeps, waits on an event, the threads that renew leases), so the deterministic simulation runs the real code on its
own time (``tests/unit/work/simulation.py``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Protocol

from facefusion_provider import storage
from facefusion_provider.exceptions import FaceFusionError
from facefusion_provider.work.layout import RootLayout

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


class Joinable(Protocol):
    def join(self) -> None: ...


class Clock:
    """Wall time for leases (compared with the store's modification times), monotonic time for deadlines, and every
    wait on them: a sleep, an event waited for with a timeout, a thread that waits so (a lease's renewal)."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until ``event`` is set or ``seconds`` pass; whether it is set."""
        return event.wait(seconds)

    def thread(self, target: Callable[[], None], name: str) -> Joinable:
        """``target`` started in a thread of this process (a daemon: it never holds the process up)."""
        started = threading.Thread(target=target, name=name, daemon=True)
        started.start()
        return started


clock = Clock()


def is_live(written: float, ttl_seconds: float, now: float) -> bool:
    """The rule: live while ``now - written <= ttl``, both on the store's clock (``written``: the store's modification
    time of the lease; ``now``: ``store_now``)."""
    return now - written <= ttl_seconds


CLOCK_CHECK_SECONDS = 300.0  # how often a process measures its clock against the store's again
CLOCK_WARNING_SECONDS = 5.0  # an offset beyond this is worth a line in the log: the host's clock is off
PROBE_ROUND_TRIP_SECONDS = 2.0  # a probe's write slower than this (a pause, a stall) is measured again
PROBE_ATTEMPTS = 3
_offsets: dict[str, tuple[float, float]] = {}  # work root -> (store clock - process clock, when measured: monotonic)
_offsets_lock = threading.Lock()


def store_now(root_uri: str) -> float:
    """Now on the clock of the store that holds ``root_uri`` (a work root): this process's clock plus the offset
    measured every ``CLOCK_CHECK_SECONDS`` (``measure_offset``)."""
    with _offsets_lock:
        known = _offsets.get(root_uri)
    if known is None or clock.monotonic() - known[1] >= CLOCK_CHECK_SECONDS:
        known = (measure_offset(root_uri), clock.monotonic())
        with _offsets_lock:
            _offsets[root_uri] = known
    return clock.now() + known[0]


def measure_offset(root_uri: str) -> float:
    """The store's clock minus this process's, from a probe written under ``root_uri/clocks/`` and its modification
    time (one PUT, one HEAD, one DELETE); logged when it exceeds ``CLOCK_WARNING_SECONDS``. A probe whose write took
    longer than ``PROBE_ROUND_TRIP_SECONDS`` (the process paused meanwhile) is uncertain by half that: it is measured
    again, up to ``PROBE_ATTEMPTS`` times, and the sample with the shortest round trip is taken."""
    best: tuple[float, float] | None = None  # (round trip, offset)
    for _ in range(PROBE_ATTEMPTS):
        sample = _probe_offset(root_uri)
        if sample is None:  # deleted under us (a sweep of the root): judge by this clock this time
            return 0.0
        best = sample if best is None or sample[0] < best[0] else best
        if best[0] <= PROBE_ROUND_TRIP_SECONDS:
            break
    round_trip, offset = best if best is not None else (0.0, 0.0)
    if abs(offset) > CLOCK_WARNING_SECONDS + round_trip:
        logger.warning(
            "this host's clock is %.0f s %s the clock of the store at %s; leases are judged on the store's clock",
            abs(offset),
            "behind" if offset > 0 else "ahead of",
            root_uri,
        )
    return offset


def _probe_offset(root_uri: str) -> tuple[float, float] | None:
    """One probe: the write's round trip and the offset it measures; None when the probe was deleted under us."""
    # One probe per thread: two threads measuring at once must not read or delete each other's.
    probe = RootLayout(root_uri).clock_probe(f"{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}")
    before = clock.now()
    storage.write_bytes_atomic(probe, b"{}")
    after = clock.now()
    written = storage.stat(probe)
    storage.delete(probe)
    return None if written is None else (after - before, written.modified - (before + after) / 2)


def renew_every(ttl_seconds: float) -> float:
    return ttl_seconds / RENEWALS_PER_TTL


@contextmanager
def repeating(action: Callable[[], None], every: float, *, name: str, what: str) -> Iterator[None]:
    """Call ``action`` in a thread every ``every`` seconds while the block runs (a lease's renewal); a storage failure
    is logged, as the next call may succeed within the TTL."""
    stop = threading.Event()

    def loop() -> None:
        while not clock.wait(stop, every):
            try:
                action()
            except FaceFusionError as error:
                logger.warning("%s failed: %s", what, error)

    thread = clock.thread(loop, name)
    try:
        yield
    finally:
        stop.set()
        thread.join()
