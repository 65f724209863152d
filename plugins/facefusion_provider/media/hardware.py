"""Which decode and encode path a worker uses on its machine: NVDEC and NVENC where its GPU has them, else software
threaded by the frame's size (within the pod's cores). Pure choices over a table of GPU models; finding the GPU and the cores reads files (and
at most runs ``nvidia-smi`` without a shell). No heavy imports: the choices are unit-tested without a GPU.

Engine counts: NVIDIA's "Video Encode and Decode GPU Support Matrix" (developer.nvidia.com/video-encode-and-decode-gpu-
support-matrix-new) and the products' data sheets; A100, A30, H100 and H200 have NVDEC engines but no NVENC.
"""

from __future__ import annotations

import glob
import math
import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from facefusion_provider.contract import WorkerSettings
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.types import VideoProbe

DecodePath = Literal["nvdec", "software"]
EncodePath = Literal["nvenc", "software"]

GPU_INFORMATION_GLOB = "/proc/driver/nvidia/gpus/*/information"
NVIDIA_SMI_ARGV = ("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")
NVIDIA_SMI_TIMEOUT_S = 5.0
CGROUP_V2_CPU_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1_QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
CGROUP_V1_PERIOD = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"
MAX_DECODE_THREADS = 16  # FFmpeg's own cap on automatic decoder threads
FULL_HD_PIXELS = 1920 * 1080
# A software encoder's bitstream depends on its thread count: its threads follow the frame's size, never the pod's
# cores, so that a segment is the same wherever it is encoded (``encoder_threads``).
MIN_ENCODER_THREADS, MAX_ENCODER_THREADS = 2, 8
NVENC_CODECS = frozenset({"h264_nvenc", "hevc_nvenc", "av1_nvenc"})
# Pixel formats NVDEC decodes on every generation listed (8-bit 4:2:0; 10-bit 4:2:0 for HEVC, VP9 and AV1).
NVDEC_PIX_FMTS = frozenset({"yuv420p", "yuvj420p", "nv12"})
NVDEC_10BIT_CODECS = frozenset({"hevc", "vp9", "av1"})
_TURING_DECODE = frozenset({"h264", "hevc", "vp8", "vp9", "mpeg1video", "mpeg2video", "mpeg4", "vc1"})
_AMPERE_DECODE = _TURING_DECODE | {"av1"}


@dataclass(frozen=True)
class GpuModel:
    """One NVIDIA GPU model: its video engines and the codecs its NVDEC and NVENC take."""

    key: str  # the chart's gpu.type where the chart has a row
    name: str
    nvdec: int
    nvenc: int
    decodes: frozenset[str]
    encodes: frozenset[str]
    pattern: str  # matched, as whole words and case-insensitively, in the name the driver reports


def _model(
    key: str, name: str, nvdec: int, nvenc: int, decodes: frozenset[str], *, av1_encode: bool = False
) -> GpuModel:
    encodes = (
        (frozenset({"h264_nvenc", "hevc_nvenc"}) | ({"av1_nvenc"} if av1_encode else set())) if nvenc else frozenset()
    )
    words = r"[\s-]*".join(re.escape(word) for word in name.split()[1:])  # "NVIDIA L40S" -> L40S
    return GpuModel(key, name, nvdec, nvenc, decodes, frozenset(encodes), rf"(?<![\w]){words}(?![\w])")


# Longer names first where one contains another (L40S before L40, A10G before A10, RTX 6000 Ada before RTX 6000).
GPU_MODELS: tuple[GpuModel, ...] = (
    _model("h200", "NVIDIA H200", 7, 0, _AMPERE_DECODE),
    _model("h100", "NVIDIA H100", 7, 0, _AMPERE_DECODE),
    _model("a100", "NVIDIA A100", 5, 0, _TURING_DECODE),  # no AV1 decode on GA100
    _model("a30", "NVIDIA A30", 4, 0, _TURING_DECODE),
    _model("l40s", "NVIDIA L40S", 3, 3, _AMPERE_DECODE, av1_encode=True),
    _model("l40", "NVIDIA L40", 3, 3, _AMPERE_DECODE, av1_encode=True),
    _model("l4", "NVIDIA L4", 4, 2, _AMPERE_DECODE, av1_encode=True),
    _model("a10g", "NVIDIA A10G", 2, 1, _AMPERE_DECODE),
    _model("a10", "NVIDIA A10", 2, 1, _AMPERE_DECODE),
    _model("a40", "NVIDIA A40", 2, 1, _AMPERE_DECODE),
    _model("rtx6000ada", "NVIDIA RTX 6000 Ada", 3, 3, _AMPERE_DECODE, av1_encode=True),
    _model("rtxa6000", "NVIDIA RTX A6000", 2, 1, _AMPERE_DECODE),
    _model("t4", "NVIDIA T4", 2, 1, _TURING_DECODE),
    _model("v100", "NVIDIA V100", 1, 3, _TURING_DECODE),
)


