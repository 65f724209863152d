"""The face enhancer: each selected face restored by a catalogue model (gfpgan, gpen_bfr, codeformer,
restoreformer++) and blended back by ``face_enhancer_blend`` (``engine/enhance.py`` holds the model's call)."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from facefusion_provider.engine.enhance import enhance_face
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.processors.base import FaceStats, FrameStep, ProcessedFrame, Processor, timed
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.runtime import each
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import FaceEnhancerOptions, Options


class FaceEnhancer(Processor):
    name = "face_enhancer"
    options = FaceEnhancerOptions
    model_option = "face_enhancer_model"

    def analysis(self, options: Options) -> AnalysisNeeds:
        return AnalysisNeeds(faces=True)  # aligned by the detector's five points

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        store.session_for(options.face_enhancer_model, options)
        return EnhanceFaces(options, store, stats)


@dataclass(frozen=True)
class EnhanceFaces:
    options: Options
    store: ModelStore
    stats: FaceStats

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        with timed(self.stats, "enhance"):
            return list(each(pool, self.enhance, list(zip(frames, faces, strict=True))))

    def enhance(self, pair: tuple[Frame, list[Face]]) -> Frame:
        frame, faces = pair
        if not faces:
            return frame
        frame = frame.copy()  # one copy a frame; its faces are enhanced into it in turn
        for face in faces:
            enhance_face(frame, face, self.options, self.store, in_place=True)
        return frame


PROCESSOR = FaceEnhancer()
