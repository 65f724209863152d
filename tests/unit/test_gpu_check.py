"""bench/gpu_check.sh on a machine without an NVIDIA GPU: one line that says so, exit 0, nothing written; the check's
steps that can run on a CPU (the media path choices, the worker's decode, the frame enhancer's step in its tiny mode)
and its report's sections."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from system_binaries import require_binary

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.sh"
RESULTS = REPO / "bench" / "results"
NO_GPU = "no NVIDIA GPU on this machine"


def _results_state() -> dict[str, float]:
    return {path.name: path.stat().st_mtime for path in RESULTS.glob("engine-gpu.*")}


def _fake_nvidia_smi(folder: Path) -> Path:
    """An nvidia-smi that finds no GPU, as on a machine with the tools but no device (exit 9, nothing listed)."""
    path = folder / "nvidia-smi"
    path.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2\nexit 9\n"
    )
    path.chmod(0o755)
    return path


def _nvidia_smi_with_a_gpu(folder: Path) -> Path:
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
    path.chmod(0o755)
    return path


def _run_script(out: Path, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("bash", package="bash"), str(SCRIPT), "--out", str(out)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("nvidia_smi", ["missing", "lists no GPU"])
def test_without_gpu_says_so_and_writes_nothing(tmp_path: Path, nvidia_smi: str) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    command = str(tools / "absent-nvidia-smi") if nvidia_smi == "missing" else str(_fake_nvidia_smi(tools))
    out = tmp_path / "out"
    out.mkdir()
    before = _results_state()
    environment = {**os.environ, "NVIDIA_SMI": command, "PYTHON": sys.executable}
    completed = subprocess.run(
        [require_binary("bash", package="bash"), str(SCRIPT), "--out", str(out / "engine-gpu")],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert len(lines) == 1 and NO_GPU in lines[0], completed.stdout
    assert "nothing written" in lines[0]
    assert list(out.iterdir()) == []
    assert _results_state() == before


def test_python_entry_without_gpu_says_so_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "engine-gpu"
    script = str(REPO / "bench" / "gpu_check.py")
    completed = subprocess.run(
        [sys.executable, script, "--nvidia-smi", str(_fake_nvidia_smi(tmp_path)), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert NO_GPU in completed.stdout
    assert not list(tmp_path.glob("engine-gpu*"))


def test_with_a_gpu_hands_the_check_to_python_with_its_arguments(tmp_path: Path) -> None:
    """With a GPU listed, the script runs bench/gpu_check.py (here a stand-in interpreter that records its argv)."""
    nvidia_smi = _nvidia_smi_with_a_gpu(tmp_path)
    recorded = tmp_path / "argv"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n[ "$1" = -c ] && {{ echo {tmp_path}; exit 0; }}\necho "$@" >> {recorded}\n')
    python.chmod(0o755)
    environment = {**os.environ, "NVIDIA_SMI": str(nvidia_smi), "PYTHON": str(python), "GPU_CHECK_INSTALL": "0"}
    completed = _run_script(tmp_path / "engine-gpu", environment)
    assert completed.returncode == 0, completed.stderr
    assert NO_GPU not in completed.stdout
    assert recorded.read_text().split() == [
        "bench/gpu_check.py",
        "--nvidia-smi",
        str(nvidia_smi),
        "--out",
        str(tmp_path / "engine-gpu"),
    ]


def _gpu_check_module() -> Any:
    sys.path.insert(0, str(REPO / "bench"))
    import gpu_check

    return gpu_check


@pytest.mark.parametrize(
    ("gpu_name", "decode", "encodes"),
    [
        ("NVIDIA H100 80GB HBM3", "nvdec", {"libx264": "software", "h264_nvenc": None, "hevc_nvenc": None}),
        ("NVIDIA L4", "nvdec", {"libx264": "software", "h264_nvenc": "nvenc", "hevc_nvenc": "nvenc"}),
    ],
)
def test_the_check_records_the_paths_the_worker_chooses_on_its_gpu(
    gpu_name: str, decode: str, encodes: dict[str, str | None]
) -> None:
    """On an H100 the report says NVDEC, libx264, and the refusal an h264_nvenc run would get; on an L4, NVENC."""
    gpu_check = _gpu_check_module()
    probe = SimpleNamespace(codec="h264", pix_fmt="yuv420p", width=1920, height=1080)
    choices = gpu_check.media_choices(probe, {"FACEFUSION_GPU_MODEL": gpu_name})

    assert choices["gpu"] == gpu_name
    assert choices["decode"]["path"] == decode
    assert choices["decode"]["opened"]["path"] in {"nvdec", "software"}  # software here: no CUDA device to open
    for encoder, path in encodes.items():
        if path is None:
            assert gpu_name in choices["encode"][encoder]["error"]
        else:
            assert choices["encode"][encoder]["path"] == path
    report = {
        "command": "bash bench/gpu_check.sh",
        "gpu": {"name": gpu_name},
        "onnxruntime": "x",
        "onnxruntime_providers": [],
        "cpu_count": 16,
        "seconds": 1,
        "engine": [],
        "media_paths": choices,
        "decode": {},
        "encode": {},
        "worker_run": {"error": "not run"},
    }
    text = gpu_check.markdown(report)
    assert f"- decode: {decode} (" in text
    assert (
        "- encode `h264_nvenc`: "
        + ("output_video_encoder: h264_nvenc needs NVENC" if encodes["h264_nvenc"] is None else "nvenc")
        in text
    )


def test_the_workers_own_decode_path_is_timed_on_the_clip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from synth import VideoSpec, pattern_frames, write_video

    monkeypatch.delenv("FACEFUSION_GPU_MODEL", raising=False)
    gpu_check = _gpu_check_module()
    monkeypatch.setattr("facefusion_provider.media.hardware.NVIDIA_SMI_ARGV", (str(tmp_path / "no-nvidia-smi"),))
    monkeypatch.setattr("facefusion_provider.media.hardware.GPU_INFORMATION_GLOB", str(tmp_path / "none" / "*"))
    clip = tmp_path / "clip.mp4"
    spec = VideoSpec()
    write_video(str(clip), spec, pattern_frames(10, spec.width, spec.height))

    figures = gpu_check.worker_decode_figures(clip)

    chosen = next(value for name, value in figures.items() if "chosen plan: software" in name)
    assert chosen["frames"] == 10 and "error" not in chosen


def test_without_a_venv_it_installs_the_carried_wheels_and_runs_with_the_system_python(tmp_path: Path) -> None:
    """This workplace's GPU machines: no .venv, no network. The check installs .whl's wheels into a folder of its own
    with the machine's python3 (never touching its onnxruntime) and runs with that folder and plugins/ on the path."""
    nvidia_smi = _nvidia_smi_with_a_gpu(tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("av-18.1.0-cp311-abi3-manylinux_2_28_x86_64.whl", "pydantic-2.14.4-py3-none-any.whl"):
        (wheels / name).write_bytes(b"")
    recorded = tmp_path / "calls"
    python = tmp_path / "python3"
    python.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = -c ] && {{ echo {tmp_path}/site-packages; exit 0; }}\n'
        f'[ "$1" = -m ] && {{ echo "$@" >> {recorded}; exit 0; }}\n'
        f'echo "PYTHONPATH=$PYTHONPATH $@" >> {recorded}\n'
    )
    python.chmod(0o755)
    environment = {
        **os.environ,
        "NVIDIA_SMI": str(nvidia_smi),
        "PYTHON": str(tmp_path / "no-venv" / "python"),
        "GPU_CHECK_SYSTEM_PYTHON": str(python),
        "GPU_CHECK_WHEELS": str(wheels),
    }
    environment.pop("PYTHONPATH", None)
    completed = _run_script(tmp_path / "engine-gpu", environment)

    assert completed.returncode == 0, completed.stderr
    install, run = recorded.read_text().splitlines()
    arguments = install.split()
    assert (
        arguments[:4] == ["-m", "pip", "install", "--quiet"]
        and "--no-index" in arguments
        and "uninstall" not in install
    )
    target = arguments[arguments.index("--target") + 1]
    assert sorted(Path(path).name for path in arguments if path.endswith(".whl")) == sorted(
        path.name for path in wheels.iterdir()
    )
    path, *argv = run.split()
    assert path == f"PYTHONPATH={target}:{REPO / 'plugins'}"
    assert argv == ["bench/gpu_check.py", "--nvidia-smi", str(nvidia_smi), "--out", str(tmp_path / "engine-gpu")]


