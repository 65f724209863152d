"""Cores per GPU worker pod, by GPU type, so that the GPU stays the bottleneck (issue 24 item 4).

Reads the measured CPU milliseconds per 1080p frame (bench/results/cpu-stages.json: the inswapper path's work beside
inference, its decode, libx264 per preset), takes NVDEC and NVENC from the GPU table (media/hardware.py) and each GPU
type's inference rate (from a GPU check's results, bench/results/engine-gpu.json, when one has run; else stated: the
table says which), and computes
the cores a pod needs to feed its GPU, capped by what the GPU's usual cloud node has per GPU. Writes the table into
deploy/README.md and deploy/chart/README.md, the CPU requests into deploy/chart/values.yaml and the Airflow side's
``settings.GPU_POD_CPU`` (the cores span pods ask for by ``[facefusion] gpu_type``; deploy/airflow-values.yaml's
``gpu_type`` is the chart's default GPU type).

    python bench/pod_sizing.py            # rewrite the table and the requests from the current measurements
    python bench/pod_sizing.py --check    # exit 1 when a file differs from what the measurements give

Rerun it after bench/bench_cpu_stages.py changes the CPU costs or bench/gpu_check.sh measures a GPU;
tests/unit/kubernetes/test_pod_sizing.py fails until then.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(BENCH_DIR))

from gpu_check import DETECTOR_GRAPH, SWAPPER_GRAPH  # noqa: E402
from scaling_model import Stated  # noqa: E402

from facefusion_provider.media.hardware import gpu_model  # noqa: E402

CPU_STAGES = BENCH_DIR / "results" / "cpu-stages.json"
ENGINE_GPU = BENCH_DIR / "results" / "engine-gpu.json"  # bench/gpu_check.sh's results, once a GPU has run it
VALUES = REPO / "deploy" / "chart" / "values.yaml"
AIRFLOW_VALUES = REPO / "deploy" / "airflow-values.yaml"
SETTINGS = REPO / "plugins" / "facefusion_provider" / "settings.py"
READMES = (REPO / "deploy" / "README.md", REPO / "deploy" / "chart" / "README.md")
START, END = "<!-- pod-sizing:start (bench/pod_sizing.py) -->", "<!-- pod-sizing:end -->"

SIZE = "1080p"
PRESET = "veryfast"  # the options' default output_video_preset with the default encoder, libx264
# The scaling model's stated rate of detect + landmarks + inswapper_128 per frame on one GPU, batched, taken as an
# L4's; other GPUs scale it by their fp16 dense tensor peak.
ANCHOR_FPS, ANCHOR_TFLOPS = Stated().gpu_inference_fps, 121.0
BUSY_TARGET = 0.9  # the GPU's busy share a pod must reach
# Cores do not add up perfectly (the frame loop, the GIL, memory bandwidth): each counts for this much of one.
CORE_EFFICIENCY = 0.9
# What an engine leaves on the CPU of the stage it takes over (demux and parsing, feeding the engine): assumed, until
# bench/gpu_check.py measures NVDEC and NVENC on the GPU.
OFFLOAD_CPU_SHARE = 0.1
SMALL_POD_CORES = 4  # the one fixed size every GPU pod had before


@dataclass(frozen=True)
class GpuType:
    """A GPU type of the chart: its stated fp16 peak and the cloud node it usually comes in (all stated, with source)."""

    key: str
    name: str
    fp16_tflops: float
    tflops_source: str
    node: str
    node_vcpus_per_gpu: int


GPU_TYPES: tuple[GpuType, ...] = (
    GpuType(
        "l4", "NVIDIA L4", 121.0, "NVIDIA L4 data sheet (242 with sparsity)", "AWS g6.48xlarge: 192 vCPU, 8 GPUs", 24
    ),
    GpuType(
        "a10g", "NVIDIA A10G", 125.0, "NVIDIA A10 data sheet (250 with sparsity)", "AWS g5.48xlarge: 192 vCPU, 8", 24
    ),
    GpuType(
        "l40s", "NVIDIA L40S", 362.0, "NVIDIA L40S data sheet (733 with sparsity)", "AWS g6e.48xlarge: 192 vCPU, 8", 24
    ),
    GpuType(
        "a100", "NVIDIA A100", 312.0, "NVIDIA A100 data sheet (624 with sparsity)", "AWS p4d.24xlarge: 96 vCPU, 8", 12
    ),
    GpuType(
        "h100",
        "NVIDIA H100",
        989.0,
        "NVIDIA H100 SXM data sheet (1979 with sparsity)",
        "AWS p5.48xlarge: 192 vCPU, 8",
        24,
    ),
    GpuType(
        "h200", "NVIDIA H200", 989.0, "NVIDIA H200 data sheet (1979 with sparsity)", "AWS p5e.48xlarge: 192 vCPU, 8", 24
    ),
)


@dataclass(frozen=True)
class GpuRate:
    """Frames a second one GPU infers (one detection and one face swapped a frame), and the fp16 peak of the GPU that
    rate belongs to: every GPU type's rate is this scaled by its own peak."""

    fps: float
    fp16_tflops: float
    source: str
    measured: bool


