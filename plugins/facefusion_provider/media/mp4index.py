"""Frame times of an MP4/MOV video read from its moov sample tables, never from the media data.

Demuxing every packet of a one-hour target reads the whole file (GBs, over the network for S3); the moov box of a
non-fragmented ISO BMFF file holds every sample's decode time, composition offset, size and file offset in about 1 MB
for an hour of 30 fps video. This module walks the top-level boxes by seeking (``mdat`` is never read), parses the
moov tables with numpy, and replays what FFmpeg's mov demuxer (PyAV ``packet.pts``) makes of them, edit list included.
It answers only for layouts it reproduces exactly; for anything else (not ISO BMFF, fragmented, compact sizes, edit
lists other than one plain edit, inconsistent tables) it returns None and the caller demuxes the packets instead.
"""

from __future__ import annotations

import contextlib
import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from facefusion_provider.exceptions import InvalidMediaError

if TYPE_CHECKING:
    from facefusion_provider.media.containers import MediaSource

Int64Array = npt.NDArray[np.int64]

# Top-level boxes an ISO BMFF / QuickTime file may start with; anything else is another format.
FIRST_BOX_KINDS = frozenset({"ftyp", "moov", "mdat", "free", "skip", "wide", "pnot", "uuid", "junk", "pdin"})
FRAGMENT_BOX_KINDS = frozenset({"moof", "styp", "sidx", "mfra"})
MAX_MOOV_BYTES = 512 * 1024 * 1024  # a moov this large is not a plain sample table: leave the file to the demuxer
MAX_SAMPLE_BYTES = 0x3FFFFFFF  # FFmpeg refuses to index a larger sample
MAX_SAMPLES = 2**26  # a day of 240 fps video is 21 M samples: larger counts are corrupt tables, not worth the memory
MAX_STTS_DELTA = 2**31 - 1  # FFmpeg reinterprets larger decode deltas as negative corrections
MAX_CTTS_MAGNITUDE = 2**28  # FFmpeg drops a ctts table holding larger offsets
UNIT_RATE = Fraction(1)


class UnsupportedLayoutError(Exception):
    """A layout whose FFmpeg timestamps this module does not reproduce: the caller must demux instead."""


@dataclass(frozen=True)
class EditEntry:
    """One ``elst`` entry: ``segment_duration`` in the movie timescale, ``media_time`` in the track's (-1: empty)."""

    segment_duration: int
    media_time: int
    rate: Fraction


@dataclass(frozen=True, eq=False)
class TrackIndex:
    """One ``trak``'s sample tables, expanded to one value per sample (in decode order)."""

    track_id: int
    handler: str  # "vide", "soun", ...
    timescale: int  # mdhd: ticks per second of the track's times
    movie_timescale: int  # mvhd: ticks per second of the edit list's segment durations
    decode_times: Int64Array  # from stts, starting at 0
    decode_durations: Int64Array  # the stts delta of each sample
    composition_offsets: Int64Array  # from ctts (version 0 or 1); zeros without ctts
    has_composition_offsets: bool
    sizes: Int64Array  # from stsz
    offsets: Int64Array  # from stsc + stco/co64: where each sample starts in the file
    chunk_sizes: Int64Array  # from stsc: samples in each chunk, in file order of the chunk offset table
    sync_samples: Int64Array | None  # stss sample numbers (1-based); None without stss: every sample is a sync sample
    other_sync_info: bool  # stps or 'rap ' sample groups also mark sync samples
    edits: tuple[EditEntry, ...]

    @property
    def sample_count(self) -> int:
        return len(self.sizes)


@dataclass(frozen=True, eq=False)
class MovieIndex:
    """The moov of a non-fragmented file: its tracks in file order, and the file's size."""

    tracks: tuple[TrackIndex, ...]
    chapter_track_ids: frozenset[int]  # tracks named by a 'tref/chap' box: FFmpeg shows their pictures as cover art
    file_size: int

    def track(self, track_id: int) -> TrackIndex | None:
        """The track FFmpeg numbers ``track_id`` (its stream ``id``); None unless exactly one has that id."""
        found = [track for track in self.tracks if track.track_id == track_id]
        return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class VideoFrameTimes:
    """What the demuxer would report for the video track: display-order pts, time base, last frame's duration."""

    pts: list[int]
    time_base: Fraction
    last_duration: int
    frame_count: int  # samples in the track, the number FFmpeg declares (shown frames plus edit-list hidden ones)


