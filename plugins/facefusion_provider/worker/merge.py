"""``merge``: this run's output from the committed segments, with the target's audio, frame-exact and never encoded
again, published atomically, with its preview and its marker beside it.

An MP4 output is joined from indexes (``media.mp4join``): its moov is built from the moovs the segment markers carry
and the target's, and its media data is copied as it is (on S3 by S3 itself: ``storage.compose``). Anything else is
remuxed, verified, and published as it is written (``worker.publish``).

The output, its preview and its marker belong to the run that names them; the segments are the shared work's. One
listing finds every marker however many segments there are; the markers are read side by side and, for a remux, the
segment files fetched ahead.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import logging
import os
import posixpath
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import IO, TYPE_CHECKING, cast
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidJobError
from facefusion_provider.job.inputs import CLI_FIELDS, check_output_format
from facefusion_provider.job.layout import WorkLayout, output_marker_uri, parse_segment_name, preview_uri_of
from facefusion_provider.job.outputs import output_done
from facefusion_provider.job.records import JobSpec, OutputMarker, Segment, SegmentMarker
from facefusion_provider.worker import faults
from facefusion_provider.worker.prefetch import Prefetch
from facefusion_provider.worker.scratch import scratch_folder
from facefusion_provider.worker.segments import segment_label
from facefusion_provider.worker.work import checked_uris, load_job, work_layout

if TYPE_CHECKING:
    from facefusion_provider.media.containers import MediaSource
    from facefusion_provider.media.mp4join import MovieFile

logger = logging.getLogger(__name__)

MERGE_PREFETCH_VARIABLE = "FACEFUSION_MERGE_PREFETCH"
DEFAULT_MERGE_PREFETCH = 4  # segments the merge fetches at once, ahead of the one it remuxes
MARKER_READS_AT_ONCE = 32  # the merge's marker reads in flight at once, within the S3 client's connection pool
INDEX_JOIN_EXTENSIONS = frozenset({"mp4", "m4v"})  # outputs joined from the segments' indexes when they allow it
INDEX_READ_BYTES = 256 * 1024  # the ranged reads of a remote MP4's index: its head, then its moov


@dataclass(frozen=True)
class MergeResult:
    output_uri: str
    preview_uri: str
    frame_count: int
    skipped: bool  # the output already exists for this work
    timings: dict[str, float] = field(default_factory=dict)
    method: str = "remux"  # or "index": joined from the inputs' indexes, see ``media.mp4join``


def merge_prefetch() -> int:
    """How many segments the merge downloads (and checks) at once, ahead of the one it is remuxing."""
    return storage.positive_setting(MERGE_PREFETCH_VARIABLE, DEFAULT_MERGE_PREFETCH)


def merge(work_uri: str, target: str, output: str) -> MergeResult:
    """Write ``output`` from the work's committed segments and ``target``'s other streams."""
    faults.maybe_inject("merge")
    layout = work_layout(work_uri)
    uris = checked_uris([], target, output)
    assert uris.output_uri is not None
    done = output_done(layout.work_id, uris.output_uri)
    if done is not None:  # a repeat after cleanup removed the work: the output's marker is all there is to read
        logger.info("output %s is already done", uris.output_uri)
        return MergeResult(uris.output_uri, preview_uri_of(uris.output_uri), done.frame_count, skipped=True)
    spec = load_job(layout)
    check_output_format(uris.output_uri, spec.options, CLI_FIELDS)
    return merge_work(spec, layout, uris.target_uri, uris.output_uri)


def merge_work(spec: JobSpec, layout: WorkLayout, target_uri: str, output_uri: str) -> MergeResult:
    preview_uri = preview_uri_of(output_uri)
    done = output_done(spec.work_id, output_uri)
    if done is not None:
        logger.info("output %s is already done", output_uri)
        return MergeResult(output_uri, preview_uri, done.frame_count, skipped=True)
    from facefusion_provider.media.merge import PendingSegment, merge_segments
    from facefusion_provider.worker.publish import OutputPublisher

    began = time.perf_counter()
    markers, sizes = _committed(spec, layout)
    expected = spec.frame_end - spec.frame_start
    joined = _index_join(spec, layout, markers, sizes, target_uri, output_uri)
    if joined is not None:
        return _publish_joined(spec, layout, output_uri, joined, began)
    pending = [
        PendingSegment(marker.start, marker.end, segment_label(spec, segment))
        for marker, segment in zip(markers, spec.segments, strict=True)
    ]
    with (
        scratch_folder("merge-") as folder,
        OutputPublisher(output_uri, folder, expected_bytes=sum(m.size for m in markers)) as publisher,
    ):
        fetches = [functools.partial(_local_segment, layout, marker, folder) for marker in markers]
        markers_read = time.perf_counter()
        # The next segments download (and are checked) while the remux reads the current one; an S3 output's media
        # data uploads while it is written.
        with (
            Prefetch(fetches, merge_prefetch(), functools.partial(_discard_download, folder)) as prefetch,
            storage.open_input(target_uri) as target,
            _merge_original(spec, target_uri, target) as original,
        ):
            merge_segments(
                pending,
                original,
                spec.probe,
                publisher.path,
                name=target_uri,
                paths=prefetch.results(),
                moov_last=publisher.moov_last,
            )
        remuxed = time.perf_counter()
        published_file = publisher.finish()
        with published_file.open() as output:
            _verify_output(spec, output_uri, output)
        size, digest = published_file.size, published_file.sha256()
        verified = time.perf_counter()
        publisher.publish()
    published = time.perf_counter()
    storage.write_bytes_atomic(preview_uri, _preview(spec, layout))
    finished = time.perf_counter()
    timings = {
        "markers_s": markers_read - began,
        "remux_s": remuxed - markers_read,  # fetching the segments overlaps it
        "fetch_wait_s": prefetch.wait_seconds,  # the part of remux_s spent waiting for the next segment
        "fetch_work_s": prefetch.work_seconds,  # downloading and hashing, summed over the fetch threads
        "verify_s": verified - remuxed,  # the moov moved in front, the frame times checked, the checksum
        "publish_s": published - verified,
        "preview_s": finished - published,
        "total_s": finished - began,  # all but the marker's own write, which comes last: it says the output is done
    }
    rounded = {key: round(value, 3) for key, value in timings.items()}
    marker = OutputMarker(
        work_id=spec.work_id, output_uri=output_uri, frame_count=expected, sha256=digest, size=size, timings=rounded
    )
    storage.write_bytes_atomic(output_marker_uri(output_uri), marker.model_dump_json(indent=2).encode())
    logger.info(
        "merged %d frames from %d segments into %s (%.1f MB) in %.2f s by remuxing; preview %s",
        expected,
        len(markers),
        output_uri,
        size / 1e6,
        finished - began,
        preview_uri,
    )
    return MergeResult(output_uri, preview_uri, expected, skipped=False, timings=rounded)


@dataclass(frozen=True)
class _Joined:
    """An output planned from its inputs' indexes: the pieces to compose and what planning them took."""

    pieces: list[storage.Piece]
    segment_count: int
    began: float  # when the indexes began to be read (the markers had been read)
    index_s: float


