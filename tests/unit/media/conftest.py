"""Real test videos, written with PyAV by the tests themselves (small sizes: the suite runs on 2 cores)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from synth import VideoSpec, pattern_frames, write_video

MakeVideo = Callable[..., str]


@pytest.fixture
def make_video(tmp_path: Path) -> MakeVideo:
    """``make_video(frames=30, name="target.mp4", **VideoSpec fields) -> path`` of a freshly written video."""

    def make(frames: int = 30, name: str = "target.mp4", seed: int = 0, **fields: object) -> str:
        spec = VideoSpec(**fields)  # type: ignore[arg-type]
        path = str(tmp_path / name)
        write_video(path, spec, pattern_frames(frames, spec.width, spec.height, seed=seed))
        return path

    return make


# B-frames and one keyframe every 250 frames: the hard case for frame-exact seeking and for concatenation.
BFRAMES_LONG_GOP = {"preset": "veryfast", "crf": "20", "bf": "3", "g": "250", "keyint_min": "250", "sc_threshold": "0"}
