"""Frame processors a test registers in place of real ones: whole-frame arithmetic, no model, no faces, so what the
chain gives is known exactly for any frame."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import numpy as np
import pytest

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.processors import registry
from facefusion_provider.engine.processors.base import FaceStats, FrameStep, Processor
from facefusion_provider.engine.processors.needs import NO_ANALYSIS, AnalysisNeeds
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import FaceEnhancerOptions, Options


class WholeFrame(Processor):
    """A processor of whole frames; ``calls`` counts its batches, ``loads`` its loads."""

    name = "fake"
    options = FaceEnhancerOptions  # a registered name's options: Options accepts only the names it knows

    def __init__(self) -> None:
        self.calls = 0
        self.loads = 0

    def model(self, options: Options) -> str:
        return type(self).__name__.lower()

    def model_names(self, options: Options) -> tuple[str, ...]:
        return ()

    def analysis(self, options: Options) -> AnalysisNeeds:
        return NO_ANALYSIS

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        self.loads += 1
        return self.step

    def step(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[Frame]:
        assert all(not found for found in faces), "a processor that needs no analysis is handed no faces"
        self.calls += 1
        return [self.apply(frame) for frame in frames]

    def apply(self, frame: Frame) -> Frame:
        raise NotImplementedError


class Inverter(WholeFrame):
    def apply(self, frame: Frame) -> Frame:
        return np.asarray(255 - frame, np.uint8)


class Darkener(WholeFrame):
    """Halves every level: after the inverter it gives (255 - x) // 2, before it 255 - x // 2."""

    def apply(self, frame: Frame) -> Frame:
        return np.asarray(frame // 2, np.uint8)


def register(monkeypatch: pytest.MonkeyPatch, **processors: WholeFrame) -> None:
    """Stand ``processors`` in for the registered processors of those names, for one test."""
    for name, processor in processors.items():
        monkeypatch.setitem(registry.PROCESSORS, name, processor)