def video_frame_times(source: MediaSource, name: str) -> tuple[list[int], Fraction, int] | None:
    """Display-order pts, time base and last frame's duration of the video, as FFmpeg's demuxer reports them.

    None when the file is not a plain (non-fragmented) MP4/MOV whose timestamps this module reproduces exactly.
    Raises ``InvalidMediaError`` (naming ``name``) for a truncated file or frames that share a timestamp.
    """
    movie = read_movie_index(source)
    track = None if movie is None else first_video_track(movie)
    if movie is None or track is None:
        return None
    times = track_frame_times(movie, track, name)
    return None if times is None else (times.pts, times.time_base, times.last_duration)


def track_frame_times(movie: MovieIndex, track: TrackIndex, name: str) -> VideoFrameTimes | None:
    """What FFmpeg's demuxer reports for ``track``'s frames; None where this module would not be exact."""
    try:
        return _frame_times(movie, track, name)
    except UnsupportedLayoutError:
        return None


def read_movie_index(source: MediaSource) -> MovieIndex | None:
    """The sample tables of every track, read from the moov box alone; None for a layout this module does not handle."""
    found = read_moov(source)
    return None if found is None else parse_movie(*found)


def read_moov(source: MediaSource) -> tuple[bytes, int] | None:
    """The moov box's payload and the file's size; None when the file is not a plain (non-fragmented) ISO BMFF file."""
    with _binary_handle(source) as handle:
        start = handle.tell()
        try:
            handle.seek(0, io.SEEK_END)
            file_size = handle.tell()
            moov = _find_moov(handle, file_size)
        finally:
            handle.seek(start)
    return None if moov is None else (moov, file_size)


def parse_movie(moov: bytes, file_size: int) -> MovieIndex | None:
    """The sample tables of a moov payload (of a file of ``file_size`` bytes); None for a layout not handled here."""
    try:
        return _parse_moov(moov, file_size)
    except (UnsupportedLayoutError, struct.error, ValueError, IndexError):  # a malformed table
        return None


def first_video_track(movie: MovieIndex) -> TrackIndex | None:
    """The track FFmpeg makes the first video stream that is not a picture (chapter pictures are cover art)."""
    for track in movie.tracks:
        if track.handler == "vide" and track.track_id not in movie.chapter_track_ids:
            return track
    return None


def _frame_times(movie: MovieIndex, track: TrackIndex, name: str) -> VideoFrameTimes:
    """Replay FFmpeg's index building for ``track``; raises ``UnsupportedLayoutError`` where it would not be exact."""
    if track.sample_count == 0:
        raise UnsupportedLayoutError("no samples")
    _check_complete(track, movie.file_size, name)
    composition_times = track.decode_times + track.composition_offsets
    durations = track.decode_durations
    shown = np.ones(track.sample_count, dtype=bool)
    if track.edits:
        if any(other.sample_count == 0 for other in movie.tracks):
            raise UnsupportedLayoutError("an empty track turns FFmpeg's edit list handling off")
        shown, origin = _apply_edit(track, composition_times)
        pts = composition_times - origin
    else:
        pts = composition_times
    visible = pts[shown]
    last = int(np.argmax(visible))  # the first of the largest, as a demuxer keeping the first maximum would
    last_duration = int(durations[shown][last])
    ordered = np.sort(visible)
    duplicates = int(np.count_nonzero(ordered[1:] == ordered[:-1]))
    if duplicates:
        raise InvalidMediaError(f"{name}: {duplicates} video frames share a timestamp; frames cannot be told apart")
    return VideoFrameTimes(
        pts=ordered.tolist(),
        time_base=Fraction(1, track.timescale),
        last_duration=last_duration,
        frame_count=track.sample_count,
    )


def _check_complete(track: TrackIndex, file_size: int, name: str) -> None:
    """Every sample must lie inside the file: a cut download fails here, as it would while demuxing."""
    ends = track.offsets + track.sizes
    readable = int(np.count_nonzero(ends <= file_size))
    if readable < track.sample_count:
        raise InvalidMediaError(
            f"{name}: is truncated: the header lists {track.sample_count} frames, only {readable} can be read"
        )