STATED_RATE = GpuRate(
    ANCHOR_FPS,
    ANCHOR_TFLOPS,
    f"**stated, not measured here**: {ANCHOR_FPS:.0f} fps (bench/scaling_model.py's stated rate of detect + landmarks "
    "+ inswapper_128, taken as an L4's)",
    measured=False,
)


def measured_rate(report: dict[str, Any]) -> GpuRate | None:
    """The rate a GPU check measured: the detector's and the inswapper stand-in's fastest fp16 time per item (PyTorch
    running their ONNX graphs), one of each a frame; None when it measured neither or ran on a GPU not in GPU_TYPES."""
    name = str((report.get("gpu") or {}).get("name", ""))
    model = gpu_model(name)
    gpu = next((gpu for gpu in GPU_TYPES if model is not None and gpu.key == model.key), None)
    if gpu is None:
        return None
    graphs = ((report.get("engine_torch") or {}).get("models")) or {}
    ms_per_frame = 0.0
    for label in (DETECTOR_GRAPH, SWAPPER_GRAPH):
        runs = [run for run in (graphs.get(label) or {}).get("runs", []) if run.get("precision") == "fp16"]
        if not runs:
            return None
        ms_per_frame += min(float(run["ms_per_item"]) for run in runs)
    fps = 1000.0 / ms_per_frame
    source = (
        f"**measured** on {name} by bench/gpu_check.sh: {fps:.0f} fps (the detector and the inswapper stand-in, "
        "fp16, their fastest batch, through PyTorch running their ONNX graphs; landmarks not included)"
    )
    return GpuRate(fps, gpu.fp16_tflops, source, measured=True)


def gpu_rate(path: Path = ENGINE_GPU) -> GpuRate:
    """The measured rate when a GPU check's results are here, else the stated one."""
    if path.exists():
        rate = measured_rate(json.loads(path.read_text()))
        if rate is not None:
            return rate
    return STATED_RATE


@dataclass(frozen=True)
class CpuCosts:
    """Measured CPU ms per frame on one core (bench/results/cpu-stages.json)."""

    beside_inference_ms: float  # decode, conversions, detector pre/post, align, paste back: everything but the engines
    decode_ms: float
    encoder_ms: float  # libx264 at PRESET
    command: str


@dataclass(frozen=True)
class Sizing:
    gpu: GpuType
    nvdec: int
    nvenc: int
    gpu_fps: float
    cpu_ms: float  # per frame, with the default encoder (libx264), NVDEC where the GPU has it
    cpu_ms_nvenc: float | None  # the same with h264_nvenc, where the GPU has NVENC
    cores_needed: int
    cpu_request: int
    busy_share: float
    frames_per_gpu_hour: float
    frames_per_gpu_hour_small: float
    busy_share_small: float