@dataclass(frozen=True)
class Gpu:
    """The GPU a worker found: the name as reported, and its row of ``GPU_MODELS`` when the name is known."""

    name: str
    model: GpuModel | None


@dataclass(frozen=True)
class DecodePlan:
    path: DecodePath
    threads: int
    device: str | None = None  # the PyAV hardware device type for NVDEC ("cuda")
    reason: str = ""


@dataclass(frozen=True)
class EncodePlan:
    path: EncodePath
    codec: str
    threads: int
    reason: str = ""


@dataclass(frozen=True)
class MediaPaths:
    """What one span decodes and encodes with, on which GPU and how many cores."""

    decode: DecodePlan
    encode: EncodePlan
    gpu: Gpu | None
    cores: int

    def line(self) -> str:
        gpu = self.gpu.name if self.gpu is not None else "no NVIDIA GPU"
        return (
            f"decode {self.decode.path} ({self.decode.reason}), encode {self.encode.codec} on "
            f"{'NVENC' if self.encode.path == 'nvenc' else 'the CPU'} ({self.encode.reason}); {gpu}, {self.cores} cores"
        )


def gpu_model(name: str) -> GpuModel | None:
    """The table's row for a GPU name as the driver or ``nvidia-smi`` reports it (``Tesla V100-SXM2-16GB``)."""
    for model in GPU_MODELS:
        if re.search(model.pattern, name, flags=re.IGNORECASE):
            return model
    return None


def detect_gpu(
    environ: Mapping[str, str],
    *,
    information_files: Sequence[str] | None = None,
    run: Callable[[Sequence[str]], str | None] | None = None,
) -> Gpu | None:
    """The worker's first GPU: the ``gpu_model`` setting (``FACEFUSION_GPU_MODEL`` in ``environ``, read by the
    contract), else the driver's ``/proc`` files, else ``nvidia-smi``."""
    override = WorkerSettings.from_environ(environ).gpu_model
    if override:
        return Gpu(override, gpu_model(override))
    files = sorted(glob.glob(GPU_INFORMATION_GLOB)) if information_files is None else information_files
    for path in files:
        name = _model_line(_read(path))
        if name:
            return Gpu(name, gpu_model(name))
    output = (run or _run_nvidia_smi)(NVIDIA_SMI_ARGV)
    name = (output or "").strip().splitlines()[0].strip() if (output or "").strip() else ""
    return Gpu(name, gpu_model(name)) if name else None


def pod_cores(
    *,
    cpu_max: str = CGROUP_V2_CPU_MAX,
    v1_quota: str = CGROUP_V1_QUOTA,
    v1_period: str = CGROUP_V1_PERIOD,
    affinity: Callable[[], int] | None = None,
) -> int:
    """The cores this process may use: the cgroup CPU quota (rounded up) within the CPUs it may run on."""
    usable = (affinity or _affinity_count)()
    quota = _cgroup_v2_cores(_read(cpu_max)) or _cgroup_v1_cores(_read(v1_quota), _read(v1_period))
    return max(1, min(usable, quota) if quota else usable)


def decode_threads(cores: int, width: int, height: int) -> int:
    """The software decoder's threads: one per 1080p frame's worth of pixels, within the pod's cores. A second thread
    at 1080p decodes no faster where processing sets the pace, and its frames in flight cost about 80 MB."""
    return max(1, min(cores, MAX_DECODE_THREADS, math.ceil(width * height / FULL_HD_PIXELS)))