def test_the_pytorch_rows_say_what_ran_and_how_it_agreed_with_onnxruntime() -> None:
    gpu_check = _gpu_check_module()
    runs = [
        {"precision": "fp16", "batch_size": 16, "ms_per_batch": 8.0, "ms_per_item": 0.5, "items_per_second": 2000.0}
    ]
    text = "\n".join(
        gpu_check.torch_markdown(
            {
                "torch": "2.11.0",
                "cudnn": 91900,
                "device": "NVIDIA H200",
                "models": {
                    "inswapper stand-in (128 px)": {
                        "fp32_vs_onnxruntime_cpu": {"max_relative_difference": 2e-5},
                        "runs": runs,
                    },
                    "RetinaFace detector (640x384)": {
                        "fp32_vs_onnxruntime_cpu": {"max_relative_difference": 0.5},
                        "error": "the interpreter's output differs from onnxruntime's: no figures",
                    },
                },
            }
        )
    )
    assert "| inswapper stand-in (128 px) | fp16 | 16 | 8.0 | 0.5 | 2000.0 | 2.0e-05 |" in text
    assert "| RetinaFace detector (640x384) | - | - | - | - | - | 5.0e-01; the interpreter's output differs" in text
    assert gpu_check.torch_markdown(None) == []


def test_the_frame_enhancer_network_has_real_esrgan_x4s_interface_and_size() -> None:
    """The compute-equivalent network: real_esrgan_x4's input and output (free batch and sides, x4), and RRDBNet x4's
    16,697,987 parameters (Real-ESRGAN's RealESRGAN_x4plus), 1.17 T multiply-adds per 256 px tile."""
    import numpy as np
    import onnxruntime

    from facefusion_provider.engine.models import MODELS

    _gpu_check_module()
    import gpu_frame_enhancer

    model, parameters, multiply_adds = gpu_frame_enhancer.build_network(gpu_frame_enhancer.FULL)

    assert parameters == 16_697_987
    assert 1.17e12 < multiply_adds * 256 * 256 < 1.18e12
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    spec = MODELS["real_esrgan_x4"]
    for declared, found in ((spec.inputs, session.get_inputs()), (spec.outputs, session.get_outputs())):
        assert [(name, [d if isinstance(d, int) else None for d in shape]) for name, shape in declared] == [
            (item.name, [d if isinstance(d, int) else None for d in item.shape]) for item in found
        ]
    (output,) = session.run(None, {"input": np.random.default_rng(0).random((2, 3, 8, 12), np.float32)})
    assert output.shape == (2, 3, 32, 48) and np.isfinite(output).all()


