"""onnxruntime sessions: one per model per process, on the first execution provider that is available."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from facefusion_provider import contract
from facefusion_provider.exceptions import InvalidOptionError, ModelCorruptError
from facefusion_provider.storage.scratch import cache_folder

logger = logging.getLogger(__name__)

_PROVIDER_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}

# onnxruntime's element type names -> numpy: fp16 model variants declare float16 inputs and outputs.
_NUMPY_TYPES: dict[str, type[np.generic]] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(uint8)": np.uint8,
}

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


def each(pool: Executor | None, function: Callable[[ItemT], ResultT], items: Iterable[ItemT]) -> list[ResultT]:
    """``function`` of every item, in order: side by side on ``pool`` (sessions are safe to run from any thread)."""
    return list(map(function, items) if pool is None else pool.map(function, items))


def on_gpu(execution_providers: Sequence[str]) -> bool:
    """Whether the first provider this build has for ``execution_providers`` runs on a GPU."""
    return resolve_providers(execution_providers)[0] != "CPUExecutionProvider"


def resolve_providers(execution_providers: Sequence[str]) -> list[str]:
    """The requested providers that this onnxruntime build has, in order; none of them is bad input (the CPU is a
    fallback only when the list names it), so a GPU run never slips onto the CPU unnoticed."""
    available = ort.get_available_providers()
    chosen = [_PROVIDER_NAMES[name] for name in execution_providers if _PROVIDER_NAMES[name] in available]
    if not chosen:
        names = {provider: name for name, provider in _PROVIDER_NAMES.items()}
        raise InvalidOptionError(
            f"options.execution_providers: none of {', '.join(execution_providers)} is available here (this "
            f"onnxruntime has {', '.join(names.get(p, p) for p in available)}); add cpu to the list to fall back to it"
        )
    return chosen


def log_providers(execution_providers: Sequence[str]) -> str:
    """Say once which provider runs the models (and which requested ones this machine lacks); returns its name."""
    chosen = resolve_providers(execution_providers)
    missing = [name for name in execution_providers if _PROVIDER_NAMES[name] not in chosen]
    logger.info("execution provider: %s%s", chosen[0], f" ({', '.join(missing)} not available here)" if missing else "")
    return chosen[0]


def provider_options(provider: str) -> dict[str, Any]:
    """Per-provider settings: TensorRT builds fp16 engines and caches them on disk (building one takes minutes)."""
    if provider == "TensorrtExecutionProvider":
        cache = contract.worker_settings().trt_cache or cache_folder("tensorrt")
        return {
            "trt_fp16_enable": True,
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": cache,
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": cache,
        }
    if provider == "CUDAExecutionProvider":
        return {"cudnn_conv_algo_search": "DEFAULT"}
    return {}


@functools.lru_cache(maxsize=16)
def _cached_session(model: bytes | str, providers: tuple[str, ...], thread_count: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = thread_count
    options.inter_op_num_threads = 1
    # Idle pool threads sleep instead of spinning: a spinning pool burns the cores the decoder and encoder need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            model,
            sess_options=options,
            providers=list(providers),
            provider_options=[provider_options(provider) for provider in providers],
        )
    except Exception as error:  # onnxruntime raises its own untyped errors for unreadable models
        name = model if isinstance(model, str) else f"<{len(model)} bytes>"
        raise ModelCorruptError(f"{name}: onnxruntime cannot load this model: {error}") from error
    if session.get_providers()[0] != providers[0]:  # CUDA or TensorRT failed to start (driver, libraries)
        fallback = "CPUExecutionProvider" in providers
        message = f"{providers[0]} could not start here; the session runs on {session.get_providers()[0]}"
        if not fallback:
            raise InvalidOptionError(f"options.execution_providers: {message}; add cpu to the list to fall back to it")
        logger.warning("%s (cpu is in execution_providers)", message)
    return session


def create_session(model: bytes | str, execution_providers: Sequence[str], thread_count: int) -> ort.InferenceSession:
    """A cached session: models load once per process, not once per frame or segment."""
    return _cached_session(model, tuple(resolve_providers(execution_providers)), thread_count)


def input_shapes(session: ort.InferenceSession) -> dict[str, list[Any]]:
    return {item.name: list(item.shape) for item in session.get_inputs()}


def input_types(session: ort.InferenceSession) -> dict[str, type[np.generic]]:
    return {item.name: _NUMPY_TYPES.get(item.type, np.float32) for item in session.get_inputs()}


def batch_is_dynamic(session: ort.InferenceSession) -> bool:
    """Whether every input takes any batch size (a symbolic first dimension), so frames or faces can be stacked."""
    return all(not isinstance(item.shape[0], int) for item in session.get_inputs())


def run_session(session: ort.InferenceSession, feeds: Mapping[str, npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
    """Run with each input cast to the model's declared type; float16 outputs come back as float32.

    On CUDA the inputs and outputs go through an IO binding, so onnxruntime copies each once instead of per call site.
    """
    types = input_types(session)
    typed = {name: np.ascontiguousarray(value, dtype=types.get(name, value.dtype)) for name, value in feeds.items()}
    if session.get_providers()[0] == "CUDAExecutionProvider":
        binding = session.io_binding()
        for name, value in typed.items():
            binding.bind_cpu_input(name, value)
        for output in session.get_outputs():
            binding.bind_output(output.name, "cuda")
        session.run_with_iobinding(binding)
        outputs: list[npt.NDArray[Any]] = binding.copy_outputs_to_cpu()
    else:
        outputs = session.run(None, typed)
    return [output.astype(np.float32) if output.dtype == np.float16 else output for output in outputs]
