"""Chunk planning: contiguous [start, end) ranges of about chunk_size frames, tiny tails folded, at most 1024 chunks."""

from __future__ import annotations

import itertools

import pytest

from facefusion_provider.chunking import DEFAULT_CHUNK_FRAMES, plan_chunks
from facefusion_provider.options import MAX_CHUNKS


def _ranges(start: int, end: int, size: int | None = None, max_chunks: int = MAX_CHUNKS) -> list[tuple[int, int]]:
    chunks = plan_chunks(start, end, size, max_chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    return [(c.start, c.end) for c in chunks]


@pytest.mark.parametrize(
    ("frames", "size", "expected"),
    [
        (1, 1, [(0, 1)]),
        (3, 1, [(0, 1), (1, 2), (2, 3)]),
        (3, 7, [(0, 3)]),
        (20, 7, [(0, 7), (7, 14), (14, 20)]),  # a tail of 6 is a chunk of its own
        (15, 7, [(0, 7), (7, 15)]),  # a tail of 1 (< 25 %) joins the previous chunk
        (300, 64, [(0, 64), (64, 128), (128, 192), (192, 256), (256, 300)]),
        (130, 64, [(0, 64), (64, 130)]),
        (64, 64, [(0, 64)]),
        (65, 64, [(0, 65)]),
        (10, 1000, [(0, 10)]),
    ],
)
def test_plans(frames: int, size: int, expected: list[tuple[int, int]]) -> None:
    assert _ranges(0, frames, size) == expected


@pytest.mark.parametrize(
    ("start", "end", "size"), [(0, 10_000, 7), (17, 1234, 64), (5, 6, 1), (0, 5000, None), (3, 99_999, 128)]
)
def test_chunks_cover_the_range_exactly_once(start: int, end: int, size: int | None) -> None:
    ranges = _ranges(start, end, size)
    assert ranges[0][0] == start and ranges[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    wanted = size or DEFAULT_CHUNK_FRAMES
    lengths = [b - a for a, b in ranges]
    if len(ranges) > 1:
        assert min(lengths) >= wanted // 4
        assert max(lengths) < wanted * 1.25 + 1 or len(ranges) == MAX_CHUNKS


def test_default_size_and_short_videos_in_one_chunk() -> None:
    assert _ranges(0, DEFAULT_CHUNK_FRAMES) == [(0, DEFAULT_CHUNK_FRAMES)]
    assert len(plan_chunks(0, 10 * DEFAULT_CHUNK_FRAMES)) == 10


def test_never_more_than_the_maximum_chunks() -> None:
    assert len(plan_chunks(0, 2_000_000, 1)) == MAX_CHUNKS
    assert len(plan_chunks(0, 5000, 1, max_chunks=16)) == 16
    ranges = _ranges(0, 1025, 1)
    assert len(ranges) == 1024 and ranges[-1] == (1023, 1025)  # spread evenly, not halved to 513 chunks of 2


@pytest.mark.parametrize(("start", "end", "max_chunks"), [(5, 5, 10), (6, 5, 10), (-1, 5, 10), (0, 5, 0)])
def test_invalid_ranges_are_refused(start: int, end: int, max_chunks: int) -> None:
    with pytest.raises(ValueError):
        plan_chunks(start, end, 4, max_chunks)


@pytest.mark.parametrize(
    ("frames", "size", "wave", "count"),
    [
        (108_000, 2048, 8, 56),  # 52.7 chunks of 2048 -> 7 full waves of 8
        (108_000, 4096, 8, 24),  # 26.4 -> 3 waves (27 would leave 7 GPUs idle in a fourth)
        (1000, 100, 4, 12),  # 10 -> 12 (83 frames each) rather than 8 (125 each)
        (1000, 100, 10, 10),  # already whole waves
        (900, 100, 4, 8),  # 9 -> 8 (112 frames each) rather than 12 (75 each)
        (108_000, 16_384, 8, 8),  # 7 chunks would leave a GPU idle: one wave of 13 500 frames
    ],
)
def test_a_plan_of_at_least_one_wave_fills_every_wave(frames: int, size: int, wave: int, count: int) -> None:
    ranges = [(c.start, c.end) for c in plan_chunks(0, frames, size, wave=wave)]
    assert len(ranges) == count and count % wave == 0
    assert ranges[0][0] == 0 and ranges[-1][1] == frames
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    lengths = [b - a for a, b in ranges]
    assert max(lengths) - min(lengths) <= 1  # equal chunks: every wave ends together


def test_waves_leave_short_plans_and_the_chunk_cap_alone() -> None:
    # 3 chunks of 100 frames, not 8 of 37: a short plan keeps its chunks' size.
    assert _ranges(0, 300, 100) == [(c.start, c.end) for c in plan_chunks(0, 300, 100, wave=8)]
    assert len(plan_chunks(0, 100_000, 1, max_chunks=20, wave=8)) == 16  # whole waves under the cap
    assert len(plan_chunks(0, 100_000, 1, max_chunks=5, wave=8)) == 5  # a cap below one wave wins
    assert len(plan_chunks(0, 12, 1, wave=8)) == 12  # never more chunks than frames
    with pytest.raises(ValueError, match="wave"):
        plan_chunks(0, 10, 2, wave=-1)
