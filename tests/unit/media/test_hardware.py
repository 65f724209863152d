"""Which decode and encode path a worker takes on which GPU (no GPU here: the choices, not the engines, are tested),
how it finds its GPU and its cores, and that an NVENC encoder on a GPU without NVENC is refused by name."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from facefusion_provider.contract import GPU_MODEL_VARIABLE, WorkerSettings
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.media.decode import decode_frames, opened_decode_plan
from facefusion_provider.media.encode import EncoderSettings, check_encoder
from facefusion_provider.media.hardware import (
    MAX_DECODE_THREADS,
    NVIDIA_SMI_ARGV,
    Gpu,
    choose_decode,
    choose_encode,
    decode_threads,
    detect_gpu,
    encoder_threads,
    gpu_model,
    media_paths,
    pod_cores,
)
from facefusion_provider.media.probe import probe_video
from facefusion_provider.metric_names import MediaPath, MediaStage
from facefusion_provider.options import Options
from facefusion_provider.telemetry.metrics import WorkerMetrics
from facefusion_provider.types import VideoProbe
from facefusion_provider.work.records import WorkSpec
from facefusion_provider.worker.segments import chosen_media_paths

from .conftest import MakeVideo

SD, FULL_HD, UHD = (640, 480), (1920, 1080), (3840, 2160)


def gpu(name: str) -> Gpu:
    return Gpu(name, gpu_model(name))


@pytest.mark.parametrize(
    ("reported", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L40", "l40"),
        ("Tesla T4", "t4"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA RTX A6000", "rtxa6000"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx6000ada"),
        ("NVIDIA GeForce RTX 4090", None),
        ("NVIDIA GH200 480GB", None),
    ],
)
def test_the_driver_names_map_to_their_table_rows_and_no_name_is_taken_for_a_longer_one(
    reported: str, key: str | None
) -> None:
    model = gpu_model(reported)
    assert (model.key if model else None) == key


def test_the_tables_engine_counts_follow_nvidias_matrix() -> None:
    # The facts the paths rest on: data-centre Hopper and Ampere have NVDEC only; L4, L40S, A10G have both.
    engines = {
        key: (m.nvdec, m.nvenc) for key in ("a100", "h100", "h200", "l4", "l40s", "a10g") if (m := gpu_model(key))
    }
    assert engines == {"a100": (5, 0), "h100": (7, 0), "h200": (7, 0), "l4": (4, 2), "l40s": (3, 3), "a10g": (2, 1)}


def test_a_gpu_is_found_by_the_override_then_the_drivers_files_then_nvidia_smi(tmp_path: Path) -> None:
    information = tmp_path / "information"
    information.write_text("Model: \t\t NVIDIA L4\nIRQ:   42\nGPU UUID: GPU-1\n")
    smi_calls: list[Sequence[str]] = []

    def smi(argv: Sequence[str]) -> str:
        smi_calls.append(argv)
        return "NVIDIA H100 80GB HBM3\nNVIDIA H100 80GB HBM3\n"

    overridden = detect_gpu({GPU_MODEL_VARIABLE: "NVIDIA A10G"}, information_files=[str(information)], run=smi)
    from_driver = detect_gpu({}, information_files=[str(information)], run=smi)
    assert smi_calls == []
    from_smi = detect_gpu({}, information_files=[], run=smi)
    nothing = detect_gpu({}, information_files=[str(tmp_path / "absent")], run=lambda argv: None)

    assert overridden == gpu("NVIDIA A10G")
    assert from_driver == gpu("NVIDIA L4")
    assert from_smi == gpu("NVIDIA H100 80GB HBM3")
    assert smi_calls == [NVIDIA_SMI_ARGV]  # an argv list: no shell
    assert nothing is None


def test_the_gpu_override_is_a_worker_setting() -> None:
    assert WorkerSettings.from_environ({GPU_MODEL_VARIABLE: "NVIDIA L40S"}).gpu_model == "NVIDIA L40S"


@pytest.mark.parametrize(
    ("cpu_max", "v1_quota", "affinity", "cores"),
    [
        ("400000 100000\n", None, 64, 4),  # a 4-core pod on a 64-core node
        ("150000 100000\n", None, 64, 2),  # 1.5 cores: rounded up
        ("max 100000\n", None, 12, 12),  # no quota: the CPUs it may run on
        ("800000 100000\n", None, 3, 3),  # pinned to fewer CPUs than the quota
        (None, ("200000", "100000"), 64, 2),  # cgroup v1
        (None, ("-1", "100000"), 6, 6),  # cgroup v1 without a quota
        (None, None, 5, 5),  # no cgroup files at all
    ],
)
def test_the_pods_cores_come_from_its_cgroup_quota_within_its_affinity(
    tmp_path: Path, cpu_max: str | None, v1_quota: tuple[str, str] | None, affinity: int, cores: int
) -> None:
    files = {
        "cpu.max": cpu_max,
        "quota": v1_quota[0] if v1_quota else None,
        "period": v1_quota[1] if v1_quota else None,
    }
    for name, text in files.items():
        if text is not None:
            (tmp_path / name).write_text(text)

    found = pod_cores(
        cpu_max=str(tmp_path / "cpu.max"),
        v1_quota=str(tmp_path / "quota"),
        v1_period=str(tmp_path / "period"),
        affinity=lambda: affinity,
    )
    assert found == cores


@pytest.mark.parametrize(
    ("gpu_name", "codec", "pix_fmt", "path"),
    [
        ("NVIDIA H100 80GB HBM3", "h264", "yuv420p", "nvdec"),
        ("NVIDIA A100-SXM4-40GB", "hevc", "yuv420p10le", "nvdec"),
        ("NVIDIA L4", "av1", "yuv420p", "nvdec"),
        ("NVIDIA A100-SXM4-40GB", "av1", "yuv420p", "software"),  # GA100's NVDEC has no AV1
        ("NVIDIA L4", "h264", "yuv444p", "software"),  # 4:4:4 H.264 is beyond NVDEC
        ("NVIDIA L4", "h264", "yuv420p10le", "software"),  # so is 10-bit H.264
        ("NVIDIA L4", "prores", "yuv422p10le", "software"),
        ("NVIDIA GeForce RTX 4090", "h264", "yuv420p", "software"),  # not in the table: nothing assumed
        (None, "h264", "yuv420p", "software"),
    ],
)
def test_decode_takes_nvdec_only_where_the_gpu_decodes_the_codec(
    gpu_name: str | None, codec: str, pix_fmt: str, path: str
) -> None:
    plan = choose_decode(codec, pix_fmt, gpu(gpu_name) if gpu_name else None, cores=6, size=UHD)
    assert plan.path == path
    assert (plan.device == "cuda") == (path == "nvdec")
    assert plan.threads == 4  # 4K: four 1080p frames' worth of pixels


def test_software_decode_threads_follow_the_frames_pixels_within_the_pods_cores() -> None:
    assert [decode_threads(16, *size) for size in (SD, FULL_HD, UHD, (15360, 8640))] == [1, 1, 4, MAX_DECODE_THREADS]
    assert decode_threads(2, *UHD) == 2
    assert choose_decode("h264", "yuv420p", None, cores=1, size=UHD).threads == 1


def test_encoder_threads_follow_the_frames_size_alone() -> None:
    """The bitstream depends on them: the same on every pod, whatever its cores; more for larger frames, 2 to 8."""
    assert [encoder_threads(*size) for size in (SD, (1280, 720), FULL_HD, (2560, 1440), UHD)] == [2, 2, 4, 8, 8]
    plans = {choose_encode("libx264", None, FULL_HD).threads for _ in range(2)}
    assert plans == {4}


@pytest.mark.parametrize(
    ("gpu_name", "codec", "path"),
    [
        ("NVIDIA L4", "h264_nvenc", "nvenc"),
        ("NVIDIA L40S", "hevc_nvenc", "nvenc"),
        ("NVIDIA A10G", "h264_nvenc", "nvenc"),
        ("NVIDIA H100 80GB HBM3", "libx264", "software"),
        ("NVIDIA L4", "libx264", "software"),  # the default never moves to NVENC by itself: the output stays libx264's
        ("NVIDIA GeForce RTX 4090", "h264_nvenc", "nvenc"),  # unknown: opening the encoder decides
        (None, "libx265", "software"),
    ],
)
def test_encode_uses_nvenc_exactly_when_the_options_name_it(gpu_name: str | None, codec: str, path: str) -> None:
    plan = choose_encode(codec, gpu(gpu_name) if gpu_name else None, FULL_HD)
    assert (plan.path, plan.codec) == (path, codec)
    if path == "software":
        assert plan.threads == encoder_threads(*FULL_HD)  # the bitstream depends on it: the frame's, not the pod's


@pytest.mark.parametrize("gpu_name", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200"])
def test_nvenc_on_a_gpu_without_nvenc_is_refused_naming_the_field_and_the_gpu(gpu_name: str) -> None:
    with pytest.raises(InvalidOptionError) as refused:
        choose_encode("h264_nvenc", gpu(gpu_name), FULL_HD)
    message = str(refused.value)
    assert message.startswith("output_video_encoder: h264_nvenc needs NVENC")
    assert gpu_name in message
    assert "has no NVENC" in message
    assert "libx264" in message


def test_the_encoder_check_refuses_nvenc_on_a_gpu_without_it_before_opening_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GPU_MODEL_VARIABLE, "NVIDIA H100 80GB HBM3")
    settings = EncoderSettings("h264_nvenc", "yuv420p", {})
    with pytest.raises(InvalidOptionError, match=r"^output_video_encoder: h264_nvenc needs NVENC.*NVIDIA H100 80GB"):
        check_encoder(settings, 64, 64, Fraction(25))


def test_a_software_decode_plan_gives_the_same_frames(make_video: MakeVideo) -> None:
    path = make_video(frames=12)
    probe = probe_video(path, path)
    plan = choose_decode(probe.codec, probe.pix_fmt, None, cores=1, size=(probe.width, probe.height))

    def digests(**kwargs: object) -> list[tuple[int | None, str]]:
        frames = decode_frames(path, probe, 3, 12, path, **kwargs)  # type: ignore[arg-type]
        return [(frame.pts, hashlib.md5(frame.to_ndarray().tobytes()).hexdigest()) for frame in frames]

    assert digests(plan=plan) == digests()


class RecordedPaths(WorkerMetrics):
    def __init__(self) -> None:
        self.paths: list[tuple[MediaStage, MediaPath]] = []

    def media_path(self, stage: MediaStage, path: MediaPath) -> None:
        self.paths.append((stage, path))


class FakeHWAccel:
    """PyAV's HWAccel, opening its device as a machine with a working driver (``opens``) or a broken one would."""

    opens = True

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type

    def create(self, codec: object) -> None:
        if not self.opens:
            raise PermissionError(1, "Operation not permitted")


