"""The frame colorizer: the whole frame, seen in grey at ``frame_colorizer_size``, coloured by a model (ddcolor or
deoldify), its predicted chroma scaled back up over the frame's own lightness, then blended over the frame by
``frame_colorizer_blend``. It reads no faces and keeps the frame's size."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.models import ColorizeFacts, colorize_facts
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
from facefusion_provider.options import FrameColorizerOptions, Options


class FrameColorizer(Processor):
    name = "frame_colorizer"
    options = FrameColorizerOptions
    model_option = "frame_colorizer_model"

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """Nothing from the sources; its model checked now, so a missing or mismatched file fails in prepare."""
        checked_session(options, store)
        return {}

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        facts = colorize_facts(options.frame_colorizer_model)
        size = colorizer_size(options)
        blend = options.frame_colorizer_blend / 100.0
        return ColorizeFrames(checked_session(options, store), facts, size, blend, stats)


def colorizer_size(options: Options) -> int:
    return int(options.frame_colorizer_size.split("x")[0])


def checked_session(options: Options, store: ModelStore) -> ort.InferenceSession:
    """The chosen colorizer's session, one blank frame through it: a model of another kind fails here, not mid-video."""
    name = options.frame_colorizer_model
    session = store.session_for(name, options)
    facts, size = colorize_facts(name), colorizer_size(options)
    found = tuple(run_session(session, {"input": np.zeros((1, 3, size, size), np.float32)})[0].shape)
    expected = (1, 2 if facts.kind == "ddcolor" else 3, size, size)
    if found != expected:
        raise ModelIncompatibleError(
            f"{name}.onnx does not look like {name}: a {size}x{size} frame gave an output of shape {found}, "
            f"expected {expected} ({facts.kind}). Use FaceFusion's {name}.onnx."
        )
    return session


def model_input(frame: Frame, facts: ColorizeFacts, size: int) -> np.ndarray:
    """The frame in grey at ``size``, (1, 3, size, size) float32: RGB 0..1 for ddcolor, 0..255 for deoldify."""
    grey = cv2.resize(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), (size, size))
    rgb = np.repeat(grey[:, :, None], 3, axis=2).astype(np.float32)
    if facts.kind == "ddcolor":  # FaceFusion's round trip through LAB's lightness (a and b zero): grey again
        lightness = cv2.cvtColor(rgb / np.float32(255.0), cv2.COLOR_RGB2LAB)[:, :, :1]
        lab = np.concatenate([lightness, np.zeros_like(rgb[:, :, :2])], axis=2)
        rgb = np.asarray(cv2.cvtColor(lab, cv2.COLOR_LAB2RGB), np.float32)
    return np.ascontiguousarray(rgb.transpose(2, 0, 1)[None], np.float32)


def merge_colour(frame: Frame, output: np.ndarray, facts: ColorizeFacts) -> Frame:
    """The model's (C, S, S) output at the frame's size, merged over the frame's lightness: ddcolor's a and b (LAB,
    float) with the frame's L; deoldify's frame's a and b (8-bit LAB) with the frame's blue channel as L, as
    FaceFusion merges it (on a black-and-white frame blue is the grey)."""
    height, width = frame.shape[:2]
    colour = cv2.resize(np.ascontiguousarray(output.transpose(1, 2, 0), np.float32), (width, height))
    if facts.kind == "ddcolor":
        lightness = cv2.cvtColor(frame.astype(np.float32) / np.float32(255.0), cv2.COLOR_RGB2LAB)[:, :, :1]
        rgb = cv2.cvtColor(np.concatenate([lightness, colour], axis=2), cv2.COLOR_LAB2RGB)
        return np.asarray(np.clip(np.round(rgb * 255.0), 0, 255), np.uint8)
    chroma = cv2.cvtColor(np.clip(colour, 0, 255).astype(np.uint8), cv2.COLOR_RGB2LAB)
    chroma[:, :, 0] = frame[:, :, 2]
    return np.asarray(cv2.cvtColor(chroma, cv2.COLOR_LAB2RGB), np.uint8)


@dataclass(frozen=True)
class ColorizeFrames:
    session: ort.InferenceSession
    facts: ColorizeFacts
    size: int
    blend: float  # how much of the coloured frame is kept over the frame
    stats: FaceStats

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        with timed(self.stats, "colorize"):
            return list(each(pool, self.colorize, frames))

    def colorize(self, frame: Frame) -> Frame:
        output = run_session(self.session, {"input": model_input(frame, self.facts, self.size)})[0][0]
        coloured = merge_colour(frame, output, self.facts)
        if self.blend >= 1.0:
            return coloured
        return np.asarray(cv2.addWeighted(frame, 1.0 - self.blend, coloured, self.blend, 0.0), np.uint8)


PROCESSOR = FrameColorizer()
