"""Claims on segments: competing workers share one work folder without a queue server.

Before a worker works a segment it creates ``claims/NNNNN.GGGG.json`` exclusively (S3 ``If-None-Match: *``, a hard
link locally): of two workers, one gets generation ``G``. The holder rewrites its claim every quarter lease, so the
claim's modification time says it is alive; a claim not rewritten for a whole lease has lapsed (its pod died), and
whoever creates generation ``G + 1`` takes the segment over. A new try of the same task takes over its previous try's
claims at once: Airflow starts a try only when the last one has ended.

Claims only save work: correctness comes from the segment's marker, which is also created exclusively, so of two
workers that did race on one segment exactly one file is ever merged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from facefusion_provider import storage
from facefusion_provider.exceptions import FaceFusionError, StorageDeniedError
from facefusion_provider.job.layout import WorkLayout, parse_claim_name, parse_segment_name
from facefusion_provider.job.records import Claim

logger = logging.getLogger(__name__)

LEASE_SECONDS_VARIABLE = "FACEFUSION_CLAIM_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 60
RENEWALS_PER_LEASE = 4
Clock = Callable[[], float]


@dataclass(frozen=True)
class ClaimState:
    """The latest generation of a segment's claim and when it was last written (by the store's clock)."""

    index: int
    generation: int
    written_at: float


@dataclass(frozen=True)
class WorkState:
    """What two listings tell about every segment: committed ones, and the latest claim of the others."""

    committed: frozenset[int]
    claims: dict[int, ClaimState] = field(default_factory=dict)


def scan_work(layout: WorkLayout) -> WorkState:
    """One listing of ``segments/`` and one of ``claims/``: cheap enough before every decision."""
    committed = set()
    for item in storage.list_files(layout.segments_dir):
        parsed = parse_segment_name(item.uri.rsplit("/", 1)[-1])
        if parsed is not None and parsed[1] == "marker":
            committed.add(parsed[0])
    claims: dict[int, ClaimState] = {}
    for item in storage.list_files(layout.claims_dir):
        claim = parse_claim_name(item.uri.rsplit("/", 1)[-1])
        if claim is not None and (claim[0] not in claims or claims[claim[0]].generation < claim[1]):
            claims[claim[0]] = ClaimState(claim[0], claim[1], item.modified)
    return WorkState(frozenset(committed), claims)


def lease_seconds() -> float:
    return float(storage.positive_setting(LEASE_SECONDS_VARIABLE, DEFAULT_LEASE_SECONDS))


class SegmentClaims:
    """This worker's claims in one work folder: taking, renewing (in a thread, see ``renewing``) and giving up.

    :param owner: the task this worker runs for (``dag/run/task/map``), so a retry can take over its previous try's
        claims at once; outside Airflow, empty.
    """

    def __init__(self, layout: WorkLayout, *, owner: str = "", lease: float | None = None, clock: Clock = time.time):
        self.layout = layout
        self.holder = uuid.uuid4().hex[:12]
        self.owner = owner or self.holder
        self.lease = lease if lease is not None else lease_seconds()
        self._clock = clock
        self._held: dict[int, int] = {}  # segment index -> generation
        self._owners: dict[tuple[int, int], str] = {}  # (index, generation) -> owner: a claim's owner never changes
        self._lock = threading.Lock()

    def is_free(self, index: int, state: WorkState) -> bool:
        """Whether ``index`` may be claimed now: not committed, and unclaimed, lapsed, or held by our previous try."""
        if index in state.committed or index in self.held():
            return False
        claim = state.claims.get(index)
        return claim is None or self._lapsed(claim) or self._previous_try(claim)

    def take(self, index: int, state: WorkState) -> bool:
        """Claim ``index`` if it is free in ``state`` (the next generation after what ``state`` saw); False if it is
        not, or another worker was first."""
        if not self.is_free(index, state):
            return False
        latest = state.claims.get(index)
        generation = latest.generation + 1 if latest is not None else 1
        record = Claim(
            index=index,
            generation=generation,
            holder=self.holder,
            owner=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
        )
        uri = self.layout.claim(index, generation)
        if not storage.write_bytes_exclusive(uri, record.model_dump_json().encode()) and not self._is_ours(uri):
            return False
        with self._lock:
            self._held[index] = generation
        if latest is not None:
            logger.info(
                "segment %d: took over claim generation %d (its holder stopped renewing)", index, latest.generation
            )
        return True

    def _is_ours(self, uri: str) -> bool:
        """A conditional PUT whose answer was lost is retried and then finds its own claim: ours all the same."""
        try:
            return Claim.model_validate_json(storage.read_bytes(uri)).holder == self.holder
        except (FaceFusionError, ValueError):
            return False

    def release(self, index: int) -> None:
        """Stop renewing ``index`` (it is committed, or given up); the file stays so generations never repeat."""
        with self._lock:
            self._held.pop(index, None)

    def held(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._held)

    def renew(self) -> None:
        """Rewrite every held claim; one a newer generation has replaced is given up (the other worker has it)."""
        with self._lock:
            held = dict(self._held)
        for index, generation in held.items():
            if storage.exists(self.layout.claim(index, generation + 1)):
                logger.warning(
                    "segment %d: claim taken over by another worker; this worker's result may be discarded", index
                )
                self.release(index)
                continue
            record = Claim(
                index=index,
                generation=generation,
                holder=self.holder,
                owner=self.owner,
                host=socket.gethostname(),
                pid=os.getpid(),
            )
            storage.write_bytes_atomic(self.layout.claim(index, generation), record.model_dump_json().encode())

    def renewing(self) -> contextlib.AbstractContextManager[None]:
        """Renew the held claims in a thread every quarter lease while the block runs."""
        return repeating(self.renew, self.lease / RENEWALS_PER_LEASE, name="facefusion-claims", what="renewing claims")

    def _lapsed(self, claim: ClaimState) -> bool:
        return self._clock() - claim.written_at > self.lease

    def _previous_try(self, claim: ClaimState) -> bool:
        if self.owner == self.holder:  # outside Airflow: no task, so no previous try
            return False
        key = (claim.index, claim.generation)
        if key not in self._owners:  # read each claim once: balancing asks about the same claims again and again
            try:
                record = Claim.model_validate_json(storage.read_bytes(self.layout.claim(*key)))
            except (FaceFusionError, ValueError):
                return False
            if record.holder == self.holder:
                return False
            self._owners[key] = record.owner
        return self._owners[key] == self.owner


@contextmanager
def repeating(action: Callable[[], None], every: float, *, name: str, what: str) -> Iterator[None]:
    """Call ``action`` in a thread every ``every`` seconds while the block runs (a lease's renewal); a storage failure
    is logged, as the next call may succeed within the lease."""
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


def check_conditional_writes(layout: WorkLayout) -> None:
    """Fail clearly on a store that ignores exclusive creates (an S3-compatible store without ``If-None-Match``):
    claims and markers would both succeed for two workers there, and segments would be computed twice, silently."""
    probe = storage.join(layout.claims_dir, f".probe-{uuid.uuid4().hex[:12]}")
    try:
        created = storage.write_bytes_exclusive(probe, b"1")
        again = storage.write_bytes_exclusive(probe, b"2")
    finally:
        storage.delete(probe)
    if created and again:
        raise StorageDeniedError(
            f"{layout.work_uri}: this store ignores conditional writes (If-None-Match: *), so two workers could both "
            "commit one segment; use a store with conditional PUTs (AWS S3, or an S3-compatible store that supports "
            "them) for the work root"
        )


def longest_free_run(indexes: Iterable[int], is_free: Callable[[int], bool]) -> list[int]:
    """The longest run of consecutive free indexes among ``indexes`` (sorted): the tail of the span with most left."""
    best: list[int] = []
    current: list[int] = []
    previous = None
    for index in indexes:
        if is_free(index) and (not current or previous == index - 1):
            current.append(index)
        else:
            current = [index] if is_free(index) else []
        if len(current) > len(best):
            best = list(current)
        previous = index
    return best