def _apply_edit(track: TrackIndex, composition_times: Int64Array) -> tuple[npt.NDArray[np.bool_], int]:
    """Which samples one plain edit shows, and the time FFmpeg subtracts from their composition times.

    Mirrors ``mov_fix_index`` for a single edit with rate 1 and media_time >= 0 (what FFmpeg's own muxer writes for
    B-frame delay and for stream-copied cuts): frames outside [media_time, media_time + duration) are hidden, the
    first shown frame in decode order anchors the timeline, and the earliest shown frame is moved to 0 when it would
    start later. Layouts where FFmpeg would drop samples from its index instead of hiding them are refused.
    """
    if len(track.edits) != 1 or track.other_sync_info:
        raise UnsupportedLayoutError("edit list")
    edit = track.edits[0]
    if edit.media_time < 0 or edit.rate != UNIT_RATE or edit.segment_duration <= 0 or track.movie_timescale <= 0:
        raise UnsupportedLayoutError("edit list")
    start = edit.media_time
    length = _rescale(edit.segment_duration, track.timescale, track.movie_timescale)
    end = start + length
    decode_times = track.decode_times
    keyframes = _keyframe_mask(track)
    if not keyframes[0]:
        raise UnsupportedLayoutError("the first sample is not a keyframe")
    # FFmpeg starts its new index at the last keyframe decoded at or before the edit (with composition offsets: the
    # last such keyframe also shown at or before it, else the first sample); the samples before it are dropped.
    starts = np.flatnonzero(keyframes & (decode_times <= start))
    if track.has_composition_offsets:
        starts = starts[composition_times[starts] <= start]
    if len(starts) and starts[-1] != 0:
        raise UnsupportedLayoutError("the edit starts after a later keyframe: FFmpeg drops the samples before it")
    # ... and stops after the first keyframe (the second, with composition offsets) that reaches the edit's end.
    frame_durations = track.decode_durations.copy()
    frame_durations[-1] = length
    reaching = np.flatnonzero(keyframes & (composition_times + frame_durations >= end))
    stop_after = 2 if track.has_composition_offsets else 1
    if len(reaching) >= stop_after and reaching[stop_after - 1] < track.sample_count - 1:
        raise UnsupportedLayoutError("the edit ends before the last keyframe: FFmpeg drops the samples after it")
    shown = (composition_times >= start) & (composition_times < end)
    shown_indexes = np.flatnonzero(shown)
    if len(shown_indexes) == 0:
        raise UnsupportedLayoutError("the edit shows no frame")
    anchor = int(decode_times[shown_indexes[0]])
    return shown, anchor + _first_pts_shift(composition_times[shown] - anchor)


def _first_pts_shift(shown_pts: Int64Array) -> int:
    """How far FFmpeg moves shown frames back so that the first starts at 0 (``min_corrected_pts``).

    FFmpeg keeps a running minimum that a negative pts resets, so only the pts after the last negative one count.
    """
    negative = np.flatnonzero(shown_pts < 0)
    counted = shown_pts[negative[-1] + 1 :] if len(negative) else shown_pts
    return max(int(counted.min()), 0) if len(counted) else 0


def _keyframe_mask(track: TrackIndex) -> npt.NDArray[np.bool_]:
    if track.sync_samples is None:
        return np.ones(track.sample_count, dtype=bool)
    if len(track.sync_samples) == 0:
        raise UnsupportedLayoutError("empty stss")
    mask = np.zeros(track.sample_count, dtype=bool)
    mask[track.sync_samples - 1] = True
    return mask


def _rescale(value: int, numerator: int, denominator: int) -> int:
    """``av_rescale``: value * numerator / denominator, rounded to nearest, halves away from zero."""
    return (value * numerator + denominator // 2) // denominator


# --- reading the file ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _binary_handle(source: MediaSource) -> Iterator[IO[bytes]]:
    if isinstance(source, str):
        with open(source, "rb") as handle:
            yield handle
    else:
        yield source


def read_exactly(handle: IO[bytes], count: int) -> bytes:
    """``count`` bytes, or fewer only at the end of the file (a raw stream may return short reads)."""
    parts: list[bytes] = []
    remaining = count
    while remaining > 0:
        part = handle.read(remaining)
        if not part:
            break
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)


@dataclass(frozen=True)
class TopBox:
    """A top-level box: its kind, where it starts in the file, its header's size and its whole size."""

    kind: str
    position: int
    header_size: int
    size: int

    @property
    def end(self) -> int:
        return self.position + self.size


