"""``output_video_scale``: the finished frames resized by a factor, after every processor of the chain."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass

import cv2
import numpy as np

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.frame_size import scaled_size
from facefusion_provider.engine.processors.base import FaceStats, ProcessedFrame, timed
from facefusion_provider.engine.runtime import each


@dataclass(frozen=True)
class ScaleFrames:
    """The chain's last step where ``output_video_scale`` is not 1: bilinear when enlarging, by area when shrinking
    (no aliasing)."""

    scale: float
    stats: FaceStats

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        with timed(self.stats, "scale"):
            return list(each(pool, self.resize, frames))

    def resize(self, frame: Frame) -> Frame:
        height, width = frame.shape[:2]
        interpolation = cv2.INTER_LINEAR if self.scale > 1.0 else cv2.INTER_AREA
        return np.asarray(
            cv2.resize(frame, scaled_size(width, height, self.scale), interpolation=interpolation), np.uint8
        )
