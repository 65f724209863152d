"""The face-swap worker: the Python API behind ``facefusion-worker`` (prepare, swap-span, merge, run, serve)."""

from __future__ import annotations

from facefusion_provider.output import MergeResult
from facefusion_provider.work.access import load_work
from facefusion_provider.worker.healing import merge
from facefusion_provider.worker.prepare import prepare
from facefusion_provider.worker.run import RunResult, run
from facefusion_provider.worker.scheduler import swap_span
from facefusion_provider.worker.serve import ServeResult, serve
from facefusion_provider.worker.span import SpanResult

__all__ = [
    "MergeResult",
    "RunResult",
    "ServeResult",
    "SpanResult",
    "load_work",
    "merge",
    "prepare",
    "run",
    "serve",
    "swap_span",
]