def _index_join(  # noqa: PLR0917 - the merge's own state, passed on once
    spec: JobSpec,
    layout: WorkLayout,
    markers: list[SegmentMarker],
    sizes: dict[str, int],
    target_uri: str,
    output_uri: str,
) -> _Joined | None:
    """The output as ``media.mp4join`` plans it from the segments' and the target's moov boxes alone; None (with
    the reason logged) where it does not apply, and the merge remuxes."""
    from facefusion_provider.media.mp4index import UnsupportedLayoutError
    from facefusion_provider.media.mp4join import join_movies

    began = time.perf_counter()
    extension = posixpath.splitext(urlparse(output_uri).path)[1][1:].lower()
    whole = (spec.frame_start, spec.frame_end) == (0, spec.probe.frame_count)
    reason = (
        f"a .{extension} output is remuxed"
        if extension not in INDEX_JOIN_EXTENSIONS
        else "a trimmed output is remuxed"
        if not whole
        else "a rotated output is remuxed"
        if spec.probe.rotation
        else None
    )
    if reason is None:
        uris = [layout.segment_file(marker.file) for marker in markers] + [target_uri]
        reads = [
            functools.partial(_segment_movie, spec, layout, marker, segment, sizes.get(marker.file))
            for marker, segment in zip(markers, spec.segments, strict=True)
        ]
        reads.append(functools.partial(_movie_file, target_uri))
        with Prefetch(reads, MARKER_READS_AT_ONCE) as reading:
            movies = list(reading.results())
        files = [movie for movie in movies if movie is not None]
        try:
            if len(files) != len(movies):
                raise UnsupportedLayoutError("a segment or the target is not a plain MP4")
            joined = join_movies(
                files[:-1],
                files[-1],
                [marker.start for marker in markers],
                spec.probe.pts,
                Fraction(spec.probe.time_base),
            )
        except UnsupportedLayoutError as error:
            reason = str(error)
    if reason is not None:
        logger.info("%s: not joined from the indexes (%s); remuxing", output_uri, reason)
        return None
    ranges = list(joined.ranges)
    sound = [piece for piece in ranges if piece.source == len(markers)]
    stored = _stored_sound(layout, sum(piece.end - piece.start for piece in sound))
    pieces: list[storage.Piece] = [joined.head]
    if stored is not None and ranges[: len(sound)] == sound:  # the sound leads the media data: one stored file
        pieces.append(stored)
        ranges = ranges[len(sound) :]
    pieces += [storage.ByteSlice(uris[piece.source], piece.start, piece.end) for piece in ranges]
    return _Joined(pieces, len(markers), began=began, index_s=time.perf_counter() - began)


