"""Progress lines for people, driven by a fake clock."""

from __future__ import annotations

import pytest

from facefusion_provider.worker.progress import Progress, people_duration, people_number


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_interval_and_at_each_commit() -> None:
    clock, lines = Clock(), []
    progress = Progress(8192, emit=lines.append, every_s=10, clock=clock)

    clock.now += 4
    progress.frames_done(128, faces=128)
    assert lines == []  # not due yet
    clock.now += 29.0322580645  # 1,024 frames in 33 s: 31 fps
    progress.frames_done(896, faces=896)

    assert lines == ["frames 1,024/8,192 (12.5 %), 31 fps, 1 face/frame, ETA 3 min 51 s"]
    clock.now += 1
    progress.frames_done(10, faces=5)
    assert len(lines) == 1
    progress.committed(4)
    assert lines[-1].startswith("segment 4 committed; frames 1,034/8,192 (12.6 %), 30 fps, 1 face/frame, ETA ")


def test_frames_committed_before_this_process_are_done_but_not_fast() -> None:
    clock, lines = Clock(), []
    progress = Progress(1000, done=900, emit=lines.append, every_s=5, clock=clock)

    clock.now += 10
    progress.frames_done(20, faces=50)

    assert lines == ["frames 920/1,000 (92.0 %), 2 fps, 2.5 faces/frame, ETA 40 s"]
    assert progress.remaining == 80


def test_before_any_frame_the_eta_is_unknown() -> None:
    progress = Progress(100, emit=print, clock=Clock())

    assert progress.line() == "frames 0/100 (0.0 %), 0 fps, ETA unknown"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (0.004, "0.004"),
        (0.314, "0.31"),
        (0.999, "1"),
        (1, "1"),
        (3.14, "3.1"),
        (9.96, "10"),
        (31.4, "31"),
        (1234.5, "1,234"),
    ],
)
def test_numbers_are_rounded_for_people(value: float, text: str) -> None:
    assert people_number(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0 s"),
        (45.2, "45 s"),
        (230, "3 min 50 s"),
        (599.4, "9 min 59 s"),
        (1510, "25 min"),
        (7500, "2 h 5 min"),
        (3 * 86400 + 4 * 3600 + 100, "3 d 4 h"),
    ],
)
def test_durations_are_rounded_for_people(seconds: float, text: str) -> None:
    assert people_duration(seconds) == text
