"""The GPU check (issue 24): inference, NVDEC, NVENC and one whole worker run on an NVIDIA GPU, in under 8 minutes.

Run it through ``bench/gpu_check.sh``, which says so and writes nothing on a machine without an NVIDIA GPU. Steps, each
recorded with its figures or with why it could not run, so one missing piece (no NVENC, no TensorRT) never hides the
others:

1. the inswapper stand-in (bench/make_inswapper_standin.py) and the packaged RetinaFace detector, through
   bench/bench_engine.py, with the CUDA and TensorRT providers, fp32 and fp16, batch 1, 4 and 16, at 1080p;
2. 1080p H.264 decode: software (all cores), NVDEC through PyAV's ``HWAccel("cuda")``, and ``h264_cuvid``; then the
   worker's own decode path (media/decode.py ``decode_frames`` with the plan media/hardware.py chooses on this GPU),
   its frames compared with the software decoder's;
3. 1080p encode: ``h264_nvenc`` at the work's settings where the GPU has NVENC (A100, H100 and H200 have none: said so),
   and libx264 at the default settings for comparison;
4. one ``facefusion-worker run`` at 1080p with ``--execution-providers cuda`` and its per-stage timings;
5. the frame enhancer on a real_esrgan_x4 compute-equivalent network (bench/gpu_frame_enhancer.py) over 1080p frames
   in tiles of 256, x4: tiles and frames per second and peak GPU memory, through the worker's frame enhancer on
   onnxruntime's CUDA provider and through PyTorch's CUDA operators where PyTorch is installed;

and records which decode and encode path the worker's choice functions pick on this GPU for each encoder; then
writes OUT.json and OUT.md (default bench/results/engine-gpu) with the GPU, its driver and the command.

    bash bench/gpu_check.sh                       # the whole check
    python bench/gpu_check.py --budget-seconds 300 --out /tmp/engine-gpu
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(BENCH_DIR))

SIZE = (1920, 1080)
CLIP_SECONDS = 8  # 240 frames at 30 fps
ENGINE_PROVIDERS = ("cuda", "tensorrt")
PRECISIONS = ("fp32", "fp16")
BATCH_SIZES = (1, 4, 16)
ENGINE_FRAMES = 32
NO_GPU_LINE = (
    "gpu_check: no NVIDIA GPU on this machine (nvidia-smi missing or lists none): nothing measured, nothing written"
)
ORT_PROVIDER = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
FRAME_ENHANCER_SECONDS = 60.0  # what step 5 needs at most: the network built, 4 frames of 45 tiles, the PyTorch rows


class Budget:
    """The check's time: each step gets at most what is left, minus what the steps after it need."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def allows(self, seconds: float) -> bool:
        return self.left() >= seconds


def gpu_info(nvidia_smi: str) -> dict[str, str]:
    fields = "name,driver_version,memory.total,compute_cap"
    line = subprocess.run(
        [nvidia_smi, f"--query-gpu={fields}", "--format=csv,noheader"], check=True, capture_output=True, text=True
    ).stdout.splitlines()[0]
    return dict(zip(fields.split(","), (value.strip() for value in line.split(",")), strict=False))


