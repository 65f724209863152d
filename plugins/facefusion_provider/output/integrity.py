"""Nothing merged unverified (docs/protocol.md, "Integrity"): before an output is built from the committed segments,
every segment's file is checked against its marker on every store, and a damaged one is healed, not reported.

A check costs no transfer where it can: on S3 the object's own sha256 (stored by the commit's PUT, read by a HEAD);
on a local disk the file is hashed in place; a remote object without a whole-object checksum is hashed as it is read,
by the download a remux makes anyway or, for an index join (whose bytes S3 copies without the merge seeing them), by
one read of its own. Healing retires the damaged commit (``work.claims.retire_commit``: the segment is free again as
its next incarnation, so every marker is still created once), computes the segment again, and merges on.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Literal

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidWorkError
from facefusion_provider.storage.prefetch import Prefetch
from facefusion_provider.telemetry.metrics import WorkerMetrics
from facefusion_provider.work.claims import retire_commit
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.records import SegmentMarker

logger = logging.getLogger(__name__)

DamageKind = Literal["missing", "size", "checksum", "marker"]
CHECKS_AT_ONCE = 32  # segment checks in flight at once (HEADs on S3), within the S3 client's connection pool


@dataclass(frozen=True)
class Damage:
    """A committed segment whose file (or marker) failed its check."""

    index: int
    incarnation: int
    kind: DamageKind
    detail: str  # one line naming the file and what is wrong with it
    marker: SegmentMarker | None = None  # None where the marker itself was unreadable


class SegmentsDamaged(InvalidWorkError):
    """Committed segments failed their checks. The merge heals them (``output.merge.merge_work``); it reaches the
    user only when the same segments are damaged again after every recomputation."""

    def __init__(self, damage: list[Damage]) -> None:
        super().__init__("; ".join(item.detail for item in damage))
        self.damage = damage


def segment_damage(
    layout: WorkLayout, marker: SegmentMarker, listed_size: int | None, *, hash_remote: bool
) -> Damage | None:
    """What is wrong with ``marker``'s committed file (its size as listed, None when it is not there), or None.

    Without ``hash_remote`` a remote object that has no checksum of its own passes here: its bytes are hashed by the
    download that uses them (``remote_digest_damage``)."""
    uri = layout.segment_file(marker.file)
    missing = _damage(marker, "missing", f"{uri}: the segment file is missing although its marker exists")
    if listed_size is None:
        return missing
    if listed_size != marker.size:
        return _damage(marker, "size", f"{uri}: holds {listed_size} bytes, its marker {marker.size}")
    try:
        digest = storage.stored_sha256(uri)
        if digest is None and (hash_remote or storage.local_path(uri) is not None):
            digest = storage.object_sha256(uri)
    except InputMissingError:  # removed since the listing
        return missing
    if digest is not None and digest != marker.sha256:
        return _damage(marker, "checksum", f"{uri}: its checksum differs from its marker's")
    return None


def damaged_segments(
    layout: WorkLayout, markers: list[SegmentMarker], sizes: dict[str, int], *, hash_remote: bool
) -> list[Damage]:
    """Every damaged segment among ``markers`` (checked side by side), in order."""
    checks = [
        functools.partial(segment_damage, layout, marker, sizes.get(marker.file), hash_remote=hash_remote)
        for marker in markers
    ]
    with Prefetch(checks, CHECKS_AT_ONCE) as checking:
        return [damage for damage in checking.results() if damage is not None]


def digest_damage(layout: WorkLayout, marker: SegmentMarker, digest: str) -> Damage | None:
    """The damage a file's bytes hashed on their way (``digest``) show against ``marker``, if any."""
    if digest == marker.sha256:
        return None
    return _damage(marker, "checksum", f"{layout.segment_file(marker.file)}: its checksum differs from its marker's")


def retire_damaged(layout: WorkLayout, damage: list[Damage], metrics: WorkerMetrics) -> None:
    """Retire each damaged commit (once among workers), saying so in the log and the metrics."""
    for item in damage:
        retired = retire_commit(layout, item.index, item.incarnation, item.detail, item.marker)
        metrics.segment_retired(item.kind)
        logger.warning(
            "segment %d of work %s is damaged (%s): %s; computing it again",
            item.index,
            layout.work_id,
            item.detail,
            "its commit retired" if retired else "another worker retired its commit",
        )


def _damage(marker: SegmentMarker, kind: DamageKind, detail: str) -> Damage:
    return Damage(marker.index, marker.incarnation, kind, detail, marker)
