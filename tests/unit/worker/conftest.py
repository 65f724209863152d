"""Small real videos for the worker tests, written with PyAV by the tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from synth import VideoSpec, pattern_frames, write_video

MakeVideo = Callable[..., str]


@pytest.fixture
def make_video(tmp_path: Path) -> MakeVideo:
    """``make_video(frames=30, name="target.mp4", **VideoSpec fields) -> path`` of a freshly written video."""

    def make(frames: int = 30, name: str = "target.mp4", **fields: object) -> str:
        spec = VideoSpec(**fields)  # type: ignore[arg-type]
        path = str(tmp_path / name)
        write_video(path, spec, pattern_frames(frames, spec.width, spec.height))
        return path

    return make


@pytest.fixture
def work_root(tmp_path: Path) -> str:
    return str(tmp_path / "work")


def work_folders(work_root: str) -> list[Path]:
    folder = Path(work_root) / "work"
    return sorted(folder.iterdir()) if folder.is_dir() else []
