"""Frame-exact decoding of ``[start, end)``: seek to the keyframe before ``start``, drop what precedes it, stop at ``end``.

Frames are identified by their timestamp (the probe's pts list), never by counting from the seek point, so the result
is exact for variable frame rates, B-frames and long GOPs, and the cost does not depend on where the segment lies.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass

import av
import av.container
import av.video.stream

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.containers import MediaSource, media_errors, open_media
from facefusion_provider.media.probe import select_video_stream
from facefusion_provider.types import VideoProbe

# When a seek lands after the wanted frame (open GOPs, edit lists), seek again this many frames earlier, then more.
SEEK_BACKOFF_FRAMES = (0, 16, 128, 1024)


@dataclass
class DecodeStats:
    """What a segment's decode cost: seeks made and frames decoded (the pre-roll from the keyframe included)."""

    seeks: int = 0
    decoded: int = 0


def decode_frames(
    source: MediaSource, probe: VideoProbe, start: int, end: int, name: str, *, stats: DecodeStats | None = None
) -> Generator[av.VideoFrame, None, None]:
    """Yield exactly frames ``[start, end)`` of ``source`` in display order, as decoded (no pixel conversion)."""
    if not 0 <= start < end <= probe.frame_count:
        raise ValueError(f"frame range [{start}, {end}) is outside the video's {probe.frame_count} frames")
    wanted = probe.pts[start:end]
    stats = stats if stats is not None else DecodeStats()
    with open_media(source, name) as container:
        video = select_video_stream(container, name)
        video.codec_context.thread_type = "AUTO"
        for backoff in SEEK_BACKOFF_FRAMES:
            seek_pts = probe.pts[max(0, start - backoff)]
            with media_errors(name, f"decoding frames {start}-{end - 1}"):
                frames = _frames_from(container, video, seek_pts, wanted[0], stats)
                first = next(frames, None)
            if first is not None and first.pts == wanted[0]:
                yield first
                with media_errors(name, f"decoding frames {start}-{end - 1}"):
                    yield from _checked(frames, wanted, start, name)
                return
            if start - backoff <= 0:
                break
    raise InvalidMediaError(
        f"{name}: frame {start} (pts {wanted[0]}) cannot be decoded: no keyframe before it yields it"
    )


def decode_frame(source: MediaSource, probe: VideoProbe, index: int, name: str) -> av.VideoFrame:
    """One frame, e.g. the reference frame or a preview sample."""
    frames = decode_frames(source, probe, index, index + 1, name)
    try:
        return next(frames)
    finally:
        frames.close()


def _frames_from(
    container: av.container.InputContainer,
    video: av.video.stream.VideoStream,
    seek_pts: int,
    first_pts: int,
    stats: DecodeStats,
) -> Iterator[av.VideoFrame]:
    """Frames from the keyframe at or before ``seek_pts``, skipping those shown before ``first_pts``.

    In the pre-roll the decoder skips non-reference frames: shown before the segment and needed by no other frame.
    """
    container.seek(seek_pts, backward=True, any_frame=False, stream=video)
    stats.seeks += 1
    context = video.codec_context
    for packet in container.demux(video):
        context.skip_frame = "NONREF" if packet.pts is not None and packet.pts < first_pts else "DEFAULT"
        for frame in video.decode(packet):
            stats.decoded += 1
            if frame.pts is not None and frame.pts < first_pts:
                continue
            yield frame


def _checked(frames: Iterator[av.VideoFrame], wanted: list[int], start: int, name: str) -> Iterator[av.VideoFrame]:
    """The frames after the first, each checked against the pts it must have; stops at the last wanted frame."""
    position = 1
    if position == len(wanted):
        return
    for frame in frames:
        if frame.pts != wanted[position]:
            raise InvalidMediaError(
                f"{name}: frame {start + position} should have pts {wanted[position]}, the decoder gave {frame.pts}; "
                "the file may be corrupt"
            )
        yield frame
        position += 1
        if position == len(wanted):
            return
    raise InvalidMediaError(
        f"{name}: only {start + position} of {start + len(wanted)} frames decode; the file is truncated or corrupt"
    )
