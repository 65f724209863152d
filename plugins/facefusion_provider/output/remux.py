"""Join encoded segments into the output by remuxing their packets (no second encode), with the original's audio and
other streams copied once, the original timestamps and rotation kept, and the frame count verified."""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import av
import av.container
import av.packet
import av.stream
import av.video.stream

from facefusion_provider.exceptions import InvalidMediaError, InvalidWorkError
from facefusion_provider.media.containers import MediaSource, media_errors, open_media
from facefusion_provider.media.encode import LABEL_TAG
from facefusion_provider.media.faststart import FASTSTART_EXTENSIONS
from facefusion_provider.types import VideoProbe

logger = logging.getLogger(__name__)

# Container tags that describe the original file's muxer, not its content.
MUXER_TAGS = frozenset({"major_brand", "minor_version", "compatible_brands", "encoder", "creation_time"})
MOV_TEXT_GAP = b"\x00\x00"  # an MP4 subtitle sample with no text
ALPHA_MODE_TAG = "alpha_mode"  # Matroska's AlphaMode, as FFmpeg reads and writes it: "1" where blocks carry alpha


@dataclass(frozen=True)
class SegmentFile:
    """An encoded segment on local disk: frames ``[start, end)`` of the target, pts stored relative to frame ``start``.

    ``label``, when given, must equal the label the segment was encoded with.
    """

    path: str
    start: int
    end: int
    label: str | None = None


@dataclass(frozen=True)
class PendingSegment:
    """A segment known before its file is local (from its commit marker): frames ``[start, end)`` and its label."""

    start: int
    end: int
    label: str | None = None


@dataclass(frozen=True)
class _Timed:
    """A packet with the time at which the interleaver should write it."""

    seconds: (
        float  # only orders the feed (FFmpeg's interleaver orders exactly); ticks of any two bases differ by far more
    )
    order: int
    packet: av.Packet[Any]

    def __lt__(self, other: _Timed) -> bool:
        return (self.seconds, self.order) < (other.seconds, other.order)


def segment_pts_offset(probe: VideoProbe, segment_start: int) -> int:
    """Segments store pts relative to their first frame (an MP4 edit list would round a non-zero start)."""
    return probe.pts[segment_start]


def merge_segments(
    segments: Sequence[SegmentFile | PendingSegment],
    original: MediaSource,
    probe: VideoProbe,
    output_path: str,
    *,
    name: str,
    paths: Iterable[str] | None = None,
    moov_last: bool = False,
    own_timeline: bool = False,
) -> int:
    """Write ``output_path`` from ``segments`` (contiguous, in order) and the original's other streams; returns frames.

    ``paths``, when given, yields each segment's local path in order once that file is ready (e.g. downloaded and
    checked): the first is asked for before anything is written, each later one only after the previous segment has been
    read to its end and closed (so the caller may delete it then), and the iterable is asked once more after the last.
    Without ``paths`` every segment is a ``SegmentFile`` read from its own path.

    The container follows the extension of ``output_path``. An MP4/MOV gets its moov in front (FFmpeg's faststart, a
    second pass over the file), or with ``moov_last`` after the media data, which is then final as soon as it is
    written (``media.faststart`` moves the moov in front later). Without trimming every timestamp is the original's;
    a trimmed work starts where the original started. With ``own_timeline`` the original's streams start at the
    output's first frame (a work's encoded sound, already cut to the output's length).
    """
    _check_contiguous(segments)
    files = _segment_files(segments, paths if paths is not None else _own_paths(segments))
    frame_start, frame_end = segments[0].start, segments[-1].end
    video_time_base = Fraction(probe.time_base)
    shift_seconds = (probe.pts[frame_start] - probe.pts[0]) * video_time_base
    moov_first = not moov_last and output_path.rsplit(".", 1)[-1].lower() in FASTSTART_EXTENSIONS
    output = av.open(output_path, mode="w", options={"movflags": "+faststart"} if moov_first else {})
    try:
        first = next(files)  # the stream template: segment 0 is ready before anything else is read
        video_out = _add_video_stream(output, first.path, video_time_base, probe.rotation)
        # A copied video's decode times are guessed by the demuxer from what it learns decoding a few frames.
        second_video = any(info.kind == "video" for info in probe.streams)
        with open_media(original, name, demux_only=not second_video) as source:
            copied = _add_copied_streams(output, source, probe)
            output.metadata.update({k: v for k, v in source.metadata.items() if k not in MUXER_TAGS})
            window = _time_window(probe, frame_start, frame_end, video_time_base)
            if own_timeline:
                shift_seconds, window = -probe.pts[0] * video_time_base, (None, None)
            video_packets = _video_packets(
                itertools.chain([first], files), probe, video_out, video_time_base, frame_start
            )
            other_packets = _other_packets(source, copied, shift_seconds, window, name)
            for timed in heapq.merge(video_packets, other_packets):
                output.mux(timed.packet)
        frames = sum(segment.end - segment.start for segment in segments)
    finally:
        output.close()
    return frames


