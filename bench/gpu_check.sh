#!/usr/bin/env bash
# The GPU check of issue 24, as one command: on a machine with an NVIDIA GPU it measures the inswapper stand-in and the
# detector (CUDA and TensorRT, fp32 and fp16, batch 1/4/16), NVDEC and NVENC at 1080p (and the worker's own decode
# path with the plan media/hardware.py picks on this GPU, its frames checked against software decoding), records which
# decode and encode path the worker chooses here per encoder, runs the frame enhancer on a real_esrgan_x4
# compute-equivalent network over 1080p frames in tiles (bench/gpu_frame_enhancer.py: tiles/s, frames/s, peak GPU
# memory), and makes one whole worker run on the GPU, in under 8 minutes; writes bench/results/engine-gpu.md and
# .json (see bench/gpu_check.py). FACEFUSION_GPU_MODEL, when set, names the GPU for those choices as it does for the
# worker.
# Without an NVIDIA GPU it prints one line saying so, writes nothing and exits 0.
#
#   bash bench/gpu_check.sh [--out PATH] [--budget-seconds S]
#
# onnxruntime-gpu: the lock's onnxruntime (CPU) and onnxruntime-gpu install the same module and conflict, so the CPU one
# is removed first. This script does it when the venv lacks the CUDA provider (it needs PyPI, or a folder of wheels in
# $GPU_CHECK_WHEELS on a machine without network); by hand:
#   uv pip uninstall --python .venv/bin/python onnxruntime
#   uv pip install --python .venv/bin/python 'onnxruntime-gpu[cuda,cudnn]'   # CUDA 12 and cuDNN 9 from PyPI wheels
# (the lock's onnxruntime version first, else the newest onnxruntime-gpu: 1.31.1 in late 2026, behind the CPU 1.32.0).
# TensorRT's provider also needs TensorRT's libraries (`uv pip install tensorrt-cu12-libs`); without them its rows
# say so. Set GPU_CHECK_INSTALL=0 to measure with whatever is installed.
#
# A machine without the project's venv (this workplace's GPU machines: Python 3.12 with PyTorch, onnxruntime for the
# CPU, no network) runs the check with its python3 and the wheels of bench/gpu-wheels.txt, made here with
# `make gpu-wheels` and carried in .whl/ (or $GPU_CHECK_WHEELS); onnxruntime is left as it is, and the inference rows
# come from PyTorch running the same graphs (bench/onnx_on_torch.py). On this workplace's device tool:
#   run(command="bash bench/gpu_check.sh --out $OUT/engine-gpu", carry=[".whl"], timeout_s=540)
set -euo pipefail

cd "$(dirname "$0")/.."
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
PYTHON="${PYTHON:-.venv/bin/python}"

if ! command -v "$NVIDIA_SMI" >/dev/null 2>&1 || ! "$NVIDIA_SMI" -L 2>/dev/null | grep -q '^GPU'; then
    echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi missing or lists none): nothing measured, nothing written"
    exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    wheels="${GPU_CHECK_WHEELS:-.whl}"
    PYTHON="${GPU_CHECK_SYSTEM_PYTHON:-python3}"
    site="$(mktemp -d)"
    echo "gpu_check: no venv at .venv: $PYTHON with the wheels in $wheels, installed in $site" >&2
    shopt -s nullglob
    carried=("$wheels"/*.whl)
    shopt -u nullglob
    if ((${#carried[@]})); then
        "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${carried[@]}" >&2
    else
        echo "gpu_check: no wheels in $wheels (run \`make gpu-wheels\` and carry .whl): steps that need them will say so" >&2
    fi
    export PYTHONPATH="$site:$PWD/plugins${PYTHONPATH:+:$PYTHONPATH}"
    GPU_CHECK_INSTALL=0  # never swap the machine's own onnxruntime: without a network it could not be put back
fi

has_cuda_provider() {
    "$PYTHON" -c 'import onnxruntime, sys; sys.exit("CUDAExecutionProvider" not in onnxruntime.get_available_providers())'
}

if [[ "${GPU_CHECK_INSTALL:-1}" == 1 ]] && ! has_cuda_provider; then
    version="$("$PYTHON" -c 'import onnxruntime; print(onnxruntime.__version__)')"
    uv="$(command -v uv || echo "$PYTHON -m uv")"
    find_links=()
    if [[ -n "${GPU_CHECK_WHEELS:-}" ]]; then
        find_links=(--offline --find-links "$GPU_CHECK_WHEELS")
    fi
    echo "gpu_check: installing onnxruntime-gpu in place of onnxruntime $version" >&2
    if $uv pip uninstall --python "$PYTHON" onnxruntime >&2 \
        && { $uv pip install --python "$PYTHON" "${find_links[@]}" "onnxruntime-gpu[cuda,cudnn]==$version" >&2 \
            || $uv pip install --python "$PYTHON" "${find_links[@]}" "onnxruntime-gpu[cuda,cudnn]" >&2; }; then
        :
    else
        echo "gpu_check: onnxruntime-gpu could not be installed: the engine rows will say so" >&2
        has_cuda_provider 2>/dev/null || $uv pip install --python "$PYTHON" "${find_links[@]}" "onnxruntime==$version" >&2 || true
    fi
fi

# CUDA, cuDNN and TensorRT from PyPI wheels live under site-packages, where the loader does not look by itself.
site_packages="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
for library in "$site_packages"/nvidia/*/lib "$site_packages"/tensorrt_libs; do
    if [[ -d "$library" ]]; then
        LD_LIBRARY_PATH="$library${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"

NVIDIA_SMI="$NVIDIA_SMI" timeout 470 "$PYTHON" bench/gpu_check.py --nvidia-smi "$NVIDIA_SMI" "$@"