def guarded(step: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A step's figures, or the error that stopped it (the other steps still run)."""
    began = time.monotonic()
    try:
        result = step()
    except Exception as error:  # one failed step is a figure too: what failed and why
        result = {"error": f"{type(error).__name__}: {error}"}
    result["seconds"] = round(time.monotonic() - began, 1)
    return result


def engine_runs(budget: Budget, models_cache: str, reserve: float) -> list[dict[str, Any]]:
    """bench_engine.py's inswapper path (detector + stand-in) per provider and precision, batch 1/4/16."""
    import onnxruntime

    available = onnxruntime.get_available_providers()
    runs: list[dict[str, Any]] = []
    for provider in ENGINE_PROVIDERS:
        for precision in PRECISIONS:
            name = {"provider": provider, "precision": precision}
            if ORT_PROVIDER[provider] not in available:
                reason = f"{ORT_PROVIDER[provider]} not in this onnxruntime ({', '.join(available)})"
                runs.append({**name, "error": reason + "; install onnxruntime-gpu (see bench/gpu_check.sh)"})
                continue
            # TensorRT builds an engine per batch shape (minutes); it gets what is left, CUDA a fixed slice.
            timeout = budget.left() - reserve
            if timeout < 30:
                runs.append({**name, "error": "skipped: the check's time budget is spent"})
                continue
            runs.append({**name, **guarded(functools.partial(_engine_run, provider, precision, timeout, models_cache))})
    return runs


def _engine_run(provider: str, precision: str, timeout: float, models_cache: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpu-check-engine-") as folder:
        out = Path(folder) / "engine"
        command = [
            sys.executable,
            str(BENCH_DIR / "bench_engine.py"),
            "--paths",
            "inswapper",
            "--execution-providers",
            provider,
            "--batch-sizes",
            *map(str, BATCH_SIZES),
            "--size",
            f"{SIZE[0]}x{SIZE[1]}",
            "--inswapper-frames",
            str(ENGINE_FRAMES),
            "--models-cache",
            models_cache,
            "--out",
            str(out),
            *(["--fp16"] if precision == "fp16" else []),
        ]
        completed = subprocess.run(command, check=False, capture_output=True, text=True, timeout=min(timeout, 300))
        if completed.returncode != 0:
            return {"error": f"exit {completed.returncode}: {_tail(completed.stderr)}"}
        (path,) = json.loads(out.with_suffix(".json").read_text())["paths"]
        return {"providers_used": path["providers_used"], "runs": path["runs"], "peak_rss_mib": path["peak_rss_mib"]}


TORCH_PRECISIONS = {"fp32": "float32", "fp16": "float16"}
SWAPPER_GRAPH = "inswapper stand-in (128 px)"
DETECTOR_GRAPH = "RetinaFace detector (640x384)"
TORCH_MIN_SECONDS = 1.0  # each figure times at least this long on the GPU
TORCH_TOLERANCE = 1e-3  # of the largest output value: the interpreter's fp32 against onnxruntime's


def torch_models(models_cache: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The graphs the torch rows time, with one input each (batch 1): the inswapper stand-in, and the packaged
    RetinaFace at what it sees of a letterboxed 1080p frame (640x360, rounded up to its stride: 640x384)."""
    import numpy as np

    from facefusion_provider.engine.store import store_from_environment

    rng = np.random.default_rng(0)
    swapper_feeds = {
        "target": rng.uniform(0.0, 1.0, (1, 3, 128, 128)).astype(np.float32),
        "source": rng.standard_normal((1, 512)).astype(np.float32),
    }
    detector_feeds = {"input": rng.uniform(-120.0, 130.0, (1, 3, 384, 640)).astype(np.float32)}
    return {
        SWAPPER_GRAPH: (str(Path(models_cache) / "inswapper_128.onnx"), swapper_feeds),
        DETECTOR_GRAPH: (store_from_environment(None).resolve("retinaface_mnet"), detector_feeds),
    }


def torch_engine_runs(budget: Budget, models_cache: str, reserve: float) -> dict[str, Any]:
    """Wherever PyTorch is installed (this workplace's GPU machines, whose onnxruntime has no CUDA provider): the same
    graphs through PyTorch's CUDA operators (bench/onnx_on_torch.py), fp32 and fp16, batch 1/4/16, inference alone
    (inputs already on the GPU); each graph first checked against onnxruntime's CPU output, and refused when it
    differs."""
    import torch

    if not torch.cuda.is_available():
        return {"error": f"PyTorch {torch.__version__} sees no CUDA device"}
    torch.backends.cudnn.benchmark = True  # cuDNN picks each convolution's fastest algorithm, as onnxruntime's does
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(0),
        "models": {},
    }
    for label, (path, feeds) in torch_models(models_cache).items():
        if not budget.allows(reserve + 30):
            report["models"][label] = {"error": "skipped: the check's time budget is spent"}
            continue
        report["models"][label] = guarded(functools.partial(_torch_model_runs, path, feeds, "cuda"))
    return report


def _torch_model_runs(path: str, feeds: dict[str, Any], device: str) -> dict[str, Any]:
    import torch
    from onnx_on_torch import TorchGraph, batch_of, compare_with_onnxruntime, time_graph

    agreement = compare_with_onnxruntime(path, feeds, device)
    result: dict[str, Any] = {"fp32_vs_onnxruntime_cpu": agreement, "runs": []}
    if agreement["max_relative_difference"] > TORCH_TOLERANCE:
        result["error"] = f"the interpreter's output differs from onnxruntime's ({agreement}): no figures"
        return result
    reference: list[Any] = []
    for precision, dtype_name in TORCH_PRECISIONS.items():
        graph = TorchGraph.load(path, device, getattr(torch, dtype_name))
        with torch.inference_mode():
            outputs = [output.float().cpu() for output in graph.run({k: graph.input(v) for k, v in feeds.items()})]
        if not reference:
            reference = outputs
        else:  # a reduced precision that overflows would time garbage: say how far it is from fp32
            result[f"{precision}_vs_fp32"] = max(
                float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))
                for got, want in zip(outputs, reference, strict=True)
            )
        for batch in BATCH_SIZES:
            inputs = {name: graph.input(batch_of(value, batch)) for name, value in feeds.items()}
            once = time_graph(graph, inputs, 1)
            repeats = max(3, min(200, int(TORCH_MIN_SECONDS / max(once, 1e-4))))
            seconds = time_graph(graph, inputs, repeats)
            result["runs"].append(
                {
                    "precision": precision,
                    "batch_size": batch,
                    "ms_per_batch": round(1000 * seconds, 3),
                    "ms_per_item": round(1000 * seconds / batch, 3),
                    "items_per_second": round(batch / seconds, 1),
                    "repeats": repeats,
                }
            )
        del graph
    return result


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def make_clip(folder: Path) -> Path:
    """8 s of 1080p H.264 (carphone's face, a close-up) with AAC, as bench/bench_media.py makes its clip."""
    from bench_media import make_clip as make

    path = folder / "clip-1080p.mp4"
    make(str(path), CLIP_SECONDS, *SIZE)
    return path


def _timed_frames(frames: Iterator[Any]) -> dict[str, Any]:
    began, cpu = time.perf_counter(), time.process_time()
    count, formats = 0, set()
    for frame in frames:
        count += 1
        formats.add(frame.format.name)
    wall = time.perf_counter() - began
    return {
        "frames": count,
        "fps": round(count / wall, 1),
        "cpu_ms_per_frame": round(1000 * (time.process_time() - cpu) / max(count, 1), 2),
        "frame_formats": sorted(formats),
    }


def decode_figures(clip: Path) -> dict[str, Any]:
    """Software, NVDEC (hwaccel cuda, frames kept on the device and downloaded) and h264_cuvid decode of the clip."""
    import av
    from av.codec.hwaccel import HWAccel

    def software() -> Iterator[Any]:
        with av.open(str(clip)) as container:
            container.streams.video[0].codec_context.thread_type = "AUTO"
            yield from container.decode(video=0)

    def nvdec(on_device: bool) -> Callable[[], Iterator[Any]]:
        def frames() -> Iterator[Any]:
            hwaccel = HWAccel("cuda", allow_software_fallback=False, is_hw_owned=on_device)
            with av.open(str(clip), hwaccel=hwaccel) as container:
                yield from container.decode(video=0)

        return frames

    def cuvid() -> Iterator[Any]:
        with av.open(str(clip)) as container:
            stream = container.streams.video[0]
            context = av.CodecContext.create("h264_cuvid", "r")
            assert isinstance(context, av.VideoCodecContext)
            context.extradata = stream.codec_context.extradata
            for packet in container.demux(stream):
                yield from context.decode(packet)

    return {
        "software (libavcodec h264, all cores)": guarded(lambda: _timed_frames(software())),
        "NVDEC hwaccel cuda, frames downloaded": guarded(lambda: _timed_frames(nvdec(False)())),
        "NVDEC hwaccel cuda, frames kept on the GPU": guarded(lambda: _timed_frames(nvdec(True)())),
        "h264_cuvid": guarded(lambda: _timed_frames(cuvid())),
    }


CHOICE_ENCODERS = ("libx264", "h264_nvenc", "hevc_nvenc")


def media_choices(probe: Any, environ: dict[str, str]) -> dict[str, Any]:
    """What media/hardware.py picks on this machine for this video, per encoder (or the refusal it gives)."""
    from facefusion_provider.exceptions import InvalidOptionError
    from facefusion_provider.media.decode import opened_decode_plan
    from facefusion_provider.media.hardware import choose_decode, choose_encode, detect_gpu, pod_cores

    gpu, cores = detect_gpu(environ), pod_cores()
    codec, pix_fmt, size = probe.codec, probe.pix_fmt, (probe.width, probe.height)
    decode = choose_decode(codec, pix_fmt, gpu, cores, size)
    opened = opened_decode_plan(decode, codec)
    encode: dict[str, Any] = {}
    for encoder in CHOICE_ENCODERS:
        try:
            plan = choose_encode(encoder, gpu, size)
        except InvalidOptionError as error:
            encode[encoder] = {"error": str(error)}
            continue
        encode[encoder] = {"path": plan.path, "threads": plan.threads, "reason": plan.reason}
    return {
        "gpu": gpu.name if gpu else None,
        "gpu_model": gpu.model.key if gpu and gpu.model else None,
        "cores": cores,
        "video": f"{codec} {pix_fmt}",
        "decode": {
            "path": decode.path,
            "threads": decode.threads,
            "reason": decode.reason,
            "opened": {"path": opened.path, "reason": opened.reason},  # what a span then decodes with
        },
        "encode": encode,
    }


def worker_decode_figures(clip: Path) -> dict[str, Any]:
    """The worker's decode path (decode_frames with this machine's plan) against the software plan: speed, and whether
    its frames equal the software decoder's (NVDEC's nv12 deinterleaved to yuv420p, which loses nothing)."""
    import hashlib

    from facefusion_provider.media.decode import decode_frames, opened_decode_plan
    from facefusion_provider.media.hardware import choose_decode, detect_gpu, pod_cores
    from facefusion_provider.media.probe import probe_video

    probe = probe_video(str(clip), str(clip))
    cores = pod_cores()
    size = (probe.width, probe.height)
    gpu = detect_gpu(os.environ)
    chosen = opened_decode_plan(choose_decode(probe.codec, probe.pix_fmt, gpu, cores, size), probe.codec)
    software = choose_decode(probe.codec, probe.pix_fmt, None, cores, size)

    def frames(plan: Any) -> Iterator[Any]:
        return decode_frames(str(clip), probe, 0, probe.frame_count, str(clip), plan=plan)

    def digests(plan: Any) -> list[str]:
        return [
            hashlib.md5(frame.reformat(format="yuv420p").to_ndarray().tobytes()).hexdigest() for frame in frames(plan)
        ]

    results: dict[str, Any] = {
        f"worker decode_frames, chosen plan: {chosen.path}, {chosen.threads} threads": guarded(
            lambda: _timed_frames(frames(chosen))
        ),
        f"worker decode_frames, software plan, {software.threads} threads": guarded(
            lambda: _timed_frames(frames(software))
        ),
    }
    if chosen.path != software.path:
        results["worker decode_frames, chosen plan's frames equal software's"] = guarded(
            lambda: {"equal": digests(chosen) == digests(software)}
        )
    return results


def encode_figures(clip: Path, gpu_name: str, folder: Path) -> dict[str, Any]:
    """h264_nvenc (where this GPU has it) and libx264 at the work's settings, on the clip's decoded frames."""
    import av

    from facefusion_provider.exceptions import InvalidOptionError
    from facefusion_provider.media.encode import EncoderSettings, VideoEncoder, check_encoder, codec_options
    from facefusion_provider.options import Options

    options = Options()
    with av.open(str(clip)) as container:
        frames = [frame.reformat(format="yuv420p") for frame in container.decode(video=0)]
    rate = Fraction(30)
    results: dict[str, Any] = {}
    for codec in ("h264_nvenc", "libx264"):
        settings = EncoderSettings(
            codec, "yuv420p", codec_options(codec, options.output_video_quality, options.output_video_preset)
        )
        label = f"{codec} ({' '.join(f'{k}={v}' for k, v in settings.options.items())})"
        try:
            check_encoder(settings, *SIZE, rate)
        except InvalidOptionError as error:
            results[label] = {
                "error": f"no NVENC on this {gpu_name}: {error}" if codec.endswith("nvenc") else str(error)
            }
            continue

        def encode(settings: EncoderSettings = settings, codec: str = codec) -> dict[str, Any]:
            path = folder / f"encoded-{codec}.mp4"
            began, cpu = time.perf_counter(), time.process_time()
            with VideoEncoder(
                str(path), settings, width=SIZE[0], height=SIZE[1], frame_rate=rate, time_base=1 / rate
            ) as out:
                for number, frame in enumerate(frames):
                    out.encode(frame, number)
                out.close()
            wall = time.perf_counter() - began
            return {
                "frames": len(frames),
                "fps": round(len(frames) / wall, 1),
                "cpu_ms_per_frame": round(1000 * (time.process_time() - cpu) / len(frames), 2),
                "bytes": path.stat().st_size,
            }

        results[label] = guarded(encode)
    return results


CPU_WORKER_FRAMES = 48  # a worker run whose inference falls back to the CPU decodes and encodes this many frames


def worker_command() -> list[str]:
    """The worker's console script beside this Python, else its module (a machine with the project on PYTHONPATH)."""
    script = Path(sys.executable).with_name("facefusion-worker")
    return [str(script)] if script.exists() else [sys.executable, "-m", "facefusion_provider.worker"]


def worker_run(clip: Path, models_dir: str, folder: Path, timeout: float, on_cuda: bool) -> dict[str, Any]:
    """One whole ``facefusion-worker run`` at 1080p on the GPU; its JSON summary holds the per-stage timings. Where
    onnxruntime has no CUDA provider, inference runs on the CPU over the first CPU_WORKER_FRAMES frames, so the run
    still shows the worker's decode and encode paths on this machine."""
    from bench_engine import write_source_image

    source = write_source_image(folder)
    inference = ["cuda"] if on_cuda else ["cpu", "--execution-thread-count", str(os.cpu_count() or 1)]
    trim = [] if on_cuda else ["--trim-frame-end", str(CPU_WORKER_FRAMES)]
    command = [
        *worker_command(),
        "run",
        "--source",
        source,
        "--target",
        str(clip),
        "--output",
        str(folder / "out.mp4"),
        "--work-root",
        str(folder / "work"),
        "--models-dir",
        models_dir,
        "--face-swapper-model",
        "inswapper_128",
        "--execution-providers",
        *inference,
        *trim,
    ]
    began = time.perf_counter()
    completed = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - began
    result: dict[str, Any] = {
        "command": shlex.join(["facefusion-worker", *command[command.index("run") :]]),
        "inference": "CUDA" if on_cuda else "CPU (onnxruntime has no CUDA provider here)",
        "exit_code": completed.returncode,
        "wall_s": round(wall, 2),
        "log": [
            line
            for line in completed.stderr.splitlines()
            if "provider" in line or "encoder" in line or ": decode " in line
        ][-10:],
    }
    if completed.returncode != 0:
        result["error"] = _tail(completed.stderr)
        return result
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    result["frames"] = summary.get("frame_count")
    result["timings_s"] = summary.get("timings")
    result["fps"] = round(summary["frame_count"] / wall, 1) if summary.get("frame_count") else None
    return result


def markdown(report: dict[str, Any]) -> str:
    gpu = report["gpu"]
    lines = [
        "# GPU check",
        "",
        f"Command: `{report['command']}`",
        "",
        f"GPU: {gpu.get('name')}, driver {gpu.get('driver_version')}, {gpu.get('memory.total')}, compute capability "
        f"{gpu.get('compute_cap')}; onnxruntime {report['onnxruntime']} ({', '.join(report['onnxruntime_providers'])}); "
        f"{report['cpu_count']} CPUs. Whole check: {report['seconds']} s.",
        "",
        f"## Inference at {SIZE[0]}x{SIZE[1]} (bench/bench_engine.py's inswapper path: the packaged RetinaFace detector "
        "and the inswapper stand-in)",
        "",
        "| provider | precision | batch | fps | ms/frame | stages (ms/frame) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run in report["engine"]:
        if "error" in run:
            lines.append(f"| {run['provider']} | {run['precision']} | - | - | - | {run['error']} |")
            continue
        for batch in run["runs"]:
            stages = ", ".join(f"{name} {ms}" for name, ms in batch["stage_ms_per_frame"].items())
            lines.append(
                f"| {run['provider']} ({', '.join(run['providers_used'])}) | {run['precision']} | {batch['batch_size']} "
                f"| {batch['fps']} | {batch['ms_per_frame']} | {stages} |"
            )
    lines += torch_markdown(report.get("engine_torch"))
    from gpu_frame_enhancer import markdown as frame_enhancer_markdown

    lines += frame_enhancer_markdown(report.get("frame_enhancer"))
    clip = f"{SIZE[0]}x{SIZE[1]}, {CLIP_SECONDS * 30} frames"
    choices = report.get("media_paths") or {}
    if "error" in choices:
        lines += ["", f"## Paths the worker chooses here (media/hardware.py): failed: {choices['error']}"]
    elif choices:
        lines += [
            "",
            f"## Paths the worker chooses here (media/hardware.py): {choices.get('gpu')} "
            f"(table row {choices.get('gpu_model')}), {choices.get('cores')} cores, {choices.get('video')}",
            "",
            f"- decode: {choices['decode']['path']} ({choices['decode']['reason']})",
        ]
        opened = choices["decode"].get("opened") or {}
        if opened and opened.get("path") != choices["decode"]["path"]:
            lines.append(f"- decode as a span opens it here: {opened['path']} ({opened['reason']})")
        for encoder, choice in choices["encode"].items():
            said = choice.get("error") or f"{choice['path']} ({choice['reason']})"
            lines.append(f"- encode `{encoder}`: {said}")
    lines += ["", f"## Decode and encode, H.264 {clip}", "", "| what | fps | CPU ms/frame | note |"]
    lines.append("| --- | --- | --- | --- |")
    for group in ("decode", "encode"):
        for name, figure in report[group].items():
            if "error" in figure:
                lines.append(f"| {group}: {name} | - | - | {figure['error']} |")
            elif "equal" in figure:
                lines.append(f"| {group}: {name} | - | - | {'yes' if figure['equal'] else 'NO: frames differ'} |")
            else:
                note = ", ".join(figure.get("frame_formats", [])) or f"{figure.get('bytes', 0):,} bytes"
                lines.append(f"| {group}: {name} | {figure['fps']} | {figure['cpu_ms_per_frame']} | {note} |")
    run = report["worker_run"]
    lines += ["", f"## One whole worker run at {SIZE[0]}x{SIZE[1]}, inference on {run.get('inference', 'CUDA')}", ""]
    if "error" in run:
        lines.append(f"Failed: {run['error']}")
    else:
        timings = ", ".join(f"{name} {value:.2f}" for name, value in (run.get("timings_s") or {}).items())
        lines.append(f"`{run['command']}`: {run['frames']} frames in {run['wall_s']} s ({run['fps']} fps); {timings}.")
    lines += [
        "",
        "TensorRT here always builds fp16 engines (engine/runtime.py sets `trt_fp16_enable`), so its fp32 row is the "
        "fp32 model run in fp16. The stand-in has inswapper_128's layer shapes and multiply-adds, not its weights: its "
        "speed is the real model's, its pixels are not.",
        "",
    ]
    return "\n".join(lines)


def torch_markdown(engine_torch: dict[str, Any] | None) -> list[str]:
    """The PyTorch rows: per graph, its agreement with onnxruntime and its speed per precision and batch."""
    if not engine_torch:
        return []
    if "error" in engine_torch:
        return ["", f"## The same graphs through PyTorch's CUDA operators: failed: {engine_torch['error']}"]
    lines = [
        "",
        f"## The same graphs through PyTorch's CUDA operators (bench/onnx_on_torch.py; PyTorch {engine_torch['torch']}, "
        f"cuDNN {engine_torch['cudnn']}, {engine_torch['device']})",
        "",
        "Inference alone, inputs already on the GPU; each graph's fp32 output first compared with onnxruntime's on the "
        "CPU. This is PyTorch's speed for the graph, which onnxruntime's CUDA provider (cuDNN too) should approach.",
        "",
        "| graph | precision | batch | ms per batch | ms per item | items/s | vs onnxruntime (max relative difference) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, model in engine_torch["models"].items():
        agreement = model.get("fp32_vs_onnxruntime_cpu", {}).get("max_relative_difference")
        agreed = "-" if agreement is None else f"{agreement:.1e}"
        if model.get("fp16_vs_fp32") is not None:
            agreed += f" (fp16 vs fp32: {model['fp16_vs_fp32']:.1e})"
        if "error" in model:
            lines.append(f"| {label} | - | - | - | - | - | {agreed}; {model['error']} |")
            continue
        for run in model["runs"]:
            lines.append(
                f"| {label} | {run['precision']} | {run['batch_size']} | {run['ms_per_batch']} | {run['ms_per_item']} "
                f"| {run['items_per_second']} | {agreed} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvidia-smi", default=os.environ.get("NVIDIA_SMI", "nvidia-smi"))
    parser.add_argument("--budget-seconds", type=float, default=450.0, help="the whole check's time")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "facefusion-provider" / "standins"
    parser.add_argument("--models-cache", default=str(cache), help="where the inswapper stand-ins are written")
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "engine-gpu"), help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)
    try:
        gpu = gpu_info(args.nvidia_smi)
    except (OSError, subprocess.CalledProcessError, IndexError):
        print(NO_GPU_LINE)
        return 0
    import onnxruntime

    budget = Budget(args.budget_seconds)
    started = time.monotonic()
    command = shlex.join(["bash", "bench/gpu_check.sh", *(argv if argv is not None else sys.argv[1:])])
    # The stand-ins first: the engine runs and the worker run share them (fp16 only for onnxruntime's CUDA rows).
    for fp16 in (False, True) if ORT_PROVIDER["cuda"] in onnxruntime.get_available_providers() else (False,):
        standin = [sys.executable, str(BENCH_DIR / "make_inswapper_standin.py"), "--out", args.models_cache]
        subprocess.run(standin + (["--fp16"] if fp16 else []), check=True)
    report: dict[str, Any] = {
        "command": command,
        "gpu": gpu,
        "cpu_count": os.cpu_count(),
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
    }
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as temp:
        folder = Path(temp)
        clip = make_clip(folder)
        from facefusion_provider.media.probe import probe_video

        probe = probe_video(str(clip), str(clip))
        report["media_paths"] = guarded(lambda: media_choices(probe, dict(os.environ)))
        report["decode"] = {**decode_figures(clip), **worker_decode_figures(clip)}
        report["encode"] = encode_figures(clip, gpu.get("name", "GPU"), folder)
        print(json.dumps({k: report[k] for k in ("media_paths", "decode", "encode")}), flush=True)
        worker_reserve = 120.0
        reserve = worker_reserve + FRAME_ENHANCER_SECONDS  # what the steps after the engine rows need
        report["engine"] = engine_runs(budget, args.models_cache, reserve=reserve)
        print(json.dumps({"engine": report["engine"]}), flush=True)
        if importlib.util.find_spec("torch") is not None:
            report["engine_torch"] = guarded(lambda: torch_engine_runs(budget, args.models_cache, reserve=reserve))
            print(json.dumps({"engine_torch": report["engine_torch"]}), flush=True)
        from gpu_frame_enhancer import frame_enhancer_figures

        if budget.allows(worker_reserve + FRAME_ENHANCER_SECONDS):
            report["frame_enhancer"] = guarded(
                lambda: frame_enhancer_figures(folder / "frame-enhancer", nvidia_smi=args.nvidia_smi)
            )
        else:
            report["frame_enhancer"] = {"error": "skipped: the check's time budget is spent"}
        print(json.dumps({"frame_enhancer": report["frame_enhancer"]}), flush=True)
        on_cuda = ORT_PROVIDER["cuda"] in report["onnxruntime_providers"]
        report["worker_run"] = guarded(
            lambda: worker_run(clip, args.models_cache, folder, max(30.0, budget.left()), on_cuda)
        )
    report["seconds"] = round(time.monotonic() - started, 1)
    from bench_engine import write_results

    write_results(Path(args.out), report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
