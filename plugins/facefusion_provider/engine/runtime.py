"""onnxruntime sessions: one per model per process, on the first execution provider that is available."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import onnxruntime as ort

from facefusion_provider.exceptions import ModelCorruptError

_PROVIDER_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}


def resolve_providers(execution_providers: Sequence[str]) -> list[str]:
    """The requested providers that this onnxruntime build has, in order, always ending with the CPU."""
    available = set(ort.get_available_providers())
    chosen = [_PROVIDER_NAMES[name] for name in execution_providers if _PROVIDER_NAMES[name] in available]
    if "CPUExecutionProvider" not in chosen:
        chosen.append("CPUExecutionProvider")
    return chosen


@functools.lru_cache(maxsize=16)
def _cached_session(model: bytes | str, providers: tuple[str, ...], thread_count: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = thread_count
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model, sess_options=options, providers=list(providers))
    except Exception as error:  # onnxruntime raises its own untyped errors for unreadable models
        name = model if isinstance(model, str) else f"<{len(model)} bytes>"
        raise ModelCorruptError(f"{name}: onnxruntime cannot load this model: {error}") from error


def create_session(model: bytes | str, execution_providers: Sequence[str], thread_count: int) -> ort.InferenceSession:
    """A cached session: models load once per process, not once per frame or chunk."""
    return _cached_session(model, tuple(resolve_providers(execution_providers)), thread_count)


def input_shapes(session: ort.InferenceSession) -> dict[str, list[Any]]:
    return {item.name: list(item.shape) for item in session.get_inputs()}