def _stored_sound(layout: WorkLayout, size: int) -> storage.ByteSlice | None:
    """The work's stored sound (``store_sound``) where it holds exactly the bytes the join copies from the target."""
    name = layout.sound_file.rsplit("/", 1)[-1]  # listed URIs may quote a local path otherwise than the layout
    found = [item for item in storage.list_files(layout.sound_file) if item.uri.rsplit("/", 1)[-1] == name]
    if not size or not found or found[0].size != size:
        return None
    return storage.ByteSlice(layout.sound_file, 0, size)


def store_sound(layout: WorkLayout, target_uri: str) -> int:
    """Stores the target's sound in the work, as a join lays it out, so that the merge reads one file instead of
    the target's many small chunks (a muxer interleaves them between frames: reaching them reads the whole target).
    A standing worker does this while the frames are worked; returns the bytes stored (0: nothing to store)."""
    from facefusion_provider.media.mp4index import UnsupportedLayoutError
    from facefusion_provider.media.mp4join import sound_ranges

    target = _movie_file(target_uri)
    try:
        ranges = [] if target is None else sound_ranges(target)
    except UnsupportedLayoutError:
        return 0
    if not ranges:
        return 0
    return storage.compose(layout.sound_file, [storage.ByteSlice(target_uri, a, b) for a, b in ranges]).size


def _movie_file(uri: str) -> MovieFile | None:
    """An input's moov and its parsed index, read by two small ranged reads on S3; None where it is not plain MP4."""
    from facefusion_provider.media.mp4index import parse_movie, read_moov
    from facefusion_provider.media.mp4join import MovieFile

    with storage.open_input(uri, block_size=INDEX_READ_BYTES) as handle:
        found = read_moov(handle)
    movie = None if found is None else parse_movie(*found)
    return None if found is None or movie is None else MovieFile(found[0], found[1], movie)


def _segment_movie(
    spec: JobSpec, layout: WorkLayout, marker: SegmentMarker, segment: Segment, listed_size: int | None
) -> MovieFile | None:
    """A committed segment's index, checked: the file's listed size, its label and, where the file is local (reading
    it costs no transfer), its checksum and its own moov. A remote file's index comes from its marker, where the
    commit stored it, and its bytes are never read here: S3 copies them."""
    from facefusion_provider.media.mp4index import parse_movie
    from facefusion_provider.media.mp4join import MovieFile, movie_comment

    uri = layout.segment_file(marker.file)
    path = storage.local_path(uri)
    if path is not None and _local_digest(uri, path) != marker.sha256:
        raise _corrupt(layout, marker)
    if listed_size is None:
        raise InvalidJobError(
            f"{uri}: the segment file is missing although its marker exists; delete the marker and rerun"
        )
    if marker.moov is None or path is not None:
        movie = _movie_file(uri)
    else:
        moov = base64.b64decode(marker.moov)
        index = parse_movie(moov, marker.size)
        movie = None if index is None else MovieFile(moov, marker.size, index)
    label = segment_label(spec, segment)
    if movie is not None and movie_comment(movie.moov) != label:
        raise InvalidJobError(f"{uri}: is labelled {movie_comment(movie.moov)!r}, expected {label!r}")
    if listed_size != marker.size or (movie is not None and movie.size != marker.size):
        raise InvalidJobError(
            f"{uri}: holds {listed_size} bytes, its marker {marker.size} (corrupt segment); "
            f"delete {layout.segment_marker(marker.index)} and rerun"
        )
    return movie