def top_level_boxes(handle: IO[bytes], file_size: int) -> Iterator[TopBox]:
    """The file's top-level boxes from their headers, skipping every payload by seeking.

    Raises ``UnsupportedLayoutError`` at a header that cannot be a box (cut short, smaller than itself).
    """
    position = 0
    while position + 8 <= file_size:
        handle.seek(position)
        header = read_exactly(handle, 16 if position + 16 <= file_size else 8)
        size, kind_bytes = struct.unpack_from(">I4s", header)
        header_size = 8
        if size == 1:
            if len(header) < 16:
                raise UnsupportedLayoutError("a 64-bit box size cut short")
            (size,) = struct.unpack_from(">Q", header, 8)
            header_size = 16
        elif size == 0:
            size = file_size - position
        if size < header_size:
            raise UnsupportedLayoutError("a box smaller than its header")
        yield TopBox(kind_bytes.decode("latin-1"), position, header_size, size)
        position += size


def _find_moov(handle: IO[bytes], file_size: int) -> bytes | None:
    """The moov payload, wherever it is; None when the file is not a plain ISO BMFF file or is fragmented."""
    moov: bytes | None = None
    try:
        for box in top_level_boxes(handle, file_size):
            if box.position == 0 and box.kind not in FIRST_BOX_KINDS:
                return None
            if box.kind in FRAGMENT_BOX_KINDS:
                return None
            if box.kind == "moov":
                if moov is not None or box.size > MAX_MOOV_BYTES or box.end > file_size:
                    return None
                handle.seek(box.position + box.header_size)
                moov = read_exactly(handle, box.size - box.header_size)
    except UnsupportedLayoutError:
        return None
    return moov


# --- parsing the moov --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Box:
    kind: str
    start: int  # payload start, in the moov buffer
    end: int
    header_start: int  # where its header starts


def child_boxes(data: bytes, start: int, end: int) -> list[Box]:
    boxes = []
    position = start
    while position + 8 <= end:
        size, kind_bytes = struct.unpack_from(">I4s", data, position)
        header_size = 8
        if size == 1:
            (size,) = struct.unpack_from(">Q", data, position + 8)
            header_size = 16
        elif size == 0:
            size = end - position
        if size < header_size or position + size > end:
            raise UnsupportedLayoutError("a box overruns its parent")
        boxes.append(Box(kind_bytes.decode("latin-1"), position + header_size, position + size, position))
        position += size
    return boxes


def _only(boxes: list[Box], kind: str) -> Box | None:
    found = [box for box in boxes if box.kind == kind]
    if len(found) > 1:
        raise UnsupportedLayoutError(f"more than one {kind}")
    return found[0] if found else None


def _required(boxes: list[Box], kind: str) -> Box:
    box = _only(boxes, kind)
    if box is None:
        raise UnsupportedLayoutError(f"no {kind}")
    return box


def _parse_moov(data: bytes, file_size: int) -> MovieIndex:
    boxes = child_boxes(data, 0, len(data))
    if any(box.kind in {"mvex", "cmov"} for box in boxes):
        raise UnsupportedLayoutError("fragmented or compressed movie")
    mvhd = _required(boxes, "mvhd")
    traks = [box for box in boxes if box.kind == "trak"]
    if traks and traks[0].start < mvhd.start:
        raise UnsupportedLayoutError(
            "tracks before the movie header: FFmpeg reads their edit lists without a timescale"
        )
    movie_timescale = _timescale(data, mvhd, long_fields=2)
    tracks = tuple(_parse_trak(data, trak, movie_timescale) for trak in traks)
    chapters: set[int] = set()
    for trak in traks:
        tref = _only(child_boxes(data, trak.start, trak.end), "tref")
        if tref is not None:
            for reference in child_boxes(data, tref.start, tref.end):
                if reference.kind == "chap":
                    chapters.update(_u32_array(data, reference.start, reference.end).tolist())
    return MovieIndex(tracks=tracks, chapter_track_ids=frozenset(chapters), file_size=file_size)


