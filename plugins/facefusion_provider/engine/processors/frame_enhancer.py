"""The frame enhancer: the whole frame upscaled by a super-resolution model (x2, x4 or x8), tile by tile
(``engine/frame_tiles.py``), then blended over the frame simply resized by ``frame_enhancer_blend``. It reads no faces,
and its frames are ``scale`` times larger."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.frame_tiles import PlanarTiles, Tiles, cut_tiles, merge_tiles
from facefusion_provider.engine.models import FrameEnhanceFacts, frame_enhance_facts
from facefusion_provider.engine.processors.base import (
    FaceStats,
    FrameStep,
    ProcessedFrame,
    Processor,
    timed,
)
from facefusion_provider.engine.runtime import each, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import ModelIncompatibleError
from facefusion_provider.options import FrameEnhancerOptions, Options

TILE_BATCH_PIXELS = 2**23  # output pixels per model call (8 tiles of 1024 x 1024): tiles go in batches up to this


class FrameEnhancer(Processor):
    name = "frame_enhancer"
    options = FrameEnhancerOptions
    model_option = "frame_enhancer_model"

    def output_size(self, options: Options, width: int, height: int) -> tuple[int, int]:
        scale = frame_enhance_facts(options.frame_enhancer_model).scale
        return width * scale, height * scale

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        name = options.frame_enhancer_model
        session = store.session_for(name, options)
        facts = frame_enhance_facts(name)
        blank = np.zeros((1, 3, facts.tile, facts.tile), np.float32)
        found = tuple(run_session(session, {"input": blank})[0].shape)
        expected = (1, 3, facts.tile * facts.scale, facts.tile * facts.scale)
        if found != expected:  # one tile through it now: a model of another scale fails here, not mid-video
            raise ModelIncompatibleError(
                f"{name}.onnx does not look like {name}: a {facts.tile}x{facts.tile} tile gave an output of shape "
                f"{found}, expected {expected} (x{facts.scale}). Use FaceFusion's {name}.onnx."
            )
        return EnhanceFrames(
            session, facts, options.frame_enhancer_blend / 100.0, _tiles_per_call(session, facts), stats
        )


def _tiles_per_call(session: ort.InferenceSession, facts: FrameEnhanceFacts) -> int:
    """As many tiles per call as ``TILE_BATCH_PIXELS`` allows, where the model's batch dimension is free; else one."""
    if isinstance(session.get_inputs()[0].shape[0], int):
        return 1
    return max(1, TILE_BATCH_PIXELS // (facts.tile * facts.scale) ** 2)


def tiles_input(tiles: Tiles) -> np.ndarray:
    """(N, S, S, 3) RGB uint8 -> (N, 3, S, S) float32 in 0..1."""
    return np.ascontiguousarray(tiles.transpose(0, 3, 1, 2), np.float32) / np.float32(255.0)


def tiles_output(output: np.ndarray) -> PlanarTiles:
    """(N, 3, S, S) in 0..1 -> the same in levels, uint8, rounded: one float copy, worked in place (a 4K frame's
    tiles are some 45 million values)."""
    levels: np.ndarray = np.multiply(output, np.float32(255.0), dtype=np.float32)
    levels += np.float32(0.5)
    np.clip(levels, 0.0, 255.0, out=levels)
    return np.asarray(levels, np.uint8)


@dataclass(frozen=True)
class EnhanceFrames:
    session: ort.InferenceSession
    facts: FrameEnhanceFacts
    blend: float  # how much of the model's frame is kept over the frame resized
    tiles_per_call: int
    stats: FaceStats

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        with timed(self.stats, "enhance"):
            return list(each(pool, self.enhance, frames))

    def enhance(self, frame: Frame) -> Frame:
        tiles, grid = cut_tiles(frame, self.facts)
        outputs = [
            tiles_output(
                run_session(self.session, {"input": tiles_input(tiles[first : first + self.tiles_per_call])})[0]
            )
            for first in range(0, len(tiles), self.tiles_per_call)
        ]
        enhanced = merge_tiles(np.concatenate(outputs), grid)
        if self.blend >= 1.0:
            return enhanced
        resized = cv2.resize(frame, grid.output_size)  # FaceFusion's blend: over the frame resized (bilinear)
        return np.asarray(cv2.addWeighted(resized, 1.0 - self.blend, enhanced, self.blend, 0.0), np.uint8)


PROCESSOR = FrameEnhancer()