def _publish_joined(spec: JobSpec, layout: WorkLayout, output_uri: str, joined: _Joined, began: float) -> MergeResult:
    """Writes the joined output at once (S3 copying every large range itself), then its preview and marker."""
    preview_uri = preview_uri_of(output_uri)
    indexed = time.perf_counter()
    composed = storage.compose(output_uri, joined.pieces)
    published = time.perf_counter()
    storage.write_bytes_atomic(preview_uri, _preview(spec, layout))
    finished = time.perf_counter()
    timings = {
        "markers_s": joined.began - began,
        "index_s": joined.index_s,  # every segment's and the target's moov read, the output's moov built and checked
        "publish_s": published - indexed,  # written: S3 copies the large ranges itself
        "preview_s": finished - published,
        "total_s": finished - began,
        "copied_mb": composed.copied_bytes / 1e6,  # bytes the store copied without this process
        "moved_mb": composed.moved_bytes / 1e6,  # bytes read and written here (the head, the audio, small segments)
    }
    rounded = {key: round(value, 3) for key, value in timings.items()}
    expected = spec.frame_end - spec.frame_start
    marker = OutputMarker(
        work_id=spec.work_id,
        output_uri=output_uri,
        frame_count=expected,
        sha256=None,
        size=composed.size,
        timings=rounded,
        method="index",
    )
    storage.write_bytes_atomic(output_marker_uri(output_uri), marker.model_dump_json(indent=2).encode())
    logger.info(
        "joined %d frames from %d segments into %s (%.1f MB, %.1f MB of it copied by the store) from their indexes "
        "in %.2f s; preview %s",
        expected,
        joined.segment_count,
        output_uri,
        composed.size / 1e6,
        composed.copied_bytes / 1e6,
        finished - began,
        preview_uri,
    )
    return MergeResult(output_uri, preview_uri, expected, skipped=False, timings=rounded, method="index")


@contextlib.contextmanager
def _merge_original(spec: JobSpec, target_uri: str, target: MediaSource) -> Iterator[MediaSource]:
    """The target as the merge reads it: a remote MP4/MOV through a ``RangeReader`` that fetches the samples of the
    streams the merge copies ahead of the demuxer, several at once, instead of every block of the file.

    Everything else (a local file, another container, a target without streams to copy) is ``target`` itself.
    """
    remote = None if isinstance(target, str) or not spec.probe.streams else target
    fetch = None if remote is None else storage.range_fetcher(target_uri, remote)
    planned = None if remote is None or fetch is None else _copied_sample_ranges(remote)
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


