"""Progress lines for people in the task log: frames done of total, fps, faces per frame and ETA, rounded to read.

``Progress`` is fed by the frame loop (``frames_done``) and by each commit (``committed``); it writes a line when
``every_s`` has passed since the last one, and at every commit:

    frames 1,024/8,192 (12.5 %), 31 fps, 1 face/frame, ETA 3 min 50 s

The fps and the ETA count only this process's frames (a retry that starts at the first uncommitted segment counts the
committed ones as done, not as fast). Pure: the clock and the line's destination are given.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_EVERY_S = 10.0


class Progress:
    """Frames done of ``total`` (``done`` of them before this process started), reported through ``emit``."""

    def __init__(
        self,
        total: int,
        *,
        emit: Callable[[str], None],
        done: int = 0,
        every_s: float = DEFAULT_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        faces_per_frame: Callable[[], float | None] | None = None,
    ) -> None:
        self.total = total
        self.done = done
        self._emit = emit
        self._every_s = every_s
        self._clock = clock
        self._started = self._last_line = clock()
        self._frames = 0  # this process's
        self._faces = 0
        self._faces_per_frame = faces_per_frame  # counted where the frames are processed, when given

    @property
    def remaining(self) -> int:
        return max(self.total - self.done, 0)

    def frames_done(self, frames: int, faces: int = 0) -> None:
        """``frames`` more frames are done, with ``faces`` faces swapped in them; a line if one is due."""
        self.done += frames
        self._frames += frames
        self._faces += faces
        if self._clock() - self._last_line >= self._every_s:
            self._write(self.line())

    def committed(self, segment: int) -> None:
        """Segment ``segment`` is committed: a line now."""
        self._write(f"segment {segment} committed; {self.line()}")

    def line(self) -> str:
        elapsed = self._clock() - self._started
        fps = self._frames / elapsed if elapsed > 0 else 0.0
        percent = 100 * self.done / self.total if self.total else 100.0
        parts = [f"frames {self.done:,}/{self.total:,} ({percent:.1f} %)", f"{people_number(fps)} fps"]
        ratio = (
            self._faces_per_frame() if self._faces_per_frame else self._faces / self._frames if self._frames else None
        )
        if ratio is not None:
            per_frame = people_number(ratio)
            parts.append(f"{per_frame} {'face' if per_frame == '1' else 'faces'}/frame")
        parts.append(f"ETA {people_duration(self.remaining / fps)}" if fps > 0 else "ETA unknown")
        return ", ".join(parts)

    def _write(self, line: str) -> None:
        self._last_line = self._clock()
        self._emit(line)


def people_number(value: float) -> str:
    """Two significant digits below 10, whole numbers above: 0.31, 3.1, 31, 1,234."""
    if value >= 9.95:
        return f"{round(value):,}"
    if value >= 0.995:
        return f"{value:.1f}".removesuffix(".0")
    return f"{value:.2g}"


def people_duration(seconds: float) -> str:
    """A duration to the precision people plan with: 45 s, 3 min 50 s, 25 min, 2 h 5 min, 3 d 4 h."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 600:
        return f"{whole // 60} min {whole % 60} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 24 * 60:
        return f"{minutes // 60} h {minutes % 60} min"
    hours = round(seconds / 3600)
    return f"{hours // 24} d {hours % 24} h"