def _timescale(data: bytes, box: Box, long_fields: int) -> int:
    """The timescale of an mvhd/mdhd box: after ``long_fields`` 32- or 64-bit times (version 0 or 1)."""
    version = data[box.start]
    if version not in (0, 1):
        raise UnsupportedLayoutError("header version")
    field = 8 if version == 1 else 4
    (timescale,) = struct.unpack_from(">I", data, box.start + 4 + long_fields * field)
    return int(timescale)


def _parse_trak(data: bytes, trak: Box, movie_timescale: int) -> TrackIndex:
    boxes = child_boxes(data, trak.start, trak.end)
    tkhd = _required(boxes, "tkhd")
    version = data[tkhd.start]
    (track_id,) = struct.unpack_from(">I", data, tkhd.start + (20 if version == 1 else 12))
    mdia = child_boxes(data, *_span(_required(boxes, "mdia")))
    timescale = _timescale(data, _required(mdia, "mdhd"), long_fields=2)
    if timescale <= 0:
        raise UnsupportedLayoutError("no timescale")
    hdlr = _required(mdia, "hdlr")
    handler = data[hdlr.start + 8 : hdlr.start + 12].decode("latin-1")
    minf = child_boxes(data, *_span(_required(mdia, "minf")))
    stbl = child_boxes(data, *_span(_required(minf, "stbl")))
    if _only(stbl, "stz2") is not None:
        raise UnsupportedLayoutError("compact sample sizes")
    sizes = _sample_sizes(data, _required(stbl, "stsz"))
    sample_offsets, chunk_sizes = _sample_offsets(data, stbl, sizes)
    deltas = _per_sample(data, _required(stbl, "stts"), signed=False)
    if len(deltas) != len(sizes) or (len(deltas) and (deltas.min() <= 0 or deltas.max() > MAX_STTS_DELTA)):
        raise UnsupportedLayoutError("decode deltas")
    ctts = _only(stbl, "ctts")
    offsets = np.zeros(len(sizes), dtype=np.int64) if ctts is None else _per_sample(data, ctts, signed=True)
    if len(offsets) != len(sizes) or (len(offsets) and np.abs(offsets).max() >= MAX_CTTS_MAGNITUDE):
        raise UnsupportedLayoutError("composition offsets")
    stss = _only(stbl, "stss")
    edts = _only(boxes, "edts")
    return TrackIndex(
        track_id=int(track_id),
        handler=handler,
        timescale=timescale,
        movie_timescale=movie_timescale,
        decode_times=np.cumsum(deltas) - deltas,
        decode_durations=deltas,
        composition_offsets=offsets,
        has_composition_offsets=ctts is not None,
        sizes=sizes,
        offsets=sample_offsets,
        chunk_sizes=chunk_sizes,
        sync_samples=None if stss is None else _sync_samples(data, stss, len(sizes)),
        other_sync_info=_has_other_sync_info(data, stbl),
        edits=() if edts is None else _edits(data, child_boxes(data, edts.start, edts.end)),
    )


def box_bytes(kind: str, payload: bytes) -> bytes:
    """A box of ``kind`` around ``payload`` (a 32-bit size)."""
    return struct.pack(">I4s", 8 + len(payload), kind.encode("latin-1")) + payload


def _span(box: Box) -> tuple[int, int]:
    return box.start, box.end


def _full_box_entries(data: bytes, box: Box, entry_bytes: int, header_bytes: int = 8) -> tuple[int, int]:
    """The start of a full box's entry table and its entry count, checked against the box's size."""
    (count,) = struct.unpack_from(">I", data, box.start + header_bytes - 4)
    start = box.start + header_bytes
    if start + count * entry_bytes > box.end:
        raise UnsupportedLayoutError("a table overruns its box")
    return start, int(count)


