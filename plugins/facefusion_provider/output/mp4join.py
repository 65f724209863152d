"""Join segment MP4s into one MP4 from their indexes alone: the output's moov is built from the segments' and the
target's sample tables, and its media data is a list of byte ranges of those files, never demuxed or rewritten.

The joined file is ``ftyp, moov, mdat``; the media data holds the target's audio chunks first, then each segment's
video data in order, so that every segment is one range (on S3, one server-side part copy). The video keeps every
segment's samples, decode deltas, composition offsets and keyframes, moved onto the target's frame times; the audio
keeps the target's tables, with only its chunks moved. The plan checks its own moov: the frame times FFmpeg would
read from it (``mp4index``) must be the target's, or it raises ``UnsupportedLayoutError`` and the caller remuxes.
"""

from __future__ import annotations

import contextlib
import functools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import ParamSpec

import numpy as np
import numpy.typing as npt

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.mp4index import (
    Box,
    Int64Array,
    MovieIndex,
    TrackIndex,
    UnsupportedLayoutError,
    box_bytes,
    child_boxes,
    first_video_track,
    parse_movie,
    track_frame_times,
)
from facefusion_provider.media.mp4ranges import MediaRange, chunk_ranges, coalesced

# The sample-table boxes a segment's video track may hold: all of them are rebuilt here (sample descriptions copied).
SEGMENT_TABLES = frozenset({"stsd", "stts", "ctts", "stss", "stsz", "stsc", "stco", "co64"})
CHUNK_TABLES = frozenset({"stsc", "stco", "co64"})  # what moving an audio track's chunks rewrites
VISUAL_ENTRY_BYTES = 78  # a visual sample entry's fields before its child boxes (ISO 14496-12 12.1.3)
MDAT_HEADER_BYTES = 16  # a 64-bit mdat header
UNIT_RATE = 0x00010000  # an edit's media rate 1.0, in 16.16 fixed point
# Sound whose samples the moov sizes exactly. QuickTime's PCM entries claim 1-byte samples that FFmpeg resizes itself,
# so copying by their tables would cut every chunk short: such a target is remuxed.
COPIED_SOUND = frozenset({"mp4a", "ac-3", "ec-3", "Opus", "fLaC", "alac"})
COMMENT_TAG = "\xa9cmt"  # the iTunes-style comment item, as latin-1 box kinds read


@dataclass(frozen=True)
class MovieFile:
    """A file as the join reads it: its moov payload, its size and the index parsed from that moov."""

    moov: bytes
    size: int
    index: MovieIndex


@dataclass(frozen=True)
class JoinedMovie:
    """The output: ``head`` (ftyp, moov, mdat's header), then ``ranges`` in order."""

    head: bytes
    ranges: tuple[MediaRange, ...]

    @property
    def size(self) -> int:
        return len(self.head) + sum(piece.end - piece.start for piece in self.ranges)


@dataclass(frozen=True)
class _Tables:
    """A track's sample tables, one value per sample (chunks: samples per chunk and where each chunk starts)."""

    deltas: Int64Array
    composition_offsets: Int64Array
    sizes: Int64Array
    sync: npt.NDArray[np.bool_] | None  # keyframes; None when every sample is one
    chunk_sizes: Int64Array
    chunk_offsets: Int64Array  # relative to the media data's start


_P = ParamSpec("_P")


def _refused_unless_tables_fit(join: Callable[_P, JoinedMovie]) -> Callable[_P, JoinedMovie]:
    """``join``, its errors from tables that do not fit together raised as ``UnsupportedLayoutError`` (a remux)."""

    @functools.wraps(join)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> JoinedMovie:
        try:
            return join(*args, **kwargs)
        except (InvalidMediaError, struct.error, IndexError, ValueError) as error:
            raise UnsupportedLayoutError(f"the indexes do not join: {error}") from error

    return checked