def test_the_frame_enhancer_step_runs_its_tiny_network_in_tiles_on_the_cpu_and_says_where_gpu_figures_come_from(
    tmp_path: Path,
) -> None:
    """Tiny mode, as the check's step runs on a GPU: the worker's frame enhancer over a 320x180 frame (2 tiles of 256)
    to 1280x720 on the CPU provider, its tiles/s and frames/s, no GPU memory; the report's section has the row and
    names where the GPU figures would come from."""
    gpu_check = _gpu_check_module()
    import gpu_frame_enhancer

    figures = gpu_frame_enhancer.frame_enhancer_figures(tmp_path / "models", tiny=True, nvidia_smi=None)

    run = figures["onnxruntime"]
    assert run["providers"][0] == "CPUExecutionProvider", run
    assert figures["tiles_per_frame"] == 2 and run["tiles"] == 2 * run["frames"]
    assert run["output_size"] == "1280x720"
    assert run["tiles_per_second"] > 0 and run["frames_per_second"] > 0
    assert run["peak_gpu_memory_mib"] is None
    assert "bash bench/gpu_check.sh" in figures["gpu_figures"]
    report = {
        "command": "bash bench/gpu_check.sh",
        "gpu": {"name": "none"},
        "onnxruntime": "x",
        "onnxruntime_providers": [],
        "cpu_count": 2,
        "seconds": 1,
        "engine": [],
        "frame_enhancer": figures,
        "decode": {},
        "encode": {},
        "worker_run": {"error": "not run"},
    }
    text = gpu_check.markdown(report)
    assert "## Frame enhancer, real_esrgan_x4 compute-equivalent (tiny network" in text
    assert "320x180 frames in 2 tiles of 256 px, x4" in text
    row = f"| worker's frame enhancer, onnxruntime (CPUExecutionProvider) | fp32 | 8 | {run['tiles_per_second']} |"
    assert row in text
    assert "GPU figures: none measured here: the GPU figures come from `bash bench/gpu_check.sh`" in text


def test_the_frame_enhancer_rows_on_a_gpu_give_each_runner_s_speed_and_memory() -> None:
    """As a GPU run reports them: the worker's step on onnxruntime's CUDA provider with nvidia-smi's peak, and
    PyTorch's rows per precision and tiles per call with its allocator's peak; no 'none measured' line."""
    _gpu_check_module()
    import gpu_frame_enhancer

    network = {
        "blocks": 23,
        "features": 64,
        "growth": 32,
        "parameters": 16_697_987,
        "multiply_adds_per_pixel": 17_926_848,
        "tera_multiply_adds_per_tile": 1.1749,
    }
    onnxruntime_run = {
        "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
        "frames": 3,
        "tiles": 135,
        "tiles_per_call": 8,
        "output_size": "7680x4320",
        "tiles_per_second": 90.0,
        "frames_per_second": 2.0,
        "peak_gpu_memory_mib": 9000,
        "gpu_memory_grown_mib": 8500,
        "peak_rss_mib": 3000,
    }
    torch_run = {"precision": "fp16", "tiles_per_call": 8, "tiles_per_second": 300.0, "frames_per_second": 6.667}
    report = {
        "network": network,
        "tiny": False,
        "frame_size": "1920x1080",
        "tile": 256,
        "tiles_per_frame": 45,
        "onnxruntime": onnxruntime_run,
        "torch": {
            "device": "NVIDIA H100",
            "vs_onnxruntime_cpu": {"max_relative_difference": 3e-6},
            "runs": [{**torch_run, "peak_gpu_memory_mib": 6000}],
        },
    }

    text = "\n".join(gpu_frame_enhancer.markdown(report))

    assert "1920x1080 frames in 45 tiles of 256 px, x4" in text and "16,697,987 parameters" in text
    assert (
        "| worker's frame enhancer, onnxruntime (CUDAExecutionProvider) | fp32 | 8 | 90.0 | 2.0 | 9000 (+8500" in text
    )
    assert "| PyTorch CUDA operators (NVIDIA H100) | fp16 | 8 | 300.0 | 6.667 | 6000 | inference alone" in text
    assert "none measured" not in text
