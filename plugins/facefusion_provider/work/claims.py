"""Claims: competing workers share one work folder without a queue server (docs/protocol.md, "A claim").

Before a worker works a segment (or prepares a work, or merges a run's output) it creates ``claims/NAME.GGGG.json``
exclusively (S3 ``If-None-Match: *``, a hard link locally): of two workers, one gets generation ``G``. A claim is a
lease (``work/liveness.py``): its holder rewrites it every quarter TTL; a lapsed one is taken over by whoever creates
generation ``G + 1``. A new try of the same task takes over its previous try's claims at once: Airflow starts a try
only when the last one has ended.

Claims only save work: correctness comes from the segment's marker, which is also created exclusively, so of two
workers that did race on one segment exactly one file is ever merged (``commit_marker``). A commit whose file fails
its check is retired (``retire_commit``): the segment is free again as its next incarnation, whose marker has a name of
its own, so every marker is still created once and never replaced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from facefusion_provider import storage
from facefusion_provider.contract import worker_settings
from facefusion_provider.exceptions import FaceFusionError, StorageDeniedError
from facefusion_provider.work import liveness
from facefusion_provider.work.layout import (
    SegmentIncarnations,
    WorkLayout,
    parse_claim_name,
    segment_claim_name,
    work_root_of,
)
from facefusion_provider.work.liveness import LeaseKind, repeating
from facefusion_provider.work.records import Claim, RetiredCommit, SegmentMarker

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimState:
    """The latest generation of a claim and when it was last written (by the store's clock)."""

    name: str
    generation: int
    written_at: float
    ended: bool = False  # written before its segment's commit was retired: its holder committed and let go


@dataclass(frozen=True)
class WorkState:
    """What two listings tell: the committed segments, and the latest generation of every claim by name."""

    committed: frozenset[int]
    named: dict[str, ClaimState] = field(default_factory=dict)
    incarnations: dict[int, int] = field(default_factory=dict)  # segments with a retired commit: their current one

    def incarnation(self, index: int) -> int:
        """The incarnation a commit of segment ``index`` creates the marker of now."""
        return self.incarnations.get(index, 0)

    @property
    def claims(self) -> dict[int, ClaimState]:
        """The segments' claims by index."""
        return {int(name): claim for name, claim in self.named.items() if name.isdigit()}


def scan_work(layout: WorkLayout) -> WorkState:
    """One listing of ``segments/`` and one of ``claims/``: cheap enough before every decision."""
    listing = SegmentIncarnations.of(
        (item.uri.rsplit("/", 1)[-1], item.modified) for item in storage.list_files(layout.segments_dir)
    )
    claims = latest_claims(layout)
    for name, claim in claims.items():  # a claim last written before its segment's retirement held the retired commit
        retired_at = listing.retired_at.get(int(name)) if name.isdigit() else None
        if retired_at is not None and claim.written_at < retired_at:
            claims[name] = replace(claim, ended=True)
    return WorkState(frozenset(listing.markers), claims, listing.current)


def latest_claims(layout: WorkLayout) -> dict[str, ClaimState]:
    """The latest generation of every claim in the work (one listing)."""
    claims: dict[str, ClaimState] = {}
    for item in storage.list_files(layout.claims_dir):
        claim = parse_claim_name(item.uri.rsplit("/", 1)[-1])
        if claim is not None and (claim[0] not in claims or claims[claim[0]].generation < claim[1]):
            claims[claim[0]] = ClaimState(claim[0], claim[1], item.modified)
    return claims


def lease_seconds() -> float:
    return worker_settings().claim_lease_seconds or liveness.DEFAULT_TTL_SECONDS[LeaseKind.CLAIM]


class SegmentClaims:
    """This worker's claims in one work folder: taking, renewing (in a thread, see ``renewing``) and giving up.

    :param owner: the task this worker runs for (``dag/run/task/map``), so a retry can take over its previous try's
        claims at once; outside Airflow, empty.
    :param lease: the claims' TTL (default ``lease_seconds()``).
    :param holder: this worker's name in its claims and markers (default: a random one).
    """

    def __init__(self, layout: WorkLayout, *, owner: str = "", lease: float | None = None, holder: str = ""):
        self.layout = layout
        self.holder = holder or uuid.uuid4().hex[:12]
        self.owner = owner or self.holder
        self.lease = lease if lease is not None else lease_seconds()
        self._held: dict[str, int] = {}  # claim name -> generation
        self._records: dict[tuple[str, int], Claim] = {}  # (name, generation) -> its record: owner and TTL never change
        self._incarnations: dict[int, int] = {}  # segment -> the incarnation it was claimed in
        self._lock = threading.Lock()

    def is_free(self, index: int, state: WorkState) -> bool:
        """Whether segment ``index`` may be claimed now: not committed, and unclaimed, lapsed, or held by our previous
        try."""
        return index not in state.committed and self.is_free_name(segment_claim_name(index), state)

    def is_free_name(self, name: str, state: WorkState) -> bool:
        if name in self.held_names():
            return False
        claim = state.named.get(name)
        if claim is None or claim.ended:
            return True
        ttl = self._written_ttl(claim)  # its holder's TTL, not this worker's
        return ttl is None or not liveness.is_live(claim.written_at, ttl, self._now()) or self._previous_try(claim)

    def _now(self) -> float:
        return liveness.store_now(work_root_of(self.layout))

    def _written_ttl(self, claim: ClaimState) -> float | None:
        """The TTL its holder wrote in the claim, read once per generation (a listing shows no more than its name and
        time); None when it is gone since the listing or unreadable: free."""
        key = (claim.name, claim.generation)
        if key not in self._records:
            try:
                self._records[key] = Claim.model_validate_json(storage.read_bytes(self.layout.claim(*key)))
            except (FaceFusionError, ValueError):
                return None
        return self._records[key].ttl_seconds

    def take(self, index: int, state: WorkState) -> bool:
        """Claim segment ``index`` if it is free in ``state``; False if it is not, or another worker was first. Its
        commit will create the marker of the incarnation ``state`` saw (``incarnation``)."""
        if index in state.committed or not self.take_name(segment_claim_name(index), state):
            return False
        with self._lock:
            self._incarnations[index] = state.incarnation(index)
        return True

    def incarnation(self, index: int) -> int:
        """The incarnation of segment ``index`` this worker claimed it in."""
        with self._lock:
            return self._incarnations.get(index, 0)

    def take_name(self, name: str, state: WorkState) -> bool:
        """Claim ``name`` (the next generation after what ``state`` saw) if it is free there."""
        if not self.is_free_name(name, state):
            return False
        latest = state.named.get(name)
        generation = latest.generation + 1 if latest is not None else 1
        uri = self.layout.claim(name, generation)
        if not storage.write_bytes_exclusive(uri, self._record(name, generation)) and not self._is_ours(uri):
            return False
        with self._lock:
            self._held[name] = generation
        if latest is not None and not latest.ended:
            logger.info(
                "claim %s: took over claim generation %d (its holder stopped renewing)", name, latest.generation
            )
        return True

    def release(self, index: int) -> None:
        """Stop renewing segment ``index`` (committed, or given up); the file stays so generations never repeat."""
        self.release_name(segment_claim_name(index))

    def release_name(self, name: str) -> None:
        with self._lock:
            self._held.pop(name, None)

    def held(self) -> frozenset[int]:
        return frozenset(int(name) for name in self.held_names() if name.isdigit())

    def held_names(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held)

    def renew(self) -> None:
        """Rewrite every held claim; one a newer generation has replaced is given up (the other worker has it)."""
        with self._lock:
            held = dict(self._held)
        for name, generation in held.items():
            if storage.exists(self.layout.claim(name, generation + 1)):
                logger.warning("claim %s: taken over by another worker; this worker's result may be discarded", name)
                self.release_name(name)
                continue
            storage.write_bytes_atomic(self.layout.claim(name, generation), self._record(name, generation))

    def renewing(self) -> contextlib.AbstractContextManager[None]:
        """Renew the held claims in a thread every quarter lease while the block runs."""
        every = liveness.renew_every(self.lease)
        return repeating(self.renew, every, name="facefusion-claims", what="renewing claims")

    def _record(self, name: str, generation: int) -> bytes:
        record = Claim(
            name=name,
            generation=generation,
            holder=self.holder,
            owner=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            ttl_seconds=self.lease,
        )
        return record.model_dump_json().encode()

    def _is_ours(self, uri: str) -> bool:
        """A conditional PUT whose answer was lost is retried and then finds its own claim: ours all the same."""
        try:
            return Claim.model_validate_json(storage.read_bytes(uri)).holder == self.holder
        except (FaceFusionError, ValueError):
            return False

    def _previous_try(self, claim: ClaimState) -> bool:
        if self.owner == self.holder:  # outside Airflow: no task, so no previous try
            return False
        key = (claim.name, claim.generation)
        if key not in self._records:  # read each claim once: helping asks about the same claims again and again
            try:
                self._records[key] = Claim.model_validate_json(storage.read_bytes(self.layout.claim(*key)))
            except (FaceFusionError, ValueError):
                return False
        record = self._records[key]
        return record.holder != self.holder and record.owner == self.owner


def commit_marker(
    layout: WorkLayout, index: int, marker: bytes, *, file: str, writer: str, incarnation: int = 0
) -> bool:
    """Create segment ``index``'s marker of ``incarnation``, after its file ``file`` was written: True when this
    writer's file won. A conditional PUT whose answer was lost is retried and then finds its own marker: ours all the
    same. The loser deletes its own file."""
    uri = layout.segment_marker(index, incarnation)
    won = storage.write_bytes_exclusive(uri, marker)
    if not won:
        try:
            stored = SegmentMarker.model_validate_json(storage.read_bytes(uri))
            won = stored.writer == writer and stored.file == file
        except (FaceFusionError, ValueError):
            won = False
    if not won:
        storage.delete(layout.segment_file(file))
    return won


def retire_commit(
    layout: WorkLayout, index: int, incarnation: int, reason: str, marker: SegmentMarker | None = None
) -> bool:
    """Retire incarnation ``incarnation`` of segment ``index``'s commit, whose file or marker failed its check
    (``reason``): the segment is free again as the next incarnation. True when this call retired it; False when
    another worker had (it is free all the same). The damaged file stays, named in the record, until the work is
    swept."""
    record = RetiredCommit(
        index=index, incarnation=incarnation, reason=reason, by=f"{socket.gethostname()}-{os.getpid()}", marker=marker
    )
    return storage.write_bytes_exclusive(
        layout.retired_marker(index, incarnation), record.model_dump_json(indent=2).encode()
    )


# Twice: a sweep removing the probe between its two writes (this process paused past its lease) looks the same once.
CONDITIONAL_WRITE_PROBES = 2
_CHECKED_ROOTS: set[str] = set()  # work roots whose store this process has seen honour exclusive creates


def check_conditional_writes(layout: WorkLayout) -> None:
    """Fail clearly on a store that ignores exclusive creates (an S3-compatible store without ``If-None-Match``):
    claims and markers would both succeed for two workers there, and segments would be computed twice, silently.
    Checked once per work root and process: a standing worker's every pickup would pay three requests for it."""
    root = layout.work_uri.rsplit("/", 2)[0]
    if root in _CHECKED_ROOTS:
        return
    for _ in range(CONDITIONAL_WRITE_PROBES):
        probe = storage.join(layout.claims_dir, f".probe-{uuid.uuid4().hex[:12]}")
        try:
            created = storage.write_bytes_exclusive(probe, b"1")
            again = storage.write_bytes_exclusive(probe, b"2")
        finally:
            storage.delete(probe)
        if not (created and again):
            _CHECKED_ROOTS.add(root)
            return
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