def _own_paths(segments: Sequence[SegmentFile | PendingSegment]) -> Iterator[str]:
    for segment in segments:
        if not isinstance(segment, SegmentFile):
            raise TypeError(
                f"segment of frames {segment.start}-{segment.end - 1} has no file: pass paths to merge_segments"
            )
        yield segment.path


def _segment_files(segments: Sequence[SegmentFile | PendingSegment], paths: Iterable[str]) -> Iterator[SegmentFile]:
    """Each segment with its local path, taken from ``paths`` only when the segment is reached."""
    for segment, path in zip(segments, paths, strict=True):
        yield SegmentFile(path, segment.start, segment.end, segment.label)


def _label(metadata: dict[str, str]) -> str | None:
    """A segment file's label (``LABEL_TAG``); Matroska reads its tags back in capitals."""
    return next((value for key, value in metadata.items() if key.lower() == LABEL_TAG), None)


def _check_contiguous(segments: Sequence[SegmentFile | PendingSegment]) -> None:
    if not segments:
        raise InvalidWorkError("no segments to merge")
    for before, after in itertools.pairwise(segments):
        if before.end != after.start:
            raise InvalidWorkError(
                f"segments are not contiguous: one ends at frame {before.end}, the next starts at {after.start}"
            )


def _add_video_stream(
    output: av.container.OutputContainer, first_segment: str, time_base: Fraction, rotation: int
) -> av.video.stream.VideoStream:
    """The output's video stream takes the segments' codec parameters (all segments share them), their alpha mode (a
    transparent VP9's, which players read to decode its alpha) and the target's rotation."""
    with open_media(first_segment, first_segment, demux_only=True) as segment:
        template = segment.streams.video[0]
        stream = output.add_stream_from_template(template)
        if ALPHA_MODE_TAG in template.metadata:
            stream.metadata[ALPHA_MODE_TAG] = template.metadata[ALPHA_MODE_TAG]
    stream.time_base = time_base
    if rotation:
        stream.set_display_rotation(rotation)
    return stream


def _add_copied_streams(
    output: av.container.OutputContainer, source: av.container.InputContainer, probe: VideoProbe
) -> dict[int, av.stream.Stream]:
    """Output streams for the original's audio, subtitle and data streams that the output format can hold."""
    copied: dict[int, av.stream.Stream] = {}
    for info in probe.streams:
        template = source.streams[info.index]
        try:
            stream = output.add_stream_from_template(template)
        except (av.FFmpegError, ValueError) as error:
            logger.warning(
                "stream %d (%s %s) is not copied: the output format cannot hold it (%s)",
                info.index,
                info.kind,
                info.codec,
                error,
            )
            continue
        stream.time_base = template.time_base
        if info.language:
            stream.metadata["language"] = info.language
        copied[info.index] = stream
    return copied


def _time_window(
    probe: VideoProbe, frame_start: int, frame_end: int, time_base: Fraction
) -> tuple[Fraction | None, Fraction | None]:
    """The part of the original's timeline that the output covers (open where nothing is trimmed)."""
    start = probe.pts[frame_start] * time_base if frame_start > 0 else None
    end = probe.pts[frame_end] * time_base if frame_end < probe.frame_count else None
    return start, end


