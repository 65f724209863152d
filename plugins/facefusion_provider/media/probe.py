"""Probe a video: exact frame count and every frame's timestamp, without a full decode.

For a plain MP4/MOV the timestamps come from the moov sample tables (``mp4index``: about 1 MB for an hour of video);
for anything else, or where those tables do not describe the stream FFmpeg opened, every video packet is demuxed (the
whole file is read). PyAV still opens the container for the codec, dimensions, rotation and streams.
"""

from __future__ import annotations

from fractions import Fraction

import av
import av.container
import av.stream
import av.video.stream

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.containers import MediaSource, fraction_text, media_errors, open_media
from facefusion_provider.media.mp4index import MovieIndex, read_movie_index, track_frame_times
from facefusion_provider.types import StreamInfo, VideoProbe

# Demuxers that read single pictures: a still image is not a video target.
STILL_IMAGE_FORMATS = frozenset({"image2", "image2pipe"})
COPIED_STREAM_KINDS = ("video", "audio", "subtitle", "data")  # every stream but the one swapped
MOV_FORMAT = "mov"  # FFmpeg's demuxer for MP4/MOV: "mov,mp4,m4a,3gp,3g2,mj2"


def probe_video(source: MediaSource, name: str) -> VideoProbe:
    """Everything the segmented pipeline needs to know about the target ``source`` (``name`` is used in errors)."""
    movie = read_movie_index(source)
    with open_media(source, name) as container:
        video = select_video_stream(container, name)
        if video.time_base is None:
            raise InvalidMediaError(f"{name}: the video stream has no time base")
        pts, last_duration = _frame_times(container, video, movie, name)
        rotation = _first_frame_rotation(container, video, name)
        time_base = video.time_base
        frame_rate = video.average_rate or video.guessed_rate or _rate_from_timestamps(pts, time_base)
        duration = (pts[-1] - pts[0] + last_duration) * time_base
        return VideoProbe(
            container=container.format.name,
            codec=video.codec_context.name,
            width=video.codec_context.width,
            height=video.codec_context.height,
            pix_fmt=video.codec_context.pix_fmt or "",
            frame_rate=fraction_text(Fraction(frame_rate)),
            time_base=fraction_text(time_base),
            frame_count=len(pts),
            pts=pts,
            duration_seconds=float(duration),
            rotation=rotation,
            video_stream_index=video.index,
            streams=_other_streams(container, video),
        )


def video_timestamps(source: MediaSource, name: str) -> tuple[list[int], Fraction]:
    """Every frame's pts in display order and the time base, from the moov tables or the packets (nothing decoded)."""
    movie = read_movie_index(source)
    with open_media(source, name, demux_only=True) as container:
        video = select_video_stream(container, name)
        if video.time_base is None:
            raise InvalidMediaError(f"{name}: the video stream has no time base")
        pts, _ = _frame_times(container, video, movie, name)
        return pts, video.time_base


def select_video_stream(container: av.container.InputContainer, name: str) -> av.video.stream.VideoStream:
    """The first real video stream (cover art is a picture, not a video); still images are refused."""
    if is_still_image_format(container.format.name):
        raise InvalidMediaError(f"{name}: is a still image ({container.format.name}), not a video")
    for stream in container.streams.video:
        if not stream.disposition & av.stream.Disposition.attached_pic:
            return stream
    found = ", ".join(sorted({str(stream.type) for stream in container.streams})) or "no streams"
    raise InvalidMediaError(f"{name}: has no video stream (found: {found})")


def is_still_image_format(format_name: str) -> bool:
    """FFmpeg's demuxers of single pictures: ``image2`` for a named file, ``png_pipe`` and the like for a stream."""
    return format_name in STILL_IMAGE_FORMATS or format_name.endswith("_pipe")


def _frame_times(
    container: av.container.InputContainer,
    video: av.video.stream.VideoStream,
    movie: MovieIndex | None,
    name: str,
) -> tuple[list[int], int]:
    """Every frame's pts and the last frame's duration: from the moov tables of the track FFmpeg opened as ``video``."""
    track = movie.track(video.id) if movie is not None and MOV_FORMAT in container.format.name.split(",") else None
    indexed = None if movie is None or track is None else track_frame_times(movie, track, name)
    if indexed is not None and indexed.time_base == video.time_base and indexed.frame_count == video.frames:
        return indexed.pts, indexed.last_duration
    with media_errors(name, "reading the video packets"):
        return _demux_timestamps(container, video, name)


def _demux_timestamps(
    container: av.container.InputContainer, video: av.video.stream.VideoStream, name: str
) -> tuple[list[int], int]:
    """Every frame's pts in display order, and the duration of the last frame shown."""
    pts: list[int] = []
    last_pts, last_duration, hidden = -(2**63), 0, 0
    for packet in container.demux(video):
        if packet.size == 0:  # the demuxer's flush packet
            continue
        if packet.is_discard:  # a frame that an edit list hides: decoded for reference, never shown
            hidden += 1
            continue
        if packet.pts is None:
            raise InvalidMediaError(f"{name}: a video packet has no timestamp; remux it into MP4 or MKV first")
        if packet.pts > last_pts:
            last_pts, last_duration = packet.pts, packet.duration or 0
        pts.append(packet.pts)
    declared = video.frames
    if not pts:
        raise InvalidMediaError(f"{name}: the video stream has no frames")
    if declared and declared != len(pts) + hidden:
        raise InvalidMediaError(
            f"{name}: is truncated: the header lists {declared} frames, only {len(pts)} can be read"
        )
    pts.sort()
    duplicates = len(pts) - len(set(pts))
    if duplicates:
        raise InvalidMediaError(f"{name}: {duplicates} video frames share a timestamp; frames cannot be told apart")
    return pts, last_duration


def _first_frame_rotation(container: av.container.InputContainer, video: av.video.stream.VideoStream, name: str) -> int:
    """Rotation of the display matrix, read from the first decoded frame (this also proves the stream decodes)."""
    with media_errors(name, "decoding the first frame"):
        container.seek(0, backward=True, any_frame=False, stream=video)
        for frame in container.decode(video):
            return round(frame.rotation) % 360
    raise InvalidMediaError(f"{name}: no frame of the video can be decoded")


def _rate_from_timestamps(pts: list[int], time_base: Fraction) -> Fraction:
    if len(pts) < 2:
        return Fraction(25)
    return Fraction(len(pts) - 1) / ((pts[-1] - pts[0]) * time_base)


def _other_streams(container: av.container.InputContainer, video: av.video.stream.VideoStream) -> list[StreamInfo]:
    streams = []
    for stream in container.streams:
        if stream.index == video.index or stream.type not in COPIED_STREAM_KINDS or stream.time_base is None:
            continue
        codec = stream.codec_context.name if stream.codec_context is not None else (stream.name or "unknown")
        streams.append(
            StreamInfo(
                index=stream.index,
                kind=stream.type,
                codec=codec,
                time_base=fraction_text(stream.time_base),
                language=stream.language,
            )
        )
    return streams
