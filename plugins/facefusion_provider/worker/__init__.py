"""The face-swap worker: the Python API behind ``facefusion-worker`` (prepare, swap-chunk, merge, run)."""

from __future__ import annotations

from facefusion_provider.worker.jobs import (
    ChunkResult,
    MergeResult,
    RunResult,
    load_job,
    merge,
    prepare,
    run,
    swap_chunk,
)

__all__ = ["ChunkResult", "MergeResult", "RunResult", "load_job", "merge", "prepare", "run", "swap_chunk"]