def _video_packets(
    segments: Iterable[SegmentFile],
    probe: VideoProbe,
    video_out: av.video.stream.VideoStream,
    time_base: Fraction,
    frame_start: int,
) -> Iterator[_Timed]:
    """The segments' packets in decode order with their original timestamps; checks every segment's frames."""
    first_pts = probe.pts[frame_start]
    output_origin = probe.pts[0]
    last_dts: int | None = None
    for segment in segments:
        offset = segment_pts_offset(probe, segment.start) - first_pts + output_origin
        seen: list[int] = []
        with (
            open_media(segment.path, segment.path, demux_only=True) as container,
            media_errors(segment.path, "reading the segment"),
        ):
            label = _label(container.metadata)
            if segment.label is not None and label != segment.label:
                raise InvalidWorkError(f"{segment.path}: is labelled {label!r}, expected {segment.label!r}")
            stream = container.streams.video[0]
            if stream.time_base is None:
                raise InvalidMediaError(f"{segment.path}: the video stream has no time base")
            ticks: Callable[[int | None], int] = _Rescale(stream.time_base, time_base, segment.path)
            if stream.time_base > time_base:  # Matroska's milliseconds (a transparent VP9's segments)
                origin = segment_pts_offset(probe, segment.start)
                frames = [pts - origin for pts in probe.pts[segment.start : segment.end]]
                ticks = _NearestFrame(stream.time_base, time_base, frames, segment.path)
            seconds_per_tick = float(time_base)
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue
                pts = ticks(packet.pts) + offset
                dts = ticks(packet.dts) + offset
                # The next segment's B-frame delay can reach back before the previous segment's last decode time.
                if last_dts is not None and dts <= last_dts:
                    dts = last_dts + 1
                if dts > pts:
                    raise InvalidMediaError(
                        f"{segment.path}: cannot place frame pts {pts} after decode time {last_dts}"
                    )
                last_dts = dts
                seen.append(pts - offset + segment_pts_offset(probe, segment.start))
                packet.pts, packet.dts, packet.time_base = pts, dts, time_base
                packet.stream = video_out
                yield _Timed(dts * seconds_per_tick, 0, packet)
        expected = probe.pts[segment.start : segment.end]
        if sorted(seen) != expected:
            raise InvalidWorkError(
                f"{segment.path}: holds {len(seen)} frames with other timestamps than frames {segment.start}-{segment.end - 1} "
                f"of the target ({len(expected)} frames)"
            )


class _Rescale:
    """Timestamps from ticks of ``source`` to whole ticks of ``target``, in integers (a Fraction per packet is slow)."""

    def __init__(self, source: Fraction, target: Fraction, name: str) -> None:
        ratio = source / target
        self._numerator, self._denominator = ratio.numerator, ratio.denominator
        self._source, self._target, self._name = source, target, name

    def __call__(self, value: int | None) -> int:
        if value is None:
            raise InvalidMediaError(f"{self._name}: a packet has no timestamp")
        ticks, remainder = divmod(value * self._numerator, self._denominator)
        if remainder:
            raise InvalidMediaError(
                f"{self._name}: timestamp {value} x {self._source} is not a whole number of ticks of {self._target}"
            )
        return ticks


class _NearestFrame:
    """Timestamps from ticks of a coarser ``source`` to the segment's own frame times in ticks of ``target``: the
    nearest of ``frames`` (sorted), which must lie within half a source tick (the rounding the muxer did)."""

    def __init__(self, source: Fraction, target: Fraction, frames: list[int], name: str) -> None:
        self._source, self._target, self._frames, self._name = source, target, frames, name
        self._reach = source / target / 2

    def __call__(self, value: int | None) -> int:
        if value is None:
            raise InvalidMediaError(f"{self._name}: a packet has no timestamp")
        exact = value * self._source / self._target
        at = bisect.bisect_left(self._frames, exact)
        nearest = min(self._frames[max(0, at - 1) : at + 1], key=lambda frame: abs(frame - exact), default=None)
        if nearest is None or abs(nearest - exact) > self._reach:
            raise InvalidMediaError(
                f"{self._name}: timestamp {value} x {self._source} is no frame of the segment in ticks of "
                f"{self._target}"
            )
        return nearest


