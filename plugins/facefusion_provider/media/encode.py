"""Encode frames in the final codec with settings that depend only on the options and the target (so every segment of a
work is encoded alike, on any machine), keeping each frame's original timestamp."""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import TracebackType

import av
import av.container
import av.video.stream
from av.video.frame import PictureType

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.media.hardware import choose_encode, detect_gpu, encoder_threads
from facefusion_provider.options import Options
from facefusion_provider.types import VideoProbe

LOSSLESS_QUALITY = 100
# Presets in x264's order; encoders with other scales take the same position on theirs.
PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")
SEGMENT_FORMAT = "mp4"
# Encoders whose segments are QuickTime files: MP4 has no ProRes sample entry. Segment files keep their ``.mp4``
# names whatever the container (the commit and the merge open them by their content).
SEGMENT_FORMATS = {"prores_ks": "mov"}

# Matroska draws its segment and track UIDs at random unless told to be bit-exact: a segment is the same bytes
# wherever it is encoded.
MUXER_OPTIONS = {"webm": {"fflags": "+bitexact"}}


@dataclass(frozen=True)
class AlphaEncoding:
    """How an encoder keeps a transparent output's alpha: its pixel format, options and segment container."""

    pix_fmt: str
    options: dict[str, str]
    container: str


# The encoders a transparent output may use (``run_inputs.ALPHA_OUTPUTS``): ProRes 4444, and VP9 whose alpha is a
# second bitstream in Matroska's block additions (MP4 cannot hold it; FFmpeg's own vp9 decoder ignores it, libvpx's
# decodes it).
ALPHA_ENCODINGS = {
    "prores_ks": AlphaEncoding("yuva444p10le", {"profile": "4444"}, "mov"),
    "libvpx-vp9": AlphaEncoding("yuva420p", {}, "webm"),
}
LABEL_TAG = "comment"  # a container tag that says which work and frames a segment file holds
# A software encoder's bitstream depends on its thread count (measured for x264: frames in flight or slices; x265 and
# libvpx size their threads from the CPUs too), and "auto" is the CPUs this process may use: a pod, a CLI run and a
# resumed segment would differ. So the count follows the frame's size alone (``hardware.encoder_threads``).
# x264's AVX-512 macroblock tree (``mbtree_propagate_list_avx512``) works 8 macroblocks at a time and, where a frame's
# width in 16-pixel macroblocks is no multiple of 8, also propagates the lanes past a row's end: on the last row, from
# memory beyond x264's arrays, so the same frames gave other bytes after other work in the process. Without AVX-512,
# x86-64 CPUs with SSE4.2 or AVX2 give the same bytes (SSE2-only ones and plain C give others, as with ``mbtree=0``;
# ARM not measured), and the tree stays on: ``mbtree=0`` made files 1.4-1.7x as large at the same quality
# (bench/bench_x264_determinism.py). So x264 runs with every CPU feature its own detection finds here but AVX-512.
X264_CPU_AVX512 = 1 << 16  # x264.h
NVIDIA_DRIVER = "libcuda.so.1"
KUBERNETES_VARIABLE = "KUBERNETES_SERVICE_HOST"  # set in every Kubernetes pod
_opened: set[tuple[object, ...]] = set()  # encoder settings and sizes this process has opened once


@dataclass(frozen=True)
class EncoderSettings:
    """Everything that decides the encoded bitstream; identical for every segment of a work."""

    codec: str
    pix_fmt: str
    options: dict[str, str] = field(default_factory=dict)
    container: str = SEGMENT_FORMAT  # the segments' container format


def encoder_settings(options: Options, probe: VideoProbe, size: tuple[int, int] | None = None) -> EncoderSettings:
    """The settings for the target ``probe``'s frames processed into frames of ``size`` (None: the target's)."""
    codec = options.output_video_encoder
    width, height = size or (probe.width, probe.height)
    settings = codec_options(codec, options.output_video_quality, options.output_video_preset)
    if options.transparent_background():  # the frames come as RGBA
        alpha = ALPHA_ENCODINGS.get(codec)
        if alpha is None:  # validate refuses it with the output; a work prepared without one is refused here
            raise InvalidOptionError(
                f"output_video_encoder: {codec} cannot carry a transparent background (background_remover_fill_color "
                f"alpha {options.background_remover_fill_color[3]}); use {' or '.join(ALPHA_ENCODINGS)}"
            )
        return EncoderSettings(codec, alpha.pix_fmt, {**settings, **alpha.options}, alpha.container)
    pix_fmt = output_pix_fmt(codec, probe.pix_fmt, width, height)
    return EncoderSettings(codec, pix_fmt, settings, SEGMENT_FORMATS.get(codec, SEGMENT_FORMAT))