def h100_spec() -> WorkSpec:
    options = Options(processors=[], output_video_encoder="libx264")
    return cast(
        WorkSpec,
        SimpleNamespace(
            probe=SimpleNamespace(codec="h264", pix_fmt="yuv420p", width=1920, height=1080, still_image=False),
            options=options,
            frame_options=lambda: options,
        ),
    )


@pytest.mark.parametrize("device_opens", [True, False])
def test_a_span_counts_the_paths_it_takes_and_says_them_in_one_line(
    monkeypatch: pytest.MonkeyPatch, device_opens: bool
) -> None:
    monkeypatch.setenv(GPU_MODEL_VARIABLE, "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(FakeHWAccel, "opens", device_opens)
    monkeypatch.setattr("facefusion_provider.media.decode.HWAccel", FakeHWAccel)
    metrics = RecordedPaths()

    paths = chosen_media_paths(h100_spec(), metrics)

    line = paths.line()
    assert "encode libx264 on the CPU" in line
    assert "NVIDIA H100 80GB HBM3" in line
    if device_opens:
        assert metrics.paths == [("decode", "nvdec"), ("encode", "software")]
        assert line.startswith("decode nvdec (h264 on one of NVIDIA H100's 7 NVDEC)")
    else:  # a driver that cannot open the device: software decoding, said so, never an "unreadable video"
        assert metrics.paths == [("decode", "software"), ("encode", "software")]
        assert line.startswith("decode software (h264, ")
        assert "NVDEC could not be opened" in line


def test_nvdec_that_cannot_open_here_decodes_in_software_with_the_same_frames(make_video: MakeVideo) -> None:
    path = make_video(frames=8)
    probe = probe_video(path, path)
    nvdec = choose_decode(probe.codec, probe.pix_fmt, gpu("NVIDIA L4"), cores=2, size=(probe.width, probe.height))
    usable = opened_decode_plan(nvdec, probe.codec)  # no CUDA on this machine (on a GPU machine: NVDEC itself)

    def digests(**kwargs: object) -> list[str]:
        frames = decode_frames(path, probe, 0, 8, path, **kwargs)  # type: ignore[arg-type]
        return [hashlib.md5(frame.reformat(format="yuv420p").to_ndarray().tobytes()).hexdigest() for frame in frames]

    assert nvdec.path == "nvdec"
    assert digests(plan=usable) == digests()


def test_the_machines_paths_here_are_software_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GPU_MODEL_VARIABLE, raising=False)
    monkeypatch.setattr("facefusion_provider.media.hardware.GPU_INFORMATION_GLOB", "/nonexistent/*/information")
    monkeypatch.setattr("facefusion_provider.media.hardware.NVIDIA_SMI_ARGV", ("/nonexistent/nvidia-smi",))
    probe = cast(VideoProbe, SimpleNamespace(codec="h264", pix_fmt="yuv420p", width=1920, height=1080))
    paths = media_paths(probe, "libx264", FULL_HD, {}, cores=2)
    assert (paths.decode.path, paths.encode.path, paths.gpu) == ("software", "software", None)
    assert "no NVIDIA GPU, 2 cores" in paths.line()