def _other_packets(
    source: av.container.InputContainer,
    copied: dict[int, av.stream.Stream],
    shift_seconds: Fraction,
    window: tuple[Fraction | None, Fraction | None],
    name: str,
) -> Iterator[_Timed]:
    """The original's other packets inside the output's time window, shifted with the video, bytes untouched."""
    if not copied:
        return
    for stream in source.streams:
        if stream.index not in copied:
            stream.discard = av.stream.Discard.all  # FFmpeg then seeks over their samples instead of reading them
    start, end = window
    streams = [source.streams[index] for index in copied]
    mov_text = {stream.index for stream in streams if stream.codec_context and stream.codec_context.name == "mov_text"}
    # Per stream, in its own ticks: the last tick a packet may end on before the window, the first one after it.
    bounds = {
        stream.index: (
            None if start is None or stream.time_base is None else math.floor(start / stream.time_base),
            None if end is None or stream.time_base is None else math.ceil(end / stream.time_base),
            0 if stream.time_base is None else round(shift_seconds / stream.time_base),
            0.0 if stream.time_base is None else float(stream.time_base),
        )
        for stream in streams
    }
    videos = {stream.index: _CopiedVideo() for stream in streams if stream.type == "video"}

    def timed(packet: av.Packet[Any], dts: int) -> _Timed:
        index = packet.stream_index  # the source's: setting the output stream changes it
        packet.stream, packet.dts = copied[index], dts
        return _Timed(dts * bounds[index][3], 1 + index, packet)

    with media_errors(name, "copying the audio and other streams"):
        for packet in source.demux(streams):
            if packet.size == 0 or packet.pts is None or packet.time_base is None:
                continue
            if packet.stream_index in mov_text and bytes(packet) == MOV_TEXT_GAP:
                continue  # the MP4 muxer writes its own empty samples between cues: copied ones would double them
            ends_before, begins_after, shift, _ = bounds[packet.stream_index]
            if ends_before is not None and packet.pts + (packet.duration or 0) <= ends_before:
                continue
            if begins_after is not None and packet.pts >= begins_after:
                continue
            pts = packet.pts = packet.pts - shift
            dts = None if packet.dts is None else packet.dts - shift
            video = videos.get(packet.stream_index)
            if video is not None:
                yield from (timed(ready, ready_dts) for ready, ready_dts in video.take(packet, pts, dts))
                continue
            yield timed(packet, pts if dts is None else dts)
        for video in videos.values():
            yield from (timed(ready, ready_dts) for ready, ready_dts in video.rest())


Decoded = tuple["av.Packet[Any]", int]  # a packet and its decode time, in its stream's ticks


class _CopiedVideo:
    """A copied video stream (a second camera): from its first keyframe in the window (cut mid-GOP, its first frames
    would not decode), every packet with a decode time. A Matroska demuxer gives none to the first packets of a
    reordered stream: they get the times just before the first one it gives, as FFmpeg's own remux does."""

    def __init__(self) -> None:
        self.started = False
        self.timed = False
        self.held: list[tuple[av.Packet[Any], int]] = []  # packets without a decode time yet, and their pts

    def take(self, packet: av.Packet[Any], pts: int, dts: int | None) -> list[Decoded]:
        """The packets ready to mux once ``packet`` (its times shifted; ``dts`` None where unknown) is read."""
        if not self.started and not packet.is_keyframe:
            return []
        self.started = True
        if dts is None and not self.timed:
            self.held.append((packet, pts))
            return []
        self.timed = True
        ready: list[Decoded] = [(packet, pts if dts is None else dts)]
        earliest = ready[0][1]
        for earlier, _ in reversed(self.held):
            earliest -= earlier.duration or 1
            ready.insert(0, (earlier, earliest))
        self.held = []
        return ready

    def rest(self) -> list[Decoded]:
        """Packets held to the end: the stream never gave a decode time, so none is reordered."""
        return self.held
