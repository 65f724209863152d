"""``merge``: this run's output from the committed segments, with the target's audio, frame-exact and never encoded
again, published atomically, with its preview and its marker beside it.

An MP4 output is joined from indexes (``output.index_join``, ``output.mp4join``): its moov is built from the moovs the segment
markers carry and the target's, and its media data is copied as it is (on S3 by S3 itself: ``storage.compose``).
Anything else is remuxed here, verified, and published as it is written; either way ``output.publish`` writes the
preview and the marker.

The output, its preview and its marker belong to the run that names them; the segments are the shared work's. One
listing finds every marker however many segments there are; the markers are read side by side and, for a remux, the
segment files fetched ahead.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import posixpath
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import IO, TYPE_CHECKING, cast
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.contract import worker_settings
from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.metric_names import WORK_ID
from facefusion_provider.output import MergeResult
from facefusion_provider.output.index_join import join_refusal, plan_join
from facefusion_provider.output.integrity import (
    Damage,
    SegmentsDamaged,
    damaged_segments,
    digest_damage,
    retire_damaged,
)
from facefusion_provider.output.sound import check_sound, encoded_sound_uri
from facefusion_provider.storage.prefetch import Prefetch
from facefusion_provider.storage.scratch import scratch_folder
from facefusion_provider.telemetry.metrics import worker_metrics
from facefusion_provider.work.access import checked_uris, load_work, work_layout
from facefusion_provider.work.layout import SegmentIncarnations, WorkLayout, output_done, preview_uri_of
from facefusion_provider.work.records import SegmentMarker, WorkSpec, segment_label
from facefusion_provider.work.run_inputs import CLI_FIELDS, check_output_format, uri_extension

if TYPE_CHECKING:
    from facefusion_provider.media.containers import MediaSource
    from facefusion_provider.types import VideoProbe

logger = logging.getLogger(__name__)

DEFAULT_MERGE_PREFETCH = 4  # segments the merge fetches at once, ahead of the one it remuxes
MARKER_READS_AT_ONCE = 32  # the merge's marker reads in flight at once, within the S3 client's connection pool
HEAL_ROUNDS = 3  # times a merge computes damaged segments again before it blames the store


def merge_prefetch() -> int:
    """How many segments the merge downloads (and checks) at once, ahead of the one it is remuxing."""
    return worker_settings().merge_prefetch or DEFAULT_MERGE_PREFETCH


Recompute = Callable[[list[int]], None]  # computes the given segments again, each committed before it returns


def merge(work_uri: str, target: str, output: str, recompute: Recompute) -> MergeResult:
    """Write ``output`` from the work's committed segments and ``target``'s other streams; damaged segments are
    computed again by ``recompute`` (the worker's loop) and the merge goes on."""
    layout = work_layout(work_uri)
    uris = checked_uris([], target, output)
    assert uris.output_uri is not None
    done = output_done(layout.work_id, uris.output_uri)
    if done is not None:  # a repeat after cleanup removed the work: the output's marker is all there is to read
        logger.info("output %s is already done", uris.output_uri)
        return MergeResult(uris.output_uri, preview_uri_of(uris.output_uri), done.frame_count, skipped=True)
    spec = load_work(layout)
    check_output_format(uris.output_uri, spec.options, CLI_FIELDS, uris.target_uri)
    return merge_work(spec, layout, uris.target_uri, uris.output_uri, recompute)


def merge_work(
    spec: WorkSpec, layout: WorkLayout, target_uri: str, output_uri: str, recompute: Recompute
) -> MergeResult:
    """The output joined from the indexes where it can be (``output.index_join``), else remuxed; then its preview and
    marker. The caller has checked that the output is not done yet.

    Every segment is checked against its marker first (``output.integrity``); damaged ones are retired, computed again
    by ``recompute`` and the merge starts over, up to ``HEAL_ROUNDS`` times."""
    metrics = worker_metrics({WORK_ID: spec.work_id})
    for heal_round in range(HEAL_ROUNDS + 1):
        try:
            return _merge_checked(spec, layout, target_uri, output_uri)
        except SegmentsDamaged as found:
            if heal_round == HEAL_ROUNDS:
                raise InvalidWorkError(
                    f"work {spec.work_id}: segments damaged again after {HEAL_ROUNDS} recomputations, so the store "
                    f"corrupts what is written to it: {found}"
                ) from None
            retire_damaged(layout, found.damage, metrics)
            recompute(sorted({item.index for item in found.damage}))
        except SegmentsRetired as found:
            if heal_round == HEAL_ROUNDS:
                raise
            recompute(found.indexes)  # a merge retired them and did not live to compute them again
    raise AssertionError("unreachable")


def _merge_checked(spec: WorkSpec, layout: WorkLayout, target_uri: str, output_uri: str) -> MergeResult:
    """One merge over segments that pass their checks; ``SegmentsDamaged`` for those that do not."""
    from facefusion_provider.output import publish  # numpy (0.2-0.3 s): not when the CLI starts

    began = time.perf_counter()
    markers, sizes = _committed(spec, layout)
    still = spec.probe.still_image
    damage = damaged_segments(layout, markers, sizes, hash_remote=not still and join_refusal(spec, output_uri) is None)
    if damage:
        raise SegmentsDamaged(damage)
    # The preview needs only the segments' thumbnails: made beside the join, not after the output is published.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="preview") as previews:
        preview = previews.submit(publish.preview_sheet, spec, layout)
        markers_read = time.perf_counter()
        plan = None if still else plan_join(spec, layout, markers, sizes, target_uri, output_uri)
        if still:
            size, digest, timings = _write_image(spec, layout, markers[0], output_uri)
            how, method = "as an image", "image"
        elif plan is None:
            size, digest, timings = _remux(spec, layout, markers, target_uri, output_uri)
            how, method = "by remuxing", "remux"
        else:
            composed = storage.compose(output_uri, plan.pieces)  # S3 copies the large ranges itself
            size, digest, method = composed.size, None, "index"
            how = f"from their indexes ({composed.copied_bytes / 1e6:.1f} MB of it copied by the store)"
            # index_s: every segment's and the target's moov read, the output's moov built and checked; copied_mb:
            # bytes the store copied without this process; moved_mb: read and written here (head, audio, small ones)
            timings = {
                "index_s": plan.index_s,
                "publish_s": time.perf_counter() - markers_read - plan.index_s,
                "copied_mb": composed.copied_bytes / 1e6,
                "moved_mb": composed.moved_bytes / 1e6,
            }
        return publish.finish_merge(
            spec,
            layout,
            output_uri,
            size=size,
            sha256=digest,
            method=method,
            timings={"markers_s": markers_read - began, **timings},  # the markers read, every segment checked
            began=began,
            segment_count=len(markers),
            how=how,
            preview=preview,
        )


def _remux(
    spec: WorkSpec, layout: WorkLayout, markers: list[SegmentMarker], target_uri: str, output_uri: str
) -> tuple[int, str, dict[str, float]]:
    """The output remuxed from the segment files and the target's other streams, verified and published: its size,
    sha256 and timings."""
    from facefusion_provider.output.publish import OutputPublisher
    from facefusion_provider.output.remux import PendingSegment, merge_segments

    pending = [
        PendingSegment(marker.start, marker.end, segment_label(spec, segment))
        for marker, segment in zip(markers, spec.segments, strict=True)
    ]
    with (
        scratch_folder("merge-") as folder,
        OutputPublisher(output_uri, folder, expected_bytes=sum(m.size for m in markers)) as publisher,
        storage.naming_a_full_disk(publisher.written_where),
    ):
        fetches = [functools.partial(_local_segment, layout, marker, folder) for marker in markers]
        began = time.perf_counter()
        # The next segments download (and are checked) while the remux reads the current one; an S3 output's media
        # data uploads while it is written.
        with (
            Prefetch(fetches, merge_prefetch(), functools.partial(_discard_download, folder)) as prefetch,
            _sound_source(spec, target_uri, folder) as (original, probe, name),
        ):
            merge_segments(
                pending,
                original,
                probe,
                publisher.path,
                name=name,
                paths=prefetch.results(),
                moov_last=publisher.moov_last,
                own_timeline=encoded_sound_uri(spec.identity) is not None,
            )
        remuxed = time.perf_counter()
        published_file = publisher.finish()
        with published_file.open() as output:
            _verify_output(spec, output_uri, output)
        size, digest = published_file.size, published_file.sha256()
        verified = time.perf_counter()
        publisher.publish()
    timings = {
        "remux_s": remuxed - began,  # fetching the segments overlaps it
        "fetch_wait_s": prefetch.wait_seconds,  # the part of remux_s spent waiting for the next segment
        "fetch_work_s": prefetch.work_seconds,  # downloading and hashing, summed over the fetch threads
        "verify_s": verified - remuxed,  # the moov moved in front, the frame times checked, the checksum
        "publish_s": time.perf_counter() - verified,
    }
    return size, digest, timings


def _write_image(
    spec: WorkSpec, layout: WorkLayout, marker: SegmentMarker, output_uri: str
) -> tuple[int, str, dict[str, float]]:
    """An image work's output: its one (lossless) segment encoded in the output's format at ``output_image_quality``,
    published atomically as a video is. Its size, sha256 and timings."""
    from facefusion_provider.media.images import encode_output_image, read_picture
    from facefusion_provider.output.publish import OutputPublisher

    began = time.perf_counter()
    with scratch_folder("merge-") as folder:
        segment = _local_segment(layout, marker, folder)
        image = read_picture(segment, layout.segment_file(marker.file))
        _discard_download(folder, segment)
        data = encode_output_image(image, uri_extension(output_uri), spec.options.output_image_quality)
        encoded = time.perf_counter()
        with OutputPublisher(output_uri, folder, expected_bytes=len(data)) as publisher:
            with open(publisher.path, "wb") as handle:
                handle.write(data)
            publisher.finish()
            publisher.publish()
    timings = {"encode_s": encoded - began, "publish_s": time.perf_counter() - encoded}
    return len(data), hashlib.sha256(data).hexdigest(), timings


@contextlib.contextmanager
def _sound_source(spec: WorkSpec, target_uri: str, folder: str) -> Iterator[tuple[MediaSource, VideoProbe, str]]:
    """What the remux copies beside the segments' video, with the probe that lists its streams and its name: the work's
    own encoded sound (fetched, checked) where it has one, no stream at all with ``output_audio_volume`` 0, else the
    target's other streams."""
    own = encoded_sound_uri(spec.identity)
    if own is not None:
        from facefusion_provider.media.audio import sound_streams

        local = os.path.join(folder, posixpath.basename(urlparse(own).path))
        storage.get_file(own, local)
        with open(local, "rb") as handle:
            check_sound(spec.identity, handle.read())
        yield local, spec.probe.model_copy(update={"streams": sound_streams(local)}), own
        return
    with storage.open_input(target_uri) as target, _merge_original(spec, target_uri, target) as original:
        silent = spec.options.output_audio_volume == 0
        probe = spec.probe.model_copy(update={"streams": []}) if silent else spec.probe
        yield original, probe, target_uri


@contextlib.contextmanager
def _merge_original(spec: WorkSpec, target_uri: str, target: MediaSource) -> Iterator[MediaSource]:
    """The target as the merge reads it: a remote MP4/MOV through a ``RangeReader`` that fetches the samples of the
    streams the merge copies ahead of the demuxer, several at once, instead of every block of the file.

    Everything else (a local file, another container, a target without streams to copy) is ``target`` itself.
    """
    remote = None if isinstance(target, str) or not spec.probe.streams else target
    fetch = None if remote is None else storage.range_fetcher(target_uri, remote)
    planned = None if remote is None or fetch is None else copied_sample_ranges(remote)
    if remote is None or fetch is None or planned is None:
        yield target
        return
    ranges, size = planned
    pieces = storage.range_pieces(ranges)
    with Prefetch([functools.partial(fetch, *piece) for piece in pieces], storage.RANGE_FETCHES_AT_ONCE) as fetching:
        reader = storage.RangeReader(remote, pieces, fetching.results(), size)
        yield cast("IO[bytes]", reader)  # a raw binary file; typeshed's IO[bytes] is nominal
    logger.info(
        "%s: the merge took %d bytes from %d ranged reads ahead and %d bytes in %d reads outside them (file: %d bytes)",
        target_uri,
        reader.fetched_bytes,
        len(pieces),
        reader.fallback_bytes,
        reader.fallback_reads,
        size,
    )


def copied_sample_ranges(target: IO[bytes]) -> tuple[list[storage.ByteRange], int] | None:
    """Where the samples of the streams the merge copies (every track but the swapped video: audio, subtitle, data,
    another video) lie in ``target``, and the file's size; None when its moov does not describe it or no such sample
    exists. A demuxer that discards the other streams reads just these, seeking over every larger gap."""
    from facefusion_provider.media.mp4index import read_movie_index
    from facefusion_provider.media.mp4ranges import other_sample_ranges

    movie = read_movie_index(target)
    if movie is None:
        return None
    ranges = other_sample_ranges(movie, gap_bytes=storage.RANGE_GAP_BYTES, bytes_per_get=storage.RANGE_BYTES_PER_GET)
    return (ranges, movie.file_size) if ranges else None


def _verify_output(spec: WorkSpec, output_uri: str, output: MediaSource) -> None:
    """The written file holds exactly the work's frames at the original frame times (read back from its packets).

    Times are compared from the first frame on: a muxer may move the whole timeline (Matroska starts it at the earliest
    audio packet) and a coarser clock rounds each timestamp to its tick (Matroska counts milliseconds).
    """
    from facefusion_provider.media.probe import video_timestamps

    pts, time_base = video_timestamps(output, output_uri)
    source_base = Fraction(spec.probe.time_base)
    wanted = spec.probe.pts[spec.frame_start : spec.frame_end]
    expected = [(p - wanted[0]) * source_base for p in wanted]
    found = [(p - pts[0]) * time_base for p in pts]
    if len(found) != len(expected) or any(abs(a - b) > time_base for a, b in zip(found, expected, strict=False)):
        raise InvalidWorkError(
            f"{output_uri}: the merged video holds {len(pts)} frames, expected {len(expected)} at the target's "
            "frame times; it was not published"
        )


def committed_markers(spec: WorkSpec, layout: WorkLayout) -> list[SegmentMarker]:
    """Every segment's marker, in order; InvalidWorkError naming the segments that are not committed."""
    return _committed(spec, layout)[0]


def _committed(spec: WorkSpec, layout: WorkLayout) -> tuple[list[SegmentMarker], dict[str, int]]:
    """Every segment's marker, in order, and the size of every file in the segments' folder by name.

    One listing finds the markers; they are read side by side (two requests each on S3: the wait is the latency).
    """
    items = storage.list_files(layout.segments_dir)
    sizes = {item.uri.rsplit("/", 1)[-1]: item.size for item in items}
    listing = SegmentIncarnations.of((item.uri.rsplit("/", 1)[-1], item.modified) for item in items)
    listed = {index: layout.segment_file(name) for index, name in listing.markers.items()}
    missing = [segment.index for segment in spec.segments if segment.index not in listed]
    if missing and all(listing.current.get(index, 0) for index in missing):
        raise SegmentsRetired(missing)
    if missing:
        raise InvalidWorkError(
            f"work {spec.work_id}: segments {_ranges(missing)} of {len(spec.segments)} are not committed; "
            "run swap-span for them before merge (clear their swap_span tasks)"
        )
    reads = [functools.partial(_read_marker, listed[segment.index]) for segment in spec.segments]
    with Prefetch(reads, MARKER_READS_AT_ONCE) as reading:
        read = list(reading.results())
    unreadable = [
        Damage(segment.index, listing.current.get(segment.index, 0), "marker", f"{listed[segment.index]}: {marker}")
        for segment, marker in zip(spec.segments, read, strict=True)
        if isinstance(marker, str)
    ]
    if unreadable:
        raise SegmentsDamaged(unreadable)
    markers = [marker for marker in read if not isinstance(marker, str)]
    for segment, marker in zip(spec.segments, markers, strict=True):
        if marker.work_id != spec.work_id or (marker.start, marker.end) != (segment.start, segment.end):
            raise InvalidWorkError(
                f"{layout.segment_marker(segment.index)}: belongs to work {marker.work_id}, frames "
                f"{marker.start}-{marker.end - 1}, not to segment {segment.index} ({segment.label}) of {spec.work_id}"
            )
    return markers, sizes


class SegmentsRetired(InvalidWorkError):
    """Segments whose damaged commits were retired and not committed again since: the merge computes them."""

    def __init__(self, indexes: list[int]) -> None:
        super().__init__(f"segments {_ranges(indexes)}: their damaged commits were retired and not committed again")
        self.indexes = indexes


def _read_marker(uri: str) -> SegmentMarker | str:
    """The marker at ``uri``, or why it is not one (a damaged marker is healed like a damaged file)."""
    try:
        return SegmentMarker.model_validate_json(storage.read_bytes(uri))
    except ValueError as error:
        return f"not a segment marker ({str(error).splitlines()[0]})"


def _ranges(indexes: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``1-3, 7``."""
    runs: list[list[int]] = []
    for index in indexes:
        if runs and runs[-1][-1] == index - 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def _local_segment(layout: WorkLayout, marker: SegmentMarker, folder: str) -> str:
    """A local path of the committed segment file. A remote segment is downloaded into ``folder`` and hashed in the
    same read (its store may keep no checksum of it); a local one was hashed where it is before the merge began."""
    uri = layout.segment_file(marker.file)
    path = storage.local_path(uri)
    if path is not None:
        return path
    path = os.path.join(folder, marker.file)
    damage = digest_damage(layout, marker, storage.get_file_sha256(uri, path))
    if damage is not None:
        _discard_download(folder, path)
        raise SegmentsDamaged([damage])
    return path


def _discard_download(folder: str, path: str) -> None:
    """Deletes a segment that was downloaded into ``folder``; a segment read in place belongs to the work and stays."""
    if os.path.dirname(path) == folder:
        os.unlink(path)