def _copied_sample_ranges(target: IO[bytes]) -> tuple[list[storage.ByteRange], int] | None:
    """Where the samples of every track but the video ones lie in ``target``, as sorted ranges with the gaps FFmpeg
    reads through closed, and the file's size; None when its moov does not describe it or no such sample exists.

    These are the samples of the streams the merge copies (audio, subtitle, data; a track it cannot copy costs only its
    own bytes). A demuxer that discards the other streams reads just these, seeking over every larger gap. Only the
    largest gaps stay open where the file's size allows fewer GETs (``storage.RANGE_BYTES_PER_GET``).
    """
    import numpy as np

    from facefusion_provider.media.mp4index import read_movie_index

    movie = read_movie_index(target)
    tracks = [] if movie is None else [track for track in movie.tracks if track.handler != "vide"]
    if movie is None or not any(track.sample_count for track in tracks):
        return None
    offsets = np.concatenate([track.offsets for track in tracks])
    order = np.argsort(offsets, kind="stable")
    starts = offsets[order]
    ends = np.minimum(starts + np.concatenate([track.sizes for track in tracks])[order], movie.file_size)
    reach = np.maximum.accumulate(ends)  # the end of everything up to each sample
    gaps = starts[1:] - reach[:-1]
    most_breaks = max(0, movie.file_size // storage.RANGE_BYTES_PER_GET - 1)
    gap = storage.RANGE_GAP_BYTES
    if np.count_nonzero(gaps > gap) > most_breaks:
        gap = max(gap, int(np.partition(gaps, len(gaps) - most_breaks - 1)[len(gaps) - most_breaks - 1]))
    breaks = np.flatnonzero(gaps > gap) + 1
    firsts, lasts = np.append(0, breaks), np.append(breaks - 1, len(starts) - 1)
    ranges = [
        (start, end) for start, end in zip(starts[firsts].tolist(), reach[lasts].tolist(), strict=True) if start < end
    ]
    return (ranges, movie.file_size) if ranges else None


def _verify_output(spec: JobSpec, output_uri: str, output: MediaSource) -> None:
    """The written file holds exactly the job's frames at the original frame times (read back from its packets).

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
        raise InvalidJobError(
            f"{output_uri}: the merged video holds {len(pts)} frames, expected {len(expected)} at the target's "
            "frame times; it was not published"
        )


def _preview(spec: JobSpec, layout: WorkLayout) -> bytes:
    """The contact sheet from the thumbnail pairs that the segments stored for the preview frames they hold."""
    from facefusion_provider.media.preview import contact_sheet, preview_frames

    columns: list[MediaSource] = []
    for number in preview_frames(spec.frame_start, spec.frame_end):
        uri = layout.frame_preview(number)
        if storage.exists(uri):
            columns.append(io.BytesIO(storage.read_bytes(uri)))
        else:
            logger.warning("preview frame %d has no thumbnail (%s); the preview leaves it out", number, uri)
    if not columns:
        raise InvalidJobError(f"work {spec.work_id}: no preview frame has a thumbnail; rerun its segments")
    return contact_sheet(columns)


def committed_markers(spec: JobSpec, layout: WorkLayout) -> list[SegmentMarker]:
    """Every segment's marker, in order; InvalidJobError naming the segments that are not committed."""
    return _committed(spec, layout)[0]


def _committed(spec: JobSpec, layout: WorkLayout) -> tuple[list[SegmentMarker], dict[str, int]]:
    """Every segment's marker, in order, and the size of every file in the segments' folder by name.

    One listing finds the markers; they are read side by side (two requests each on S3: the wait is the latency).
    """
    items = storage.list_files(layout.segments_dir)
    sizes = {item.uri.rsplit("/", 1)[-1]: item.size for item in items}
    listed = {
        parsed[0]: item.uri
        for item in items
        if (parsed := parse_segment_name(item.uri.rsplit("/", 1)[-1])) is not None and parsed[1] == "marker"
    }
    missing = [segment.index for segment in spec.segments if segment.index not in listed]
    if missing:
        raise InvalidJobError(
            f"work {spec.work_id}: segments {_ranges(missing)} of {len(spec.segments)} are not committed; "
            "run swap-span for them before merge (clear their swap_span tasks)"
        )
    reads = [functools.partial(_read_marker, listed[segment.index]) for segment in spec.segments]
    with Prefetch(reads, MARKER_READS_AT_ONCE) as reading:
        markers = list(reading.results())
    for segment, marker in zip(spec.segments, markers, strict=True):
        if marker.work_id != spec.work_id or (marker.start, marker.end) != (segment.start, segment.end):
            raise InvalidJobError(
                f"{layout.segment_marker(segment.index)}: belongs to work {marker.work_id}, frames "
                f"{marker.start}-{marker.end - 1}, not to segment {segment.index} ({segment.label}) of {spec.work_id}"
            )
    return markers, sizes


def _read_marker(uri: str) -> SegmentMarker:
    try:
        return SegmentMarker.model_validate_json(storage.read_bytes(uri))
    except ValueError as error:
        raise InvalidJobError(f"{uri}: not a segment marker ({error}); delete it and rerun its span") from None


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
    """A local path of the committed segment file, its checksum verified against the marker.

    A remote segment is downloaded into ``folder`` and hashed in the same read; a local one is hashed where it is.
    """
    uri = layout.segment_file(marker.file)
    path = storage.local_path(uri)
    if path is None:
        path = os.path.join(folder, marker.file)
        digest = storage.get_file_sha256(uri, path)
    else:
        digest = _local_digest(uri, path)
    if digest != marker.sha256:
        _discard_download(folder, path)
        raise _corrupt(layout, marker)
    return path


def _local_digest(uri: str, path: str) -> str:
    if not os.path.isfile(path):
        raise InvalidJobError(
            f"{uri}: the segment file is missing although its marker exists; delete the marker and rerun"
        )
    return storage.file_sha256(path)


def _corrupt(layout: WorkLayout, marker: SegmentMarker) -> InvalidJobError:
    return InvalidJobError(
        f"{layout.segment_file(marker.file)}: checksum differs from its marker (corrupt segment); "
        f"delete {layout.segment_marker(marker.index)} and rerun"
    )


def _discard_download(folder: str, path: str) -> None:
    """Deletes a segment that was downloaded into ``folder``; a segment read in place belongs to the work and stays."""
    if os.path.dirname(path) == folder:
        os.unlink(path)
