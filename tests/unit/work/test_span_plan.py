"""Segments (the commit unit: a fixed grid of the work's frames) and spans (the scheduling unit: runs of segments)."""

from __future__ import annotations

import itertools

import pytest

from facefusion_provider.work.span_plan import DEFAULT_SEGMENT_FRAMES, MAX_SPANS, plan_segments, plan_spans


def _ranges(start: int, end: int, size: int | None = None) -> list[tuple[int, int]]:
    segments = plan_segments(start, end, size)
    assert [s.index for s in segments] == list(range(len(segments)))
    return [(s.start, s.end) for s in segments]


@pytest.mark.parametrize(
    ("frames", "size", "expected"),
    [
        (1, 1, [(0, 1)]),
        (3, 1, [(0, 1), (1, 2), (2, 3)]),
        (3, 7, [(0, 3)]),
        (20, 7, [(0, 7), (7, 14), (14, 20)]),  # a tail of 6 is a segment of its own
        (15, 7, [(0, 7), (7, 15)]),  # a tail of 1 (< 25 %) joins the previous segment
        (300, 64, [(0, 64), (64, 128), (128, 192), (192, 256), (256, 300)]),
        (64, 64, [(0, 64)]),
        (65, 64, [(0, 65)]),
        (10, 1000, [(0, 10)]),
    ],
)
def test_segments(frames: int, size: int, expected: list[tuple[int, int]]) -> None:
    assert _ranges(0, frames, size) == expected


@pytest.mark.parametrize(("start", "end", "size"), [(0, 10_000, 7), (17, 1234, 64), (5, 6, 1), (0, 50_000, None)])
def test_segments_cover_the_range_exactly_once(start: int, end: int, size: int | None) -> None:
    ranges = _ranges(start, end, size)
    assert ranges[0][0] == start and ranges[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    lengths = [b - a for a, b in ranges]
    wanted = size or DEFAULT_SEGMENT_FRAMES
    assert all(length == wanted for length in lengths[:-1]) and lengths[-1] < wanted * 1.25 + 1


def test_the_grid_depends_on_the_frames_and_size_alone() -> None:
    """Every run over one work must agree on the segments, whatever its deployment's span settings."""
    assert plan_segments(0, 108_000) == plan_segments(0, 108_000, DEFAULT_SEGMENT_FRAMES)
    assert len(plan_segments(0, 108_000)) == 422  # one hour at 30 fps: segments of 8.5 s


@pytest.mark.parametrize(("start", "end", "size"), [(5, 5, 4), (6, 5, 4), (-1, 5, 4), (0, 5, 0)])
def test_invalid_ranges_are_refused(start: int, end: int, size: int) -> None:
    with pytest.raises(ValueError):
        plan_segments(start, end, size)


@pytest.mark.parametrize(("segments", "wave", "count"), [(421, 8, 8), (421, 32, 32), (3, 8, 3), (10, 0, 4), (1, 4, 1)])
def test_spans_are_one_wave_of_consecutive_segments(segments: int, wave: int, count: int) -> None:
    grid = plan_segments(0, segments * 10, 10)
    spans = plan_spans(grid, wave)
    assert len(spans) == count and [s.index for s in spans] == list(range(count))
    assert spans[0].first == 0 and spans[-1].last == segments
    assert all(a.last == b.first for a, b in itertools.pairwise(spans))
    sizes = [s.segment_count for s in spans]
    assert max(sizes) - min(sizes) <= 1  # equal shares: every GPU's own span takes as long
    assert all(s.start == grid[s.first].start and s.end == grid[s.last - 1].end for s in spans)


def test_span_labels_say_frames_and_segments() -> None:
    spans = plan_spans(plan_segments(0, 32_768, 256), 4)
    assert [s.label for s in spans] == [
        "frames 0-8191 (32 segments)",
        "frames 8192-16383 (32 segments)",
        "frames 16384-24575 (32 segments)",
        "frames 24576-32767 (32 segments)",
    ]
    assert plan_spans(plan_segments(0, 10), 1)[0].label == "frames 0-9 (1 segment)"


def test_spans_never_exceed_the_map_length() -> None:
    assert len(plan_spans(plan_segments(0, 5000, 1), 5000)) == MAX_SPANS
    with pytest.raises(ValueError, match="wave"):
        plan_spans(plan_segments(0, 10), -1)