@_refused_unless_tables_fit
def join_movies(
    segments: Sequence[MovieFile],
    target: MovieFile,
    segment_starts: Sequence[int],
    frame_pts: Sequence[int],
    time_base: Fraction,
) -> JoinedMovie:
    """The joined output of ``segments`` (whose first frames are ``segment_starts`` of the target, in order, together
    every frame of it) and ``target``'s audio; ``frame_pts`` are the target's frame times in ``time_base``.

    Raises ``UnsupportedLayoutError`` naming what this join does not handle (the caller remuxes instead).
    """
    if not segments or len(segment_starts) != len(segments):
        raise UnsupportedLayoutError("no segments")
    videos = [_segment_video(segment, number) for number, segment in enumerate(segments)]
    timescale = videos[0].timescale
    if any(video.timescale != timescale for video in videos):
        raise UnsupportedLayoutError("the segments' video time scales differ")
    description = _sample_description(segments[0], videos[0])
    if any(_sample_description(segment, video) != description for segment, video in zip(segments, videos, strict=True)):
        raise UnsupportedLayoutError("the segments' sample descriptions differ (another encoder setting)")
    ticks = _ticks(frame_pts, time_base, timescale)
    if ticks[0] != 0 or segment_starts[0] != 0:
        raise UnsupportedLayoutError("the output does not start at the target's first frame at time 0")
    audio = _audio_tracks(target)

    def layout(base: int) -> tuple[bytes, list[MediaRange]]:
        ranges: list[MediaRange] = []
        audio_tables = []
        position = base
        for track in audio:
            tables, position = _moved_audio(track, position, len(segments), ranges)
            audio_tables.append(tables)
        video_tables = _joined_video(videos, ticks, segment_starts, position, ranges)
        moved_audio = list(zip(audio, audio_tables, strict=True))
        moov = _moov(
            segments[0],
            target,
            video=video_tables,
            first_delay=_media_time(videos[0]),
            timescale=timescale,
            audio=moved_audio,
        )
        return moov, ranges

    moov_payload, _ = layout(0)
    ftyp = _ftyp(description)
    head_size = len(ftyp) + 8 + len(moov_payload) + MDAT_HEADER_BYTES
    moov_payload, ranges = layout(head_size)
    media_bytes = sum(piece.end - piece.start for piece in ranges)
    head = ftyp + box_bytes("moov", moov_payload) + struct.pack(">I4sQ", 1, b"mdat", MDAT_HEADER_BYTES + media_bytes)
    if len(head) != head_size:
        raise UnsupportedLayoutError("the head changed size between its two layouts")
    _check_frame_times(moov_payload, len(head) + media_bytes, ticks)
    return JoinedMovie(head, tuple(coalesced(ranges)))


def _segment_video(segment: MovieFile, number: int) -> TrackIndex:
    tracks = segment.index.tracks
    if len(tracks) != 1 or tracks[0].handler != "vide" or tracks[0].sample_count == 0:
        raise UnsupportedLayoutError(f"segment {number} is not one video track")
    track = tracks[0]
    _media_time(track)
    expected = track.offsets[0] + np.cumsum(track.sizes) - track.sizes
    if not np.array_equal(track.offsets, expected):
        raise UnsupportedLayoutError(f"segment {number}'s video data is not one contiguous range")
    return track


def _media_time(track: TrackIndex) -> int:
    """Where the track's one edit starts in its media (0 without an edit list)."""
    if not track.edits:
        return 0
    if len(track.edits) != 1 or track.edits[0].media_time < 0 or track.edits[0].rate != 1:
        raise UnsupportedLayoutError("an edit list other than one plain edit")
    return track.edits[0].media_time


def _ticks(frame_pts: Sequence[int], time_base: Fraction, timescale: int) -> Int64Array:
    """The frame times in ticks of ``1/timescale`` s, exactly: in 64-bit integers (an hour's frames in milliseconds,
    not a Fraction each) where the products fit them, else in Python's."""
    scale = time_base * timescale
    pts = np.asarray(frame_pts, dtype=np.int64)
    if pts.size and int(np.abs(pts).max()) > np.iinfo(np.int64).max // scale.numerator:
        exact = [value * scale for value in frame_pts]
        whole = all(value.denominator == 1 for value in exact)
        ticks = np.array([int(value) for value in exact] if whole else [], dtype=np.int64)
    else:
        scaled = pts * scale.numerator
        whole = bool(np.all(scaled % scale.denominator == 0))
        ticks = scaled // scale.denominator
    if not whole:
        raise UnsupportedLayoutError(f"the target's frame times are not whole ticks of 1/{timescale} s")
    return ticks


