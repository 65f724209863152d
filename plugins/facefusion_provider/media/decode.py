"""Frame-exact decoding of ``[start, end)``: seek to the keyframe before ``start``, drop what precedes it, stop at ``end``.

Frames are identified by their timestamp (the probe's pts list), never by counting from the seek point, so the result
is exact for variable frame rates, B-frames and long GOPs, and the cost does not depend on where the segment lies.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass

import av
import av.container
import av.video.stream
from av.codec.hwaccel import HWAccel

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.containers import MediaSource, media_errors, open_media
from facefusion_provider.media.hardware import DecodePlan
from facefusion_provider.media.images import still_frame
from facefusion_provider.media.probe import select_video_stream
from facefusion_provider.types import VideoProbe

# When a seek lands after the wanted frame (open GOPs, edit lists), seek again this many frames earlier, then more.
SEEK_BACKOFF_FRAMES = (0, 16, 128, 1024)
SEEK_CHECK_FRAMES = 2  # frames decoded at each checked segment start: the first and the one after it
# Decoders that apply ``skip_frame`` to the packet it is set for. Others apply it later, to frames already queued
# (libdav1d drops the segment's first frames), so their pre-roll is decoded whole.
PREROLL_SKIPPING_DECODERS = frozenset({"h264", "hevc", "vp9"})


@dataclass
class DecodeStats:
    """What a segment's decode cost: seeks made and frames decoded (the pre-roll from the keyframe included)."""

    seeks: int = 0
    decoded: int = 0


def decode_frames(
    source: MediaSource,
    probe: VideoProbe,
    start: int,
    end: int,
    name: str,
    *,
    stats: DecodeStats | None = None,
    plan: DecodePlan | None = None,
) -> Generator[av.VideoFrame, None, None]:
    """Yield exactly frames ``[start, end)`` of ``source`` in display order, as decoded (no pixel conversion).

    ``plan`` (media/hardware.py): NVDEC or software and the decoder's threads; without it FFmpeg picks the threads.
    """
    if not 0 <= start < end <= probe.frame_count:
        raise ValueError(f"frame range [{start}, {end}) is outside the video's {probe.frame_count} frames")
    wanted = probe.pts[start:end]
    stats = stats if stats is not None else DecodeStats()
    if probe.still_image:  # an image target: its one picture, nothing to seek
        stats.decoded += 1
        yield still_frame(source, name)
        return
    with open_media(source, name, hwaccel=_hwaccel(plan)) as container:
        video = select_video_stream(container, name)
        video.codec_context.thread_type = "AUTO"
        if plan is not None:
            video.codec_context.thread_count = plan.threads
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


def check_seek_decode(source: MediaSource, probe: VideoProbe, starts: Iterable[int], name: str) -> None:
    """Refuse a target whose seek-decode at ``starts`` disagrees with the probe, before any span relies on it.

    A span decodes by seek; a video whose decoder gives other frames after a seek than the probe lists (an unusual
    codec, a broken index) would fail spans for good, or worse, shift frames.
    """
    for start in sorted({start for start in starts if 0 < start < probe.frame_count}):
        end = min(start + SEEK_CHECK_FRAMES, probe.frame_count)
        try:
            for _ in decode_frames(source, probe, start, end, name):
                pass
        except InvalidMediaError as error:
            reason = str(error).removeprefix(f"{name}: ")
            raise InvalidMediaError(
                f"{name}: decoding from frame {start} by seek does not give the frames the probe lists ({reason}); "
                f"this {probe.codec} video in {probe.container} cannot be cut into segments exactly: re-encode it "
                "(e.g. H.264 in MP4) and run again"
            ) from None


def opened_decode_plan(plan: DecodePlan, codec: str) -> DecodePlan:
    """``plan``, or the software decoder when NVDEC's device cannot be opened here (a driver's problem, not the
    video's, which would otherwise read as an unreadable file); its reason says so, and the frames are the same."""
    if plan.path != "nvdec" or plan.device is None:
        return plan
    try:
        HWAccel(plan.device).create(av.codec.Codec(codec, "r"))
    except (av.FFmpegError, OSError, ValueError) as error:
        reason = f"{codec}, {plan.threads} threads: NVDEC could not be opened ({error})"
        return DecodePlan("software", plan.threads, reason=reason)
    return plan


def _hwaccel(plan: DecodePlan | None) -> HWAccel | None:
    """NVDEC, frames downloaded to memory as the pipeline needs them; a stream NVDEC cannot take decodes in software
    (decoding is exact either way, so only the speed changes)."""
    if plan is None or plan.path != "nvdec" or plan.device is None:
        return None
    return HWAccel(plan.device, allow_software_fallback=True)


def _frames_from(
    container: av.container.InputContainer,
    video: av.video.stream.VideoStream,
    seek_pts: int,
    first_pts: int,
    stats: DecodeStats,
) -> Iterator[av.VideoFrame]:
    """Frames from the keyframe at or before ``seek_pts``, skipping those shown before ``first_pts``.

    In the pre-roll, decoders known to honour it skip non-reference frames (shown before the segment, needed by none).
    """
    container.seek(seek_pts, backward=True, any_frame=False, stream=video)
    stats.seeks += 1
    context = video.codec_context
    skips_preroll = context.name in PREROLL_SKIPPING_DECODERS
    for packet in container.demux(video):
        in_preroll = skips_preroll and packet.pts is not None and packet.pts < first_pts
        context.skip_frame = "NONREF" if in_preroll else "DEFAULT"
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