def output_pix_fmt(codec: str, input_pix_fmt: str, width: int, height: int) -> str:
    """Keep the input's pixel format when the encoder takes it; else 4:2:0, or 4:4:4 where odd sizes forbid 4:2:0."""
    supported = [video_format.name for video_format in av.codec.Codec(codec, "w").video_formats or []]
    if input_pix_fmt in supported:
        return input_pix_fmt
    if width % 2 or height % 2:
        return "yuv444p" if "yuv444p" in supported else supported[0]
    return "yuv420p" if "yuv420p" in supported else supported[0]


def codec_options(codec: str, quality: int, preset: str) -> dict[str, str]:
    """FaceFusion's mapping of quality 0-100 onto each encoder's scale; 100 is lossless where the encoder allows it."""
    speed = PRESETS.index(preset)
    lossless = quality >= LOSSLESS_QUALITY
    crf = str(round(51 - quality * 0.51))
    if codec == "libx264":
        return {"preset": preset, **({"qp": "0"} if lossless else {"crf": crf})}
    if codec == "libx265":
        x265_params = "log-level=error" + (":lossless=1" if lossless else "")
        return {"preset": preset, "x265-params": x265_params, **({} if lossless else {"crf": crf})}
    if codec == "prores_ks":  # ProRes's profile is its rate and quality: chosen from the pixel format
        return {}
    if codec == "libvpx-vp9":
        settings = {"deadline": "good", "cpu-used": str(round(5 - speed * 5 / (len(PRESETS) - 1))), "row-mt": "1"}
        settings.update({"lossless": "1"} if lossless else {"crf": str(round(63 - quality * 0.63)), "b": "0"})
        return settings
    # h264_nvenc / hevc_nvenc: presets p1 (fastest) .. p7 (best)
    settings = {"preset": f"p{1 + round(speed * 6 / (len(PRESETS) - 1))}"}
    settings.update({"tune": "lossless"} if lossless else {"rc": "vbr", "cq": crf, "b": "0"})
    return settings


def check_encoder(settings: EncoderSettings, width: int, height: int, frame_rate: Fraction) -> None:
    """Open the encoder once as the segments will: one that this machine cannot open is a bad option, not a retry."""
    # NVENC asked of a GPU known to lack it: refused, naming it
    choose_encode(settings.codec, detect_gpu(os.environ), (width, height))
    context = av.CodecContext.create(settings.codec, "w")
    assert isinstance(context, av.VideoCodecContext)
    context.width, context.height, context.pix_fmt = width, height, settings.pix_fmt
    context.time_base, context.framerate = 1 / frame_rate, frame_rate
    context.options = fixed_thread_options(settings, width, height)
    _fix_threads(context)
    try:
        context.open()
    except av.FFmpegError as error:
        reason = str(getattr(error, "strerror", None) or error).strip()
        why = _why_not(settings.codec)
        raise InvalidOptionError(
            f"output_video_encoder: {settings.codec} cannot be opened on this machine ({reason}){why}"
        ) from None


def judged_here(codec: str, environ: Mapping[str, str]) -> bool:
    """Whether opening ``codec`` here tells whether it opens where the spans run. Software encoders open alike
    everywhere; NVENC cannot be judged by a Kubernetes pod without a GPU driver (prepare is off the GPU pool by
    default): the spans refuse it then, at their first segment."""
    return not codec.endswith("_nvenc") or KUBERNETES_VARIABLE not in environ or _has_nvidia_driver()


def _check_once(settings: EncoderSettings, width: int, height: int, frame_rate: Fraction) -> None:
    key = (settings.codec, settings.pix_fmt, tuple(sorted(settings.options.items())), width, height, frame_rate)
    if key not in _opened:
        check_encoder(settings, width, height, frame_rate)
        _opened.add(key)


def _has_nvidia_driver() -> bool:
    try:
        ctypes.CDLL(NVIDIA_DRIVER)
    except OSError:
        return False
    return True


def _why_not(codec: str) -> str:
    if not codec.endswith("_nvenc"):
        return f" for {codec} at this size and pixel format: choose another encoder"
    if not _has_nvidia_driver():
        return (
            f": NVENC needs an NVIDIA GPU and its driver, and this machine has none (no {NVIDIA_DRIVER}); use libx264"
        )
    return ": this GPU has no NVENC (A100, H100 and H200 have none), or the video size is beyond it; use libx264"