def encoder_threads(width: int, height: int) -> int:
    """A software encoder's frame threads for frames of ``width`` x ``height``: four per 1080p frame's worth of pixels,
    2 to 8. Fixed by the frame, so the bitstream is the same on every machine; each frame thread holds frames of its
    own (x264 at 1080p: about 18 MB a thread), so a count fixed high for 4K would cost small frames memory for nothing."""
    wanted = math.ceil(4 * width * height / FULL_HD_PIXELS)
    return max(MIN_ENCODER_THREADS, min(MAX_ENCODER_THREADS, wanted))


def choose_decode(codec: str, pix_fmt: str, gpu: Gpu | None, cores: int, size: tuple[int, int]) -> DecodePlan:
    """NVDEC through PyAV's ``HWAccel("cuda")`` when the GPU has NVDEC and takes this codec and pixel format; else the
    software decoder with ``decode_threads`` for frames of ``size``. Decoding is exact either way: the path changes
    speed, not pixels."""
    threads = decode_threads(cores, *size)
    model = gpu.model if gpu is not None else None
    if gpu is None:
        return DecodePlan("software", threads, reason=f"{codec}, {threads} threads: no NVIDIA GPU")
    if model is None:
        return DecodePlan("software", threads, reason=f"{codec}, {threads} threads: {gpu.name} is not in the GPU table")
    if not model.nvdec or codec not in model.decodes:
        return DecodePlan(
            "software", threads, reason=f"{codec}, {threads} threads: {model.name}'s NVDEC does not decode it"
        )
    ten_bit = pix_fmt == "yuv420p10le" and codec in NVDEC_10BIT_CODECS
    if pix_fmt not in NVDEC_PIX_FMTS and not ten_bit:
        return DecodePlan("software", threads, reason=f"{codec} {pix_fmt}, {threads} threads: beyond NVDEC")
    return DecodePlan("nvdec", threads, device="cuda", reason=f"{codec} on one of {model.name}'s {model.nvdec} NVDEC")


def choose_encode(codec: str, gpu: Gpu | None, size: tuple[int, int]) -> EncodePlan:
    """The encoder the options name for frames of ``size``, checked against the GPU: an NVENC codec on a GPU known to
    lack NVENC is a bad option, never a silent switch to another codec. Software encoders take ``encoder_threads``."""
    if codec not in NVENC_CODECS:
        threads = encoder_threads(*size)
        return EncodePlan("software", codec, threads, reason=f"{threads} frame threads")
    model = gpu.model if gpu is not None else None
    if gpu is not None and model is not None and codec not in model.encodes:
        has_none = not model.nvenc
        lack = (
            "has no NVENC" if has_none else f"has NVENC, but its NVENC does not encode {codec.removesuffix('_nvenc')}"
        )
        raise InvalidOptionError(
            f"output_video_encoder: {codec} needs NVENC, and this worker's GPU, {gpu.name}, "
            f"{lack}{' (A100, A30, H100 and H200 have none)' if has_none else ''}; choose libx264 or libx265, or run "
            "on GPUs with NVENC (L4, L40S, A10G)"
        )
    where = model.name if model is not None else (gpu.name if gpu is not None else "no GPU found")
    return EncodePlan("nvenc", codec, 1, reason=f"NVENC of {where}")


def media_paths(
    probe: VideoProbe,
    encoder: str,
    output_size: tuple[int, int],
    environ: Mapping[str, str],
    *,
    cores: int | None = None,
) -> MediaPaths:
    """This machine's paths for the video ``probe`` describes, its frames encoded with ``encoder`` at
    ``output_size``."""
    gpu = detect_gpu(environ)
    cores = pod_cores() if cores is None else cores
    decode = choose_decode(probe.codec, probe.pix_fmt, gpu, cores, (probe.width, probe.height))
    return MediaPaths(decode, choose_encode(encoder, gpu, output_size), gpu, cores)


def _model_line(text: str) -> str:
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model":
            return value.strip()
    return ""


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError:
        return ""


def _run_nvidia_smi(argv: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _cgroup_v2_cores(text: str) -> int | None:
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return math.ceil(quota / period) if quota > 0 and period > 0 else None


def _cgroup_v1_cores(quota_text: str, period_text: str) -> int | None:
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return math.ceil(quota / period) if quota > 0 and period > 0 else None


def _affinity_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