def read_costs(path: Path = CPU_STAGES) -> CpuCosts:
    data: dict[str, Any] = json.loads(path.read_text())
    try:
        totals = data["sizes"][SIZE]["totals"]
        return CpuCosts(
            beside_inference_ms=float(totals["inswapper_beside_inference_and_encoder_ms"]),
            decode_ms=float(totals["inswapper_parts_ms"]["decode"]),
            encoder_ms=float(totals["encoder_ms"][PRESET]),
            command=str(data.get("command", "")),
        )
    except KeyError as missing:
        raise SystemExit(f"{path}: no {missing} in sizes.{SIZE}.totals; rerun bench/bench_cpu_stages.py") from None


def size(gpu: GpuType, costs: CpuCosts, rate: GpuRate) -> Sizing:
    model = gpu_model(gpu.name)
    nvdec, nvenc = (model.nvdec, model.nvenc) if model else (0, 0)
    decode_ms = costs.decode_ms * (OFFLOAD_CPU_SHARE if nvdec else 1.0)
    beside_ms = costs.beside_inference_ms - costs.decode_ms + decode_ms
    cpu_ms = beside_ms + costs.encoder_ms
    gpu_fps = rate.fps * gpu.fp16_tflops / rate.fp16_tflops
    needed = math.ceil(BUSY_TARGET * gpu_fps * cpu_ms / 1000 / CORE_EFFICIENCY)
    request = max(1, min(needed, gpu.node_vcpus_per_gpu - 1))  # a core of the node's share stays with its daemons

    def fps(cores: int) -> float:
        return min(gpu_fps, cores * CORE_EFFICIENCY * 1000 / cpu_ms)

    return Sizing(
        gpu=gpu,
        nvdec=nvdec,
        nvenc=nvenc,
        gpu_fps=gpu_fps,
        cpu_ms=cpu_ms,
        cpu_ms_nvenc=beside_ms + costs.encoder_ms * OFFLOAD_CPU_SHARE if nvenc else None,
        cores_needed=needed,
        cpu_request=request,
        busy_share=fps(request) / gpu_fps,
        frames_per_gpu_hour=3600 * fps(request),
        frames_per_gpu_hour_small=3600 * fps(SMALL_POD_CORES),
        busy_share_small=fps(SMALL_POD_CORES) / gpu_fps,
    )


def sizings(costs: CpuCosts, rate: GpuRate) -> list[Sizing]:
    return [size(gpu, costs, rate) for gpu in GPU_TYPES]


def markdown(rows: list[Sizing], costs: CpuCosts, rate: GpuRate) -> str:
    lines = [
        f"Cores per GPU worker pod, by GPU type (`python bench/pod_sizing.py`, from `bench/results/cpu-stages.json`: "
        f"`{costs.command}`). CPU per {SIZE} frame on one core, measured: {costs.beside_inference_ms:.1f} ms beside "
        f"inference (decode {costs.decode_ms:.1f}), libx264 {PRESET} {costs.encoder_ms:.1f} ms. NVDEC and NVENC leave "
        f"{OFFLOAD_CPU_SHARE:.0%} of their stage on the CPU (assumed until bench/gpu_check.py measures them). GPU frames "
        f"per second: {rate.source} scaled by each GPU's fp16 dense tensor peak. Cores "
        f"count {CORE_EFFICIENCY:.0%} of one each; a pod asks for what keeps its GPU {BUSY_TARGET:.0%} busy, at most "
        "its node's vCPUs per GPU less one. The default encoder (libx264) is what the request is sized for: NVENC "
        "runs only when the options name `h264_nvenc` or `hevc_nvenc`.",
        "",
        f"| `gpu.type` | NVDEC | NVENC | GPU fps ({'measured' if rate.measured else 'stated'}) | CPU ms/frame (libx264) "
        "| with NVENC | cores needed "
        "| cpu request | GPU busy | frames per GPU-hour | on 4 cores | node (vCPU per GPU) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        nvenc = f"{row.cpu_ms_nvenc:.1f}" if row.cpu_ms_nvenc is not None else "no NVENC"
        lines.append(
            f"| `{row.gpu.key}` | {row.nvdec} | {row.nvenc or 'none'} | {row.gpu_fps:.0f} | {row.cpu_ms:.1f} | {nvenc} "
            f"| {row.cores_needed} | {row.cpu_request} | {row.busy_share:.0%} | {row.frames_per_gpu_hour:,.0f} "
            f"| {row.frames_per_gpu_hour_small:,.0f} ({row.busy_share_small:.0%} busy) "
            f"| {row.gpu.node} ({row.gpu.node_vcpus_per_gpu}) |"
        )
    lines += [
        "",
        "GPU fp16 peaks: "
        + "; ".join(f"{gpu.key} {gpu.fp16_tflops:.0f} TFLOPS ({gpu.tflops_source})" for gpu in GPU_TYPES)
        + ". Where the request is below the cores needed, the node has no more cores per GPU: the pod stays CPU-bound "
        "until the CPU per frame falls.",
    ]
    return "\n".join(lines)


def with_table(text: str, table: str, path: Path) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"{path}: no {START} ... {END} markers for the sizing table")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"


