"""Split a frame range into chunks. Pure: the Airflow side and the worker both call it."""

from __future__ import annotations

import math

from facefusion_provider.options import MAX_CHUNKS
from facefusion_provider.types import Chunk

DEFAULT_CHUNK_FRAMES = 128
# A tail shorter than this fraction of a chunk joins the previous chunk: a pod start costs more than its frames.
TAIL_FRACTION = 0.25


def plan_chunks(
    start: int, end: int, chunk_size: int | None = None, max_chunks: int = MAX_CHUNKS, wave: int = 0
) -> list[Chunk]:
    """Chunks ``[start, end)`` of about ``chunk_size`` frames; never more than ``max_chunks`` of them.

    ``wave``: how many chunks run at once (the GPUs). A plan of at least one wave gets a whole number of waves of equal
    chunks, so no GPU idles while the last wave runs; a shorter plan becomes one full wave where each chunk still holds
    half of ``chunk_size`` (every GPU then shares the work); ``0`` keeps chunks of exactly ``chunk_size`` frames.
    """
    if start < 0 or end <= start:
        raise ValueError(f"empty or invalid frame range [{start}, {end})")
    if max_chunks < 1:
        raise ValueError("max_chunks must be at least 1")
    if wave < 0:
        raise ValueError("wave must be 0 (off) or a number of chunks that run at once")
    total = end - start
    size = chunk_size or DEFAULT_CHUNK_FRAMES
    if total <= size:
        return [Chunk(index=0, start=start, end=end)]
    count = total // size
    tail = total - count * size
    if tail >= TAIL_FRACTION * size:
        count += 1
    if wave > 1 and count < wave and total >= wave * size / 2:
        return _even_chunks(start, end, min(wave, max_chunks, total))
    if wave > 1 and count >= wave:
        most = max_chunks // wave * wave or max_chunks  # whole waves under the cap, unless one wave exceeds it
        return _even_chunks(start, end, min(whole_waves(total, size, wave), most, total))
    if count > max_chunks:
        # Too many chunks of that size: exactly max_chunks chunks, as even as whole frames allow.
        return _even_chunks(start, end, max_chunks)
    bounds = [start + i * size for i in range(count)] + [end]
    return [Chunk(index=i, start=bounds[i], end=bounds[i + 1]) for i in range(count)]


def whole_waves(total: int, size: int, wave: int) -> int:
    """The multiple of ``wave`` whose equal chunks come closest to ``size`` frames (by ratio), at least one wave."""
    below = max(wave, total // size // wave * wave)
    above = below + wave
    return min((below, above), key=lambda count: abs(math.log(total / count / size)))


def _even_chunks(start: int, end: int, count: int) -> list[Chunk]:
    """``count`` chunks of ``[start, end)`` whose sizes differ by at most one frame."""
    total = end - start
    bounds = [start + i * total // count for i in range(count)] + [end]
    return [Chunk(index=i, start=bounds[i], end=bounds[i + 1]) for i in range(count)]
