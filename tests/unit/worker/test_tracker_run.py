"""The face tracker through the worker: on a real clip where the detector misses the face for two frames (injected),
the tracked run swaps those frames too and the untracked run leaves them as they were; and a span started at the
segment right before the misses, seeded from its pre-roll, gives the frames of a run from frame 0."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from committed import work_uri_for
from people import carphone, person_file
from readback import frame_digests, rgb_frames

from facefusion_provider import worker
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.processors import chain

SEGMENT = 8
FRAMES = 3 * SEGMENT
MISSED = (SEGMENT, SEGMENT + 1)  # the first two frames of segment 1: its tracker has only its pre-roll to go on
# Near-lossless: the encoder's own noise (its macroblock tree spends fewer bits on some frames) stays far below a swap.
TRACKED: dict[str, Any] = {"segment_size": SEGMENT, "face_tracker_score": 0.3, "output_video_quality": 95}
UNTRACKED: dict[str, Any] = {"segment_size": SEGMENT, "face_tracker_score": 0.0, "output_video_quality": 95}


@dataclass(frozen=True)
class Clip:
    target: str
    source: str
    frames: list[Frame]  # the target's frames, RGB


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Clip:
    folder = tmp_path_factory.mktemp("tracker")
    target = str(carphone(folder / "carphone.mp4", frames=FRAMES))
    source = person_file(folder / "astronaut.jpg")
    return Clip(target, str(source), rgb_frames(target))


def _thumbnail(frame: Frame) -> np.ndarray:
    return cv2.resize(frame, (44, 36), interpolation=cv2.INTER_AREA).astype(np.float32)


@pytest.fixture
def blind_detector(clip: Clip, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The detector finds nothing in the target's frames ``MISSED`` (told apart by their pixels, whichever thread or
    pre-roll asks). Returns the numbers of the frames it was blind on, one entry per call."""
    thumbnails = np.stack([_thumbnail(frame) for frame in clip.frames])
    detect: Callable[..., list[Face]] = chain.detect_faces
    blind: list[int] = []

    def missing_some(frame: Frame, *args: Any) -> list[Face]:
        if frame.shape == clip.frames[0].shape:
            distances = np.abs(thumbnails - _thumbnail(frame)).mean(axis=(1, 2, 3))
            number = int(np.argmin(distances))
            if number in MISSED and distances[number] < 2.0:
                blind.append(number)
                return []
        return detect(frame, *args)

    monkeypatch.setattr(chain, "detect_faces", missing_some)
    return blind


def _face_change(output: Path, clip: Clip) -> list[float]:
    """Per frame, how far the output is from the target inside the frame's middle (where the face is): mean abs."""
    height, width = clip.frames[0].shape[:2]
    rows, columns = slice(height // 5, height * 3 // 5), slice(width // 3, width * 2 // 3)
    return [
        float(np.abs(out[rows, columns].astype(np.int16) - target[rows, columns].astype(np.int16)).mean())
        for out, target in zip(rgb_frames(str(output)), clip.frames, strict=True)
    ]


def test_a_face_the_detector_misses_for_two_frames_is_swapped_only_with_the_tracker(
    clip: Clip, blind_detector: list[int], tmp_path: Path
) -> None:
    tracked, untracked = tmp_path / "tracked.mp4", tmp_path / "untracked.mp4"
    worker.run([clip.source], clip.target, str(tracked), str(tmp_path / "work"), **TRACKED)
    worker.run([clip.source], clip.target, str(untracked), str(tmp_path / "work"), **UNTRACKED)
    assert set(blind_detector) == set(MISSED), "the detector was blind on those frames in both runs"

    seen = [change for number, change in enumerate(_face_change(untracked, clip)) if number not in MISSED]
    swapped = float(np.median(seen))
    assert min(seen) > swapped / 2, "every frame with a detection is swapped"
    untracked_change, tracked_change = _face_change(untracked, clip), _face_change(tracked, clip)
    for number in MISSED:
        assert untracked_change[number] < swapped / 4, f"frame {number}: without the tracker, the original face"
        assert tracked_change[number] > swapped / 2, f"frame {number}: the tracker carried the face, swapped"


def test_a_tracked_span_started_just_before_the_misses_equals_a_run_from_frame_0(
    clip: Clip, blind_detector: list[int], tmp_path: Path
) -> None:
    whole = tmp_path / "whole.mp4"
    worker.run([clip.source], clip.target, str(whole), str(tmp_path / "whole"), **TRACKED)
    work_uri = work_uri_for(str(tmp_path / "work"), [clip.source], clip.target, **TRACKED)
    worker.prepare(work_uri, [clip.source], clip.target, **TRACKED)
    last = worker.swap_span(work_uri, clip.target, 1, 3, span=1)  # segments 1 and 2 after a seek, then segment 0
    assert (last.committed, last.helped_in_run) == (3, 1)
    from_the_middle = tmp_path / "from-the-middle.mp4"
    worker.merge(work_uri, clip.target, str(from_the_middle))
    assert [d.md5 for d in frame_digests(str(from_the_middle))] == [d.md5 for d in frame_digests(str(whole))]
    assert blind_detector.count(SEGMENT) >= 2, "both runs met the miss"