def with_requests(values: str, rows: list[Sizing]) -> str:
    for row in rows:
        pattern = re.compile(rf'^(\s+{re.escape(row.gpu.key)}: \{{cpu: )"[^"]*"', flags=re.MULTILINE)
        values, count = pattern.subn(rf'\g<1>"{row.cpu_request}"', values)
        if count != 1:
            raise SystemExit(f"{VALUES}: no single resourcesByType row for {row.gpu.key}")
    return values


def default_gpu_type(values: str) -> str:
    found = re.search(r"^  type: (\S+)$", values, flags=re.MULTILINE)
    if found is None:
        raise SystemExit(f"{VALUES}: no gpu.type")
    return found.group(1)


def with_gpu_type(airflow_values: str, gpu_type: str) -> str:
    return re.sub(r"^(\s+gpu_type: )\S+$", rf"\g<1>{gpu_type}", airflow_values, count=1, flags=re.MULTILINE)


def with_settings_table(settings: str, rows: list[Sizing]) -> str:
    """The Airflow side's cores per GPU type (``settings.GPU_POD_CPU``, read for ``[facefusion] gpu_type``)."""
    table = "".join(f'    "{row.gpu.key}": "{row.cpu_request}",\n' for row in rows)
    head, rest = settings.split("# pod-sizing:start\n", 1)
    _, tail = rest.split("# pod-sizing:end\n", 1)
    return f"{head}# pod-sizing:start\nGPU_POD_CPU: Mapping[str, str] = {{\n{table}}}\n# pod-sizing:end\n{tail}"


def expected_files(costs: CpuCosts, rate: GpuRate) -> dict[Path, str]:
    rows = sizings(costs, rate)
    table = markdown(rows, costs, rate)
    values = with_requests(VALUES.read_text(), rows)
    files = {path: with_table(path.read_text(), table, path) for path in READMES}
    files[VALUES] = values
    files[AIRFLOW_VALUES] = with_gpu_type(AIRFLOW_VALUES.read_text(), default_gpu_type(values))
    files[SETTINGS] = with_settings_table(SETTINGS.read_text(), rows)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when a file differs; write nothing")
    args = parser.parse_args(argv)
    costs, rate = read_costs(), gpu_rate()
    files = expected_files(costs, rate)
    stale = [path for path, text in files.items() if path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(REPO)} differs from bench/pod_sizing.py's output: run python bench/pod_sizing.py")
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path])
        print(f"wrote {path.relative_to(REPO)}")
    if VALUES in stale:
        print(
            "the chart's values changed: regenerate deploy/standing-workers.yaml (python tests/unit/kubernetes/chart_helpers.py)"
        )
    print(markdown(sizings(costs, rate), costs, rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
