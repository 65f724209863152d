"""The background remover: a model's foreground mask of the whole frame (at its own size, scaled back), the
``background_remover_despill_color`` taken out of the picture, then the background filled with
``background_remover_fill_color``. It reads no faces and keeps the frame's size. With a fill whose alpha is below 255
(``Options.transparent_background``) each frame comes back RGBA: as FaceFusion writes its files, the colour is the
fill mixed in by that alpha and the alpha plane is the model's matte (``chain`` carries it past later processors)."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.models import MatteFacts, matte_facts
from facefusion_provider.engine.processors.base import (
    FaceStats,
    FrameStep,
    ProcessedFrame,
    Processor,
    timed,
)
from facefusion_provider.engine.runtime import each, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import BackgroundRemoverOptions, Options

Mask = np.ndarray  # H x W uint8, 255 where the foreground is
Rgba = tuple[int, int, int, int]


class BackgroundRemover(Processor):
    name = "background_remover"
    options = BackgroundRemoverOptions
    model_option = "background_remover_model"

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """Nothing from the sources; its model opened now, so a missing or mismatched file fails in prepare."""
        store.session_for(options.background_remover_model, options)
        return {}

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        name = options.background_remover_model
        return RemoveBackgrounds(
            store.session_for(name, options),
            matte_facts(name),
            options.background_remover_fill_color,
            options.background_remover_despill_color,
            stats,
            options.transparent_background(),
        )


def model_input(frame: Frame, facts: MatteFacts) -> np.ndarray:
    """(1, 3 or 4, S, S) float32: the frame resized, RGB 0..1 normalised by the model's mean and std; for
    corridor_key a fourth channel, the coarse key: 0 where green outweighs red and blue by half or more."""
    size = (facts.size, facts.size)
    rgb = cv2.resize(frame, size).astype(np.float32) / np.float32(255.0)
    channels = [(rgb - np.asarray(facts.mean, np.float32)) / np.asarray(facts.std, np.float32)]
    if facts.kind == "corridor_key":
        unit = frame.astype(np.float32) / np.float32(255.0)
        green_bias = unit[:, :, 1] - np.maximum(unit[:, :, 0], unit[:, :, 2])
        channels.append(cv2.resize(1.0 - np.clip(green_bias * 2.0, 0.0, 1.0), size)[:, :, None])
    return np.ascontiguousarray(np.concatenate(channels, axis=2).transpose(2, 0, 1)[None], np.float32)


def foreground_mask(outputs: list[np.ndarray], facts: MatteFacts, width: int, height: int) -> Mask:
    """The model's first output as a 0..255 mask at the frame's size: clipped to 0..1 at the model's size, then
    resized; u2net_cloth's class scores are foreground wherever the best class is not the background (0)."""
    scores = outputs[0]
    if facts.kind == "classes":
        scores = np.argmax(scores, axis=1)
    mask = (np.clip(np.squeeze(scores), 0.0, 1.0) * 255).astype(np.uint8)
    return np.asarray(cv2.resize(mask, (width, height)), np.uint8)


def despill(frame: Frame, colour: Rgba) -> Frame:
    """FaceFusion's despill: each channel of ``colour`` pulled down towards the mean of the pixel's other two, in
    proportion to that channel's share of the colour and to its alpha (0 changes nothing)."""
    if colour[3] == 0:
        return frame
    pixels = frame.astype(np.float32)
    weight = np.asarray(colour[:3], np.float32) / max(*colour[:3], 1)
    others = np.roll(pixels, 1, axis=2) + np.roll(pixels, -1, axis=2)
    limited = np.minimum(pixels, others * 0.5)
    return np.asarray(pixels + (limited - pixels) * (colour[3] / 255.0) * weight).astype(np.uint8)


def fill_background(frame: Frame, mask: Mask, colour: Rgba) -> Frame:
    """The background (where ``mask`` is below 255) mixed towards ``colour``, by its alpha."""
    weight = np.subtract(255, mask, dtype=np.float32)
    weight *= np.float32(colour[3] / 255.0 / 255.0)
    mixed = np.subtract(np.asarray(colour[:3], np.float32), frame, dtype=np.float32)
    mixed *= weight[:, :, None]
    mixed += frame
    return mixed.astype(np.uint8)


@dataclass(frozen=True)
class RemoveBackgrounds:
    session: ort.InferenceSession
    facts: MatteFacts
    fill: Rgba
    despill: Rgba
    stats: FaceStats
    transparent: bool = False  # frames come back RGBA, their alpha the matte

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        with timed(self.stats, "remove_background"):
            return list(each(pool, self.remove, frames))

    def remove(self, frame: Frame) -> Frame:
        height, width = frame.shape[:2]
        outputs = run_session(self.session, {"input": model_input(frame, self.facts)})
        if self.facts.kind == "corridor_key":  # its second output, the foreground's own colours, replaces the frame
            colours = (np.clip(np.squeeze(outputs[1]).transpose(1, 2, 0) * 255, 0, 255)).astype(np.uint8)
            frame = np.asarray(cv2.resize(colours, (width, height)), np.uint8)
        mask = foreground_mask(outputs, self.facts, width, height)
        filled = fill_background(despill(frame, self.despill), mask, self.fill)
        return np.dstack((filled, mask)) if self.transparent else filled


PROCESSOR = BackgroundRemover()
