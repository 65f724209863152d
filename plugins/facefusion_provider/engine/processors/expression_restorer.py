"""The expression restorer: each selected face (as the processors before it left it, e.g. swapped) redrawn by
LivePortrait with the expression the target's own frame had there, by ``expression_restorer_factor`` and only in the
``expression_restorer_areas`` (``engine/live_portrait.py`` holds the networks' calls).

Both crops are cut at the face's five points on arcface_128 at 512: one from the target's frame as decoded (it reads
the chain's target frames: ``TargetFramesStep``), one from the frame as it comes. The face's own keypoints are
driven towards the target's expression (factor 0-100 mapped to 0-1.2, mixed with the face's own, clipped to
LivePortrait's bounds) and the generator's crop goes back through the box mask (and the occlusion mask when chosen).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from facefusion_provider.engine.align import WarpTemplate, warp_face
from facefusion_provider.engine.crop_masks import create_box_mask
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_masks import occlusion_mask
from facefusion_provider.engine.live_portrait import CROP_SIZE, LivePortrait, crop_input, limit_expression
from facefusion_provider.engine.models import LivePortraitNetwork, live_portrait_model
from facefusion_provider.engine.paste import paste_back
from facefusion_provider.engine.processors.base import (
    FaceStats,
    FrameStep,
    ProcessedFrame,
    Processor,
    TargetFramesStep,
    timed,
)
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.runtime import each
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import ExpressionRestorerOptions, Options

NETWORKS: tuple[LivePortraitNetwork, ...] = ("feature_extractor", "motion_extractor", "generator")
TEMPLATE: WarpTemplate = "arcface_128"
MAX_FACTOR = 1.2  # expression_restorer_factor 100 drives the face a fifth past the target's expression
# The keypoints each area moves; the rest (0, 4, 5, 8, 9) always keep the face's own expression.
AREA_POINTS: dict[str, tuple[int, ...]] = {
    "upper-face": (1, 2, 6, 10, 11, 12, 13, 15, 16),
    "lower-face": (3, 7, 14, 17, 18, 19, 20),
}
NO_PADDING = (0, 0, 0, 0)


class ExpressionRestorer(Processor):
    name = "expression_restorer"
    options = ExpressionRestorerOptions
    model_option = "expression_restorer_model"

    def model_names(self, options: Options) -> tuple[str, ...]:
        networks = tuple(live_portrait_model(options.expression_restorer_model, network) for network in NETWORKS)
        return (*networks, *([options.face_occluder_model] if "occlusion" in options.face_mask_types else []))

    def analysis(self, options: Options) -> AnalysisNeeds:
        return AnalysisNeeds(faces=True)  # aligned by the five points

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """Nothing from the sources; its models opened now, so a missing or mismatched file fails in prepare."""
        for name in self.model_names(options):
            store.session_for(name, options)
        return {}

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        if "occlusion" in options.face_mask_types:
            store.session_for(options.face_occluder_model, options)
        networks = LivePortrait.load(options.expression_restorer_model, NETWORKS, store, options)
        factor = options.expression_restorer_factor / 100.0 * MAX_FACTOR
        return RestoreExpressions(networks, factor, tuple(options.expression_restorer_areas), options, store, stats)


def restored_expression(own: FloatArray, target: FloatArray, factor: float, areas: Sequence[str]) -> FloatArray:
    """The driving expression: in the chosen ``areas`` the target's, elsewhere the face's ``own``; mixed with the
    face's own by ``factor`` (0-1.2) and clipped to LivePortrait's bounds."""
    chosen = [point for area in areas for point in AREA_POINTS[area]]
    wanted = own.copy()
    wanted[:, chosen] = target[:, chosen]
    return limit_expression(wanted * np.float32(factor) + own * np.float32(1.0 - factor))


@dataclass(frozen=True)
class RestoreExpressions(TargetFramesStep):
    networks: LivePortrait
    factor: float  # 0-1.2
    areas: tuple[str, ...]
    options: Options
    store: ModelStore
    stats: FaceStats

    def with_targets(
        self, targets: list[Frame], frames: list[Frame], faces: list[list[Face]], pool: Executor | None
    ) -> list[ProcessedFrame]:
        with timed(self.stats, "restore"):
            return list(each(pool, self.restore, list(zip(targets, frames, faces, strict=True))))

    def restore(self, item: tuple[Frame, Frame, list[Face]]) -> Frame:
        target, frame, faces = item
        if not faces:
            return frame
        frame = frame.copy()  # one copy a frame; its faces are restored into it in turn
        for face in faces:
            self.restore_face(target, frame, face)
        return frame

    def restore_face(self, target: Frame, frame: Frame, face: Face) -> None:
        """``face`` in ``frame`` redrawn with ``target``'s expression, in place."""
        target_crop, _ = warp_face(target, face.landmark_5, TEMPLATE, CROP_SIZE)
        crop, matrix = warp_face(frame, face.landmark_5, TEMPLATE, CROP_SIZE)
        mask = create_box_mask(CROP_SIZE, self.options.face_mask_blur, NO_PADDING)
        if "occlusion" in self.options.face_mask_types:
            mask = np.minimum(mask, occlusion_mask(crop, self.store, self.options))
        crop_fed = crop_input(crop)
        features = self.networks.features(crop_fed)
        wanted = self.networks.motion(crop_input(target_crop)).expression
        own = self.networks.motion(crop_fed)
        driving = own.keypoints(restored_expression(own.expression, wanted, self.factor, self.areas))
        restored = self.networks.generate(features, driving, own.keypoints())
        paste_back(frame, restored, mask, matrix, in_place=True)


PROCESSOR = ExpressionRestorer()