def _joined_video(
    videos: Sequence[TrackIndex], ticks: Int64Array, starts: Sequence[int], position: int, ranges: list[MediaRange]
) -> _Tables:
    """The video tables of the segments one after another, each moved to its first frame's time; appends their
    media ranges from ``position`` on."""
    first_delay = _media_time(videos[0])
    decode, offsets, sync, chunk_offsets = [], [], [], []
    for number, (video, start) in enumerate(zip(videos, starts, strict=True)):
        decode.append(video.decode_times + int(ticks[start]) + first_delay - _media_time(video))
        offsets.append(video.composition_offsets)
        mask = np.ones(video.sample_count, dtype=bool)
        if video.sync_samples is not None:
            mask[:] = False
            mask[video.sync_samples - 1] = True
        sync.append(mask)
        data_start, data_end = int(video.offsets[0]), int(video.offsets[-1] + video.sizes[-1])
        chunk_firsts = np.cumsum(video.chunk_sizes) - video.chunk_sizes
        chunk_offsets.append(video.offsets[chunk_firsts] - data_start + position)
        ranges.append(MediaRange(number, data_start, data_end))
        position += data_end - data_start
    decode_times = np.concatenate(decode)
    joins = np.diff(decode_times)
    if np.any(joins <= 0):
        raise UnsupportedLayoutError("a segment would start decoding before the previous one ends")
    all_sync = np.concatenate(sync)
    return _Tables(
        deltas=np.append(joins, videos[-1].decode_durations[-1]),
        composition_offsets=np.concatenate(offsets),
        sizes=np.concatenate([video.sizes for video in videos]),
        sync=None if all_sync.all() else all_sync,
        chunk_sizes=np.concatenate([video.chunk_sizes for video in videos]),
        chunk_offsets=np.concatenate(chunk_offsets),
    )


def _audio_tracks(target: MovieFile) -> list[TrackIndex]:
    """The target's tracks the output copies: every one but its video, all of them sound."""
    movie = target.index
    video = first_video_track(movie)
    others = [track for track in movie.tracks if track is not video]
    if movie.chapter_track_ids or any(track.handler != "soun" for track in others):
        raise UnsupportedLayoutError("the target has tracks other than its video and sound")
    if any(track.sample_count == 0 for track in others):
        raise UnsupportedLayoutError("the target has an empty sound track")
    traks = {
        _track_id(target.moov, box): box for box in child_boxes(target.moov, 0, len(target.moov)) if box.kind == "trak"
    }
    for track in others:
        kind, version = _sound_entry(target.moov, traks[track.track_id])
        # A QuickTime sound description (version 1 or 2) is not an ISO one: an MP4 must describe the sound anew.
        if kind not in COPIED_SOUND or version != 0:
            raise UnsupportedLayoutError(
                f"the target's {kind.strip()} sound (description version {version}) is remuxed"
            )
    return others


def _sound_entry(data: bytes, trak: Box) -> tuple[str, int]:
    """The kind and version of a sound track's one sample description."""
    mdia = _one(child_boxes(data, trak.start, trak.end), "mdia")
    minf = _one(child_boxes(data, mdia.start, mdia.end), "minf")
    stbl = _one(child_boxes(data, minf.start, minf.end), "stbl")
    stsd = _one(child_boxes(data, stbl.start, stbl.end), "stsd")
    (count,) = struct.unpack_from(">I", data, stsd.start + 4)
    entries = child_boxes(data, stsd.start + 8, stsd.end)
    if count != 1 or len(entries) != 1:
        raise UnsupportedLayoutError("the target's sound has more than one sample description")
    return entries[0].kind, int(struct.unpack_from(">H", data, entries[0].start + 8)[0])


