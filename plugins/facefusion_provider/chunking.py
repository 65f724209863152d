"""Split a frame range into chunks. Pure: the Airflow side and the worker both call it."""

from __future__ import annotations

from facefusion_provider.options import MAX_CHUNKS
from facefusion_provider.types import Chunk

DEFAULT_CHUNK_FRAMES = 128
# A tail shorter than this fraction of a chunk joins the previous chunk: a pod start costs more than its frames.
TAIL_FRACTION = 0.25


def plan_chunks(start: int, end: int, chunk_size: int | None = None, max_chunks: int = MAX_CHUNKS) -> list[Chunk]:
    """Chunks ``[start, end)`` of about ``chunk_size`` frames; never more than ``max_chunks`` of them."""
    if start < 0 or end <= start:
        raise ValueError(f"empty or invalid frame range [{start}, {end})")
    if max_chunks < 1:
        raise ValueError("max_chunks must be at least 1")
    total = end - start
    size = chunk_size or DEFAULT_CHUNK_FRAMES
    if total <= size:
        return [Chunk(index=0, start=start, end=end)]
    count = total // size
    tail = total - count * size
    if tail >= TAIL_FRACTION * size:
        count += 1
    if count > max_chunks:
        # Too many chunks of that size: exactly max_chunks chunks, as even as whole frames allow.
        bounds = [start + i * total // max_chunks for i in range(max_chunks)] + [end]
        return [Chunk(index=i, start=bounds[i], end=bounds[i + 1]) for i in range(max_chunks)]
    bounds = [start + i * size for i in range(count)] + [end]
    return [Chunk(index=i, start=bounds[i], end=bounds[i + 1]) for i in range(count)]
