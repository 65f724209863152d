"""Checks of an output whose frames have another size than its target's: each frame a resize of its target frame,
and the target's frame count, timing and sound kept.

Tolerance (``TOLERANCE``): each output frame is OpenCV's resize of the decoded target frame, put through the same RGB
to 4:2:0 and back conversion the encoder's input goes through, within 5 levels everywhere, fewer than 0.5 % of values
more than 2 levels off and a mean error under 0.25. The bilinear stand-ins are OpenCV's bilinear within one level, and
a one-level difference in RGB moves a 4:2:0 sample, which back in RGB spreads over its four pixels' channels, up to
about twice over in blue (measured: 4-5 levels at most, 0.13-0.16 % of values over 2, a mean of 0.15).
"""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from readback import frame_digests, packet_payloads

from facefusion_provider.media.images import rgb_array, rgb_frame

TOLERANCE = 5  # levels, per pixel and channel
OFF_BY_MORE_THAN_TWO = 0.005  # the share of values more than 2 levels off, at most
MEAN_ERROR = 0.25  # levels


def rgb_frames(path: str | Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def as_encoded(image: np.ndarray) -> np.ndarray:
    """``image`` through the 4:2:0 conversion the encoder's input goes through, and back."""
    return rgb_array(rgb_frame(image).reformat(format="yuv420p"))


def assert_resized(output: str | Path, target: str | Path, size: tuple[int, int], interpolation: int) -> None:
    """Every output frame is ``size`` and OpenCV's resize of its target frame within the tolerance."""
    expected_frames, found_frames = rgb_frames(target), rgb_frames(output)
    assert len(found_frames) == len(expected_frames)
    for number, (before, after) in enumerate(zip(expected_frames, found_frames, strict=True)):
        assert (after.shape[1], after.shape[0]) == size
        expected = as_encoded(cv2.resize(before, size, interpolation=interpolation))
        error = np.abs(after.astype(int) - expected.astype(int))
        assert error.max() <= TOLERANCE, f"frame {number}: {error.max()} levels off"
        assert (error > 2).mean() < OFF_BY_MORE_THAN_TWO and error.mean() < MEAN_ERROR, f"frame {number}: off"


def _timing(path: str | Path) -> tuple[list[float], list[float]]:
    """Each frame's and each sound packet's start, in seconds after the first frame's (Matroska moves both alike)."""
    frames = [digest.seconds for digest in frame_digests(str(path))]
    return [t - frames[0] for t in frames], [t - frames[0] for t, _ in packet_payloads(str(path))]


def assert_same_timing_and_sound(output: str | Path, target: str | Path) -> None:
    """The target's frame times and sound packets, byte for byte and in sync (to Matroska's millisecond)."""
    (frames, sound), (target_frames, target_sound) = _timing(output), _timing(target)
    assert frames == pytest.approx(target_frames, abs=1e-3) and sound == pytest.approx(target_sound, abs=1e-3)
    assert [payload for _, payload in packet_payloads(str(output))] == [p for _, p in packet_payloads(str(target))]
    assert target_sound  # the target has sound to compare
