"""Segments and spans: pure planning that the worker (segments, in ``prepare``) and Airflow (spans, in ``plan``) share.

Segments are a fixed grid over the frames, decided by the work's options alone, so every run over the same work agrees
on them whatever its deployment; spans group consecutive segments into one task each, in whole waves for the GPU pool.
"""

from __future__ import annotations

import itertools

from facefusion_provider.work.records import Segment, Span

DEFAULT_SEGMENT_FRAMES = 256  # a few seconds of GPU work: a killed pod loses at most that
MAX_SPANS = 1024  # Airflow's [core] max_map_length default
DEFAULT_SPAN_WAVE = 4  # spans of a run when no wave is configured: a few tasks, each helping with the others' tails
# A tail shorter than this fraction of a segment joins the previous segment: it is not worth its own file.
TAIL_FRACTION = 0.25


def plan_segments(start: int, end: int, segment_size: int | None = None) -> list[Segment]:
    """Segments of ``segment_size`` frames (default 256) covering ``[start, end)``; a short tail joins the last one."""
    if start < 0 or end <= start:
        raise ValueError(f"empty or invalid frame range [{start}, {end})")
    size = DEFAULT_SEGMENT_FRAMES if segment_size is None else segment_size
    if size < 1:
        raise ValueError(f"segment_size must be at least 1, got {size}")
    total = end - start
    count = max(1, total // size)
    if total - count * size >= TAIL_FRACTION * size:
        count += 1
    bounds = [start + i * size for i in range(count)] + [end]
    return [Segment(index=i, start=bounds[i], end=bounds[i + 1]) for i in range(count)]


def plan_spans(segments: list[Segment], wave: int = 0, max_spans: int = MAX_SPANS) -> list[Span]:
    """Consecutive segments grouped into ``wave`` spans (one per GPU; ``0``: ``DEFAULT_SPAN_WAVE``) whose segment counts
    differ by at most one; never more spans than segments or ``max_spans``.

    One wave is enough: a worker that finishes its span takes segments from the tail of the busiest one, so a slow span
    does not hold up the run, and each pod's fixed cost is paid once per GPU.
    """
    if not segments:
        raise ValueError("no segments to plan")
    if wave < 0:
        raise ValueError("wave must be 0 (the default) or the number of spans that run at once")
    count = min(wave or DEFAULT_SPAN_WAVE, len(segments), max_spans)
    cuts = [round(number * len(segments) / count) for number in range(count + 1)]  # segments are equal but the last
    return [
        Span(index=i, first=a, last=b, start=segments[a].start, end=segments[b - 1].end)
        for i, (a, b) in enumerate(itertools.pairwise(cuts))
    ]