def sound_ranges(target: MovieFile) -> list[tuple[int, int]]:
    """The byte ranges of ``target`` that a join copies, in the order it lays them out (the sound, track by track and
    chunk by chunk; adjacent ones as one): a work may store them as one file ahead of the merge."""
    pieces = []
    for track in _audio_tracks(target):
        starts, ends = chunk_ranges(track)
        pieces += [MediaRange(0, int(a), int(b)) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    return [(piece.start, piece.end) for piece in coalesced(pieces)]


def _moved_audio(track: TrackIndex, position: int, source: int, ranges: list[MediaRange]) -> tuple[_Tables, int]:
    """``track``'s chunks laid out one after another from ``position``; appends their ranges of the target."""
    starts, ends = chunk_ranges(track)
    lengths = ends - starts
    moved = position + np.cumsum(lengths) - lengths
    ranges.extend(MediaRange(source, int(a), int(b)) for a, b in zip(starts.tolist(), ends.tolist(), strict=True))
    tables = _Tables(
        deltas=track.decode_durations,
        composition_offsets=track.composition_offsets,
        sizes=track.sizes,
        sync=None,
        chunk_sizes=track.chunk_sizes,
        chunk_offsets=moved,
    )
    return tables, position + int(lengths.sum())


# --- writing the moov ------------------------------------------------------------------------------------------


def _moov(
    segment: MovieFile,
    target: MovieFile,
    *,
    video: _Tables,
    first_delay: int,
    timescale: int,
    audio: Sequence[tuple[TrackIndex, _Tables]],
) -> bytes:
    """The target's movie header and metadata, the joined video track (1), then the sound tracks (2, 3, ...)."""
    data = target.moov
    boxes = child_boxes(data, 0, len(data))
    mvhd = _one(boxes, "mvhd")
    movie_timescale = _header_timescale(data, mvhd)
    shown_end = int(np.max(_decode_times(video.deltas) + video.composition_offsets + video.deltas)) - first_delay
    video_duration = -(-shown_end * movie_timescale // timescale)
    traks = [_video_trak(segment, video, duration=video_duration, media_time=first_delay)]
    durations = [video_duration]
    target_traks = {_track_id(data, box): box for box in boxes if box.kind == "trak"}
    for number, (track, tables) in enumerate(audio, start=2):
        trak = target_traks[track.track_id]
        traks.append(_audio_trak(data, trak, tables, number))
        durations.append(_tkhd_duration(data, _one(child_boxes(data, trak.start, trak.end), "tkhd")))
    header = _patched_mvhd(data, mvhd, max(durations), len(traks) + 1)
    metadata = [data[box.header_start : box.end] for box in boxes if box.kind in {"udta", "meta"}]
    return header + b"".join(traks) + b"".join(metadata)


def _video_trak(segment: MovieFile, tables: _Tables, *, duration: int, media_time: int) -> bytes:
    """Segment 0's video track as track 1, with the joined tables and one edit from ``media_time`` on."""
    data = segment.moov
    media_duration = int(tables.deltas.sum())
    trak = _one(child_boxes(data, 0, len(data)), "trak")
    parts = []
    for child in child_boxes(data, trak.start, trak.end):
        if child.kind == "tkhd":
            parts.append(_patched_tkhd(data, child, 1, duration))
            elst = struct.pack(">4sI", bytes(4), 1) + struct.pack(">IiI", duration, media_time, UNIT_RATE)
            parts.append(box_bytes("edts", box_bytes("elst", elst)))
        elif child.kind == "mdia":
            parts.append(_rebuilt(data, child, lambda box: _video_media_child(data, box, tables, media_duration)))
        elif child.kind not in {"edts", "udta"}:
            raise UnsupportedLayoutError(f"a {child.kind} box in a segment's track")
    return box_bytes("trak", b"".join(parts))


def _video_media_child(data: bytes, box: Box, tables: _Tables, media_duration: int) -> bytes:
    if box.kind == "mdhd":
        return _patched_duration(data, box, "mdhd", media_duration)
    if box.kind == "minf":
        return _rebuilt(data, box, lambda child: _video_info_child(data, child, tables))
    return data[box.header_start : box.end]


def _video_info_child(data: bytes, box: Box, tables: _Tables) -> bytes:
    if box.kind != "stbl":
        return data[box.header_start : box.end]
    children = child_boxes(data, box.start, box.end)
    unknown = {child.kind for child in children} - SEGMENT_TABLES
    if unknown:
        raise UnsupportedLayoutError(f"a segment's sample table holds {', '.join(sorted(unknown))}")
    stsd = _one(children, "stsd")
    return box_bytes("stbl", _without_bitrate(data, stsd) + _sample_tables(tables))


def _audio_trak(data: bytes, trak: Box, tables: _Tables, track_id: int) -> bytes:
    def child(box: Box) -> bytes:
        if box.kind == "tkhd":
            return _patched_tkhd(data, box, track_id, _tkhd_duration(data, box))
        if box.kind == "tref":
            raise UnsupportedLayoutError("a sound track refers to other tracks")
        if box.kind in {"mdia", "minf"}:
            return _rebuilt(data, box, child)
        if box.kind == "stbl":
            return _audio_sample_table(data, box, tables)
        return data[box.header_start : box.end]

    return _rebuilt(data, trak, child)


def _audio_sample_table(data: bytes, stbl: Box, tables: _Tables) -> bytes:
    """A sound track's sample table (its description checked by ``_audio_tracks``) with its chunks moved."""
    children = child_boxes(data, stbl.start, stbl.end)
    kept = [data[box.header_start : box.end] for box in children if box.kind not in CHUNK_TABLES]
    return box_bytes("stbl", b"".join(kept) + _chunk_tables(tables))


def _rebuilt(data: bytes, box: Box, child: Callable[[Box], bytes]) -> bytes:
    """``box`` with each child box replaced by what ``child`` makes of it."""
    return box_bytes(box.kind, b"".join(child(part) for part in child_boxes(data, box.start, box.end)))


def _sample_tables(tables: _Tables) -> bytes:
    deltas = _runs(tables.deltas)
    parts = [box_bytes("stts", _run_table(*deltas, signed=False))]
    if np.any(tables.composition_offsets):
        negative = bool(np.any(tables.composition_offsets < 0))
        parts.append(box_bytes("ctts", _run_table(*_runs(tables.composition_offsets), signed=negative)))
    if tables.sync is not None:
        numbers = (np.flatnonzero(tables.sync) + 1).astype(">u4")
        parts.append(box_bytes("stss", struct.pack(">4sI", bytes(4), len(numbers)) + numbers.tobytes()))
    sizes = tables.sizes.astype(">u4")
    parts.append(box_bytes("stsz", struct.pack(">4sII", bytes(4), 0, len(sizes)) + sizes.tobytes()))
    return b"".join(parts) + _chunk_tables(tables)


def _chunk_tables(tables: _Tables) -> bytes:
    """stsc (runs of samples per chunk, one sample description) and co64."""
    counts, values = _runs(tables.chunk_sizes)
    first_chunks = np.cumsum(counts) - counts + 1
    entries = np.column_stack((first_chunks, values, np.ones_like(values))).astype(">u4")
    stsc = struct.pack(">4sI", bytes(4), len(entries)) + entries.tobytes()
    offsets = tables.chunk_offsets.astype(">u8")
    co64 = struct.pack(">4sI", bytes(4), len(offsets)) + offsets.tobytes()
    return box_bytes("stsc", stsc) + box_bytes("co64", co64)


def _runs(values: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Run-length ``values``: the length of each run and its value."""
    starts = np.append(0, np.flatnonzero(np.diff(values)) + 1)
    return np.diff(np.append(starts, len(values))), values[starts]


def _run_table(counts: Int64Array, values: Int64Array, *, signed: bool) -> bytes:
    """An stts/ctts payload: version 1 where the values are signed (ctts offsets below zero)."""
    pairs = np.column_stack((counts.astype(">u4"), values.astype(">i4" if signed else ">u4").view(">u4")))
    version = b"\x01\x00\x00\x00" if signed else bytes(4)
    return version + struct.pack(">I", len(counts)) + pairs.astype(">u4").tobytes()


def _decode_times(deltas: Int64Array) -> Int64Array:
    return np.cumsum(deltas) - deltas


def _sample_description(segment: MovieFile, track: TrackIndex) -> bytes:
    """The segment's sample description without its bitrate box (which differs from segment to segment)."""
    data = segment.moov
    trak = _one(child_boxes(data, 0, len(data)), "trak")
    mdia = _one(child_boxes(data, trak.start, trak.end), "mdia")
    minf = _one(child_boxes(data, mdia.start, mdia.end), "minf")
    stbl = _one(child_boxes(data, minf.start, minf.end), "stbl")
    return _without_bitrate(data, _one(child_boxes(data, stbl.start, stbl.end), "stsd"))


def _without_bitrate(data: bytes, stsd: Box) -> bytes:
    """``stsd`` with one visual sample entry whose ``btrt`` child is left out."""
    (count,) = struct.unpack_from(">I", data, stsd.start + 4)
    entries = child_boxes(data, stsd.start + 8, stsd.end)
    if count != 1 or len(entries) != 1:
        raise UnsupportedLayoutError("a segment has more than one sample description")
    entry = entries[0]
    fields = data[entry.start : entry.start + VISUAL_ENTRY_BYTES]
    children = child_boxes(data, entry.start + VISUAL_ENTRY_BYTES, entry.end)
    kept = b"".join(data[child.header_start : child.end] for child in children if child.kind != "btrt")
    return box_bytes("stsd", data[stsd.start : stsd.start + 8] + box_bytes(entry.kind, fields + kept))


def _ftyp(description: bytes) -> bytes:
    entry = description[20:24]  # stsd's header 8, version and count 8, the entry's size 4, then its kind
    brands = [b"isom", b"iso2", *([entry] if entry == b"avc1" else []), b"mp41"]
    return box_bytes("ftyp", b"isom" + struct.pack(">I", 512) + b"".join(brands))


# --- header fields (version 0: 32-bit times, version 1: 64-bit) ------------------------------------------------


def _one(boxes: list[Box], kind: str) -> Box:
    found = [box for box in boxes if box.kind == kind]
    if len(found) != 1:
        raise UnsupportedLayoutError(f"{len(found)} {kind} boxes where one belongs")
    return found[0]


def _header_timescale(data: bytes, box: Box) -> int:
    version = data[box.start]
    return int(struct.unpack_from(">I", data, box.start + (20 if version == 1 else 12))[0])


def _patched_duration(data: bytes, box: Box, kind: str, duration: int) -> bytes:
    """An mvhd/mdhd box with another duration (after creation, modification and timescale)."""
    version = data[box.start]
    payload = bytearray(data[box.start : box.end])
    _put(payload, 24 if version == 1 else 16, version, duration, kind)
    return box_bytes(kind, bytes(payload))


def _patched_mvhd(data: bytes, box: Box, duration: int, next_track_id: int) -> bytes:
    patched = bytearray(_patched_duration(data, box, "mvhd", duration))
    struct.pack_into(">I", patched, len(patched) - 4, next_track_id)
    return bytes(patched)


def _track_id(data: bytes, trak: Box) -> int:
    tkhd = _one(child_boxes(data, trak.start, trak.end), "tkhd")
    return int(struct.unpack_from(">I", data, tkhd.start + (20 if data[tkhd.start] == 1 else 12))[0])


def _tkhd_duration(data: bytes, tkhd: Box) -> int:
    version = data[tkhd.start]
    return int(struct.unpack_from(">Q" if version == 1 else ">I", data, tkhd.start + (28 if version == 1 else 20))[0])


def _patched_tkhd(data: bytes, tkhd: Box, track_id: int, duration: int) -> bytes:
    version = data[tkhd.start]
    payload = bytearray(data[tkhd.start : tkhd.end])
    struct.pack_into(">I", payload, 20 if version == 1 else 12, track_id)
    _put(payload, 28 if version == 1 else 20, version, duration, "tkhd")
    return box_bytes("tkhd", bytes(payload))


def _put(payload: bytearray, offset: int, version: int, value: int, kind: str) -> None:
    if version != 1 and value > 0xFFFFFFFF:
        raise UnsupportedLayoutError(f"a duration too long for a version 0 {kind}")
    struct.pack_into(">Q" if version == 1 else ">I", payload, offset, value)


def _check_frame_times(moov: bytes, file_size: int, ticks: Int64Array) -> None:
    """What FFmpeg's demuxer would read from the joined moov: the target's frame times, or the join is refused."""
    movie = parse_movie(moov, file_size)
    video = None if movie is None else first_video_track(movie)
    times = None if movie is None or video is None else track_frame_times(movie, video, "the joined output")
    if times is None or times.pts != ticks.tolist():
        raise UnsupportedLayoutError("the joined index would not give the target's frame times")


def movie_comment(moov: bytes) -> str | None:
    """The ``comment`` tag FFmpeg's MP4 muxer writes (``udta/meta/ilst/©cmt``), read from a moov payload."""
    with contextlib.suppress(UnsupportedLayoutError, struct.error, UnicodeDecodeError):
        for udta in (box for box in child_boxes(moov, 0, len(moov)) if box.kind == "udta"):
            for meta in (box for box in child_boxes(moov, udta.start, udta.end) if box.kind == "meta"):
                for ilst in (box for box in child_boxes(moov, meta.start + 4, meta.end) if box.kind == "ilst"):
                    for tag in (box for box in child_boxes(moov, ilst.start, ilst.end) if box.kind == COMMENT_TAG):
                        for data in (box for box in child_boxes(moov, tag.start, tag.end) if box.kind == "data"):
                            return moov[data.start + 8 : data.end].decode()
    return None