def _u32_array(data: bytes, start: int, end: int) -> Int64Array:
    return np.frombuffer(data, dtype=">u4", count=(end - start) // 4, offset=start).astype(np.int64)


def _per_sample(data: bytes, box: Box, *, signed: bool) -> Int64Array:
    """An stts/ctts run table (count, value) expanded to one value per sample."""
    start, count = _full_box_entries(data, box, 8)
    table = np.frombuffer(data, dtype=">u4", count=count * 2, offset=start).reshape(count, 2)
    counts = table[:, 0].astype(np.int64)
    values = table[:, 1].view(">i4" if signed else ">u4").astype(np.int64)
    if len(counts) and (counts.min() <= 0 or counts.sum() > MAX_SAMPLES):
        raise UnsupportedLayoutError("sample runs")
    return np.repeat(values, counts)


def _sample_sizes(data: bytes, box: Box) -> Int64Array:
    (constant, count) = struct.unpack_from(">II", data, box.start + 4)
    if count > MAX_SAMPLES:
        raise UnsupportedLayoutError("sample count")
    if constant:
        sizes = np.full(count, constant, dtype=np.int64)
    else:
        start, count = _full_box_entries(data, box, 4, header_bytes=12)
        sizes = np.frombuffer(data, dtype=">u4", count=count, offset=start).astype(np.int64)
    if len(sizes) and (sizes.min() <= 0 or sizes.max() > MAX_SAMPLE_BYTES):
        raise UnsupportedLayoutError("sample sizes")
    return sizes


def _sample_offsets(data: bytes, stbl: list[Box], sizes: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Where each sample starts, and the samples of each chunk: chunks from stco/co64, stsc, sizes in between."""
    stco, co64 = _only(stbl, "stco"), _only(stbl, "co64")
    table, dtype = (stco, ">u4") if co64 is None else (co64, ">u8")
    if table is None or (stco is not None and co64 is not None):
        raise UnsupportedLayoutError("chunk offsets")
    start, count = _full_box_entries(data, table, np.dtype(dtype).itemsize)
    chunk_offsets = np.frombuffer(data, dtype=dtype, count=count, offset=start).astype(np.int64)
    start, count = _full_box_entries(data, _required(stbl, "stsc"), 12)
    if count == 0 and len(chunk_offsets) == 0 and len(sizes) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)  # an empty track
    stsc = np.frombuffer(data, dtype=">u4", count=count * 3, offset=start).reshape(count, 3).astype(np.int64)
    first_chunks, per_chunk = stsc[:, 0], stsc[:, 1]
    chunk_count = len(chunk_offsets)
    if (
        count == 0
        or first_chunks[0] != 1
        or np.any(np.diff(first_chunks) <= 0)
        or first_chunks[-1] > chunk_count
        or per_chunk.min() <= 0
    ):
        raise UnsupportedLayoutError("sample-to-chunk table")
    chunks_per_entry = np.diff(np.append(first_chunks, chunk_count + 1))
    samples_per_chunk = np.repeat(per_chunk, chunks_per_entry)
    if int(samples_per_chunk.sum()) != len(sizes):
        raise UnsupportedLayoutError("the chunks hold another number of samples")
    chunk_of_sample = np.repeat(np.arange(chunk_count), samples_per_chunk)
    before_sample = np.cumsum(sizes) - sizes  # bytes of all earlier samples
    first_sample_of_chunk = np.cumsum(samples_per_chunk) - samples_per_chunk
    within_chunk = before_sample - before_sample[first_sample_of_chunk][chunk_of_sample]
    offsets: Int64Array = chunk_offsets[chunk_of_sample] + within_chunk
    return offsets, samples_per_chunk.astype(np.int64)


def _sync_samples(data: bytes, box: Box, sample_count: int) -> Int64Array:
    start, count = _full_box_entries(data, box, 4)
    numbers = np.frombuffer(data, dtype=">u4", count=count, offset=start).astype(np.int64)
    if len(numbers) and (numbers[0] < 1 or numbers[-1] > sample_count or np.any(np.diff(numbers) <= 0)):
        raise UnsupportedLayoutError("sync sample table")
    return numbers


def _has_other_sync_info(data: bytes, stbl: list[Box]) -> bool:
    if _only(stbl, "stps") is not None:
        return True
    return any(box.kind == "sbgp" and data[box.start + 4 : box.start + 8] == b"rap " for box in stbl)


def _edits(data: bytes, edts: list[Box]) -> tuple[EditEntry, ...]:
    elst = _only(edts, "elst")
    if elst is None:
        return ()
    version = data[elst.start]
    if version not in (0, 1):
        raise UnsupportedLayoutError("edit list version")
    entry_format = ">QqI" if version == 1 else ">IiI"
    start, count = _full_box_entries(data, elst, struct.calcsize(entry_format))
    entries = []
    for duration, media_time, rate in struct.iter_unpack(
        entry_format, data[start : start + count * struct.calcsize(entry_format)]
    ):
        entries.append(EditEntry(segment_duration=duration, media_time=media_time, rate=Fraction(rate, 65536)))
    return tuple(entries)