def fixed_thread_options(settings: EncoderSettings, width: int, height: int) -> dict[str, str]:
    """The encoder's options made deterministic for frames of ``width`` x ``height``: thread settings FFmpeg's thread
    count does not reach (x265's pools), x264's SIMD; and x264's lookahead run in its encoding thread
    (``sync-lookahead=0``): the same bytes, without the buffer of frames a lookahead thread keeps (30 MB at 1080p)."""
    options = dict(settings.options)
    if settings.codec == "libx265":
        pools = f"pools={encoder_threads(width, height)}:frame-threads=2"  # x265 ignores FFmpeg's thread count
        options["x265-params"] = ":".join(filter(None, (options.get("x265-params"), pools)))
    if settings.codec == "libx264" and (cpu_flags := x264_cpu_flags()) is not None:
        fixed = f"asm={cpu_flags}:sync-lookahead=0"
        options["x264-params"] = ":".join(filter(None, (options.get("x264-params"), fixed)))
    return options


@functools.cache
def x264_cpu_flags() -> int | None:
    """The CPU features x264 finds here less AVX-512 (``X264_CPU_AVX512``), asked of the libx264 this process loaded
    with PyAV's FFmpeg; None where none is loaded (no libx264 to run)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split(maxsplit=5)[5].strip() for line in maps if "libx264" in line})
    except OSError:
        return None
    for path in paths:
        detect = getattr(ctypes.CDLL(path), "x264_cpu_detect", None)
        if detect is not None:
            detect.restype = ctypes.c_uint32
            return int(detect()) & ~X264_CPU_AVX512
    return None


def _fix_threads(context: av.VideoCodecContext) -> None:
    """The same threads everywhere for frames of its size (``encoder_threads``); frame threads, as slices would cost
    compression."""
    context.thread_count = encoder_threads(context.width, context.height)
    context.thread_type = "FRAME"


class VideoEncoder:
    """Encodes frames into one video file; a frame's pts is its pts in the target minus ``pts_offset``.

    ``label`` is stored in the file's tags, so that a merge can tell a segment file from a stray one.
    """

    def __init__(
        self,
        path: str,
        settings: EncoderSettings,
        *,
        width: int,
        height: int,
        frame_rate: Fraction,
        time_base: Fraction,
        pts_offset: int = 0,
        label: str | None = None,
    ) -> None:
        _check_once(settings, width, height, frame_rate)
        self.frame_count = 0
        self._time_base = time_base
        self._pts_offset = pts_offset
        self._pix_fmt = settings.pix_fmt
        muxer_options = MUXER_OPTIONS.get(settings.container, {})
        self._container = av.open(path, mode="w", format=settings.container, options=muxer_options)
        if label:
            self._container.metadata[LABEL_TAG] = label
        options = fixed_thread_options(settings, width, height)
        stream = self._container.add_stream(settings.codec, rate=frame_rate, options=options)
        assert isinstance(stream, av.video.stream.VideoStream)
        stream.width, stream.height, stream.pix_fmt = width, height, settings.pix_fmt
        stream.codec_context.time_base = time_base
        stream.time_base = time_base
        _fix_threads(stream.codec_context)
        self._stream = stream

    def encode(self, frame: av.VideoFrame, pts: int) -> None:
        """Encode ``frame`` as the target's frame with timestamp ``pts`` (pixels untouched if the format matches)."""
        if frame.format.name != self._pix_fmt:
            frame = frame.reformat(format=self._pix_fmt)
        if self.frame_count == 0:
            self._copy_colour_description(frame)
        frame.pts = pts - self._pts_offset
        frame.time_base = self._time_base
        frame.pict_type = PictureType.NONE  # a decoded frame keeps its I/P/B type, which the encoder would obey
        self._container.mux(self._stream.encode(frame))
        self.frame_count += 1

    def close(self) -> int:
        """Flush the encoder and finish the file; returns the number of frames encoded."""
        if self.frame_count:
            self._container.mux(self._stream.encode(None))
        self._container.close()
        return self.frame_count

    def abort(self) -> None:
        self._container.close()

    def __enter__(self) -> VideoEncoder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is not None:
            self.abort()

    def _copy_colour_description(self, frame: av.VideoFrame) -> None:
        context = self._stream.codec_context
        context.color_range = frame.color_range
        context.colorspace = frame.colorspace
        context.color_primaries = frame.color_primaries
        context.color_trc = frame.color_trc
