"""The face editor: each selected face redrawn by LivePortrait with FaceFusion's sliders applied (brows, gaze, eyes and
lips open, mouth grim, pout, purse, smile and position, head pitch, yaw and roll; ``engine/live_portrait.py`` holds
the networks' calls).

The crop is cut on ffhq_512 at 512 around the face's five points spread 1.5 times from the nose. The sliders move
single expression values (``EXPRESSION_EDITS``, clipped to LivePortrait's bounds) and turn the head (within
FaceFusion's angle limits); the eye and lip sliders add the retargeters' offsets, which read the face's own eye and lip
open ratios off its dense landmarks (2dfan4's 68, or the face mesh's counterparts); the stitcher joins the driving
keypoints to the face's own, and the generator's crop goes back through the box mask.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from facefusion_provider.engine.align import WarpTemplate, warp_face
from facefusion_provider.engine.crop_masks import create_box_mask
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.landmarks import MESH_POINTS, mesh_found
from facefusion_provider.engine.live_portrait import (
    CROP_SIZE,
    LivePortrait,
    Motion,
    crop_input,
    limit_angles,
    limit_expression,
    rotation_matrix,
)
from facefusion_provider.engine.models import LivePortraitNetwork, live_portrait_model
from facefusion_provider.engine.paste import paste_back
from facefusion_provider.engine.processors.base import FaceStats, FrameStep, ProcessedFrame, Processor, timed
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.runtime import each
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import FaceEditorOptions, Options

NETWORKS: tuple[LivePortraitNetwork, ...] = (
    "feature_extractor",
    "motion_extractor",
    "generator",
    "stitcher",
    "eye_retargeter",
    "lip_retargeter",
)
TEMPLATE: WarpTemplate = "ffhq_512"
LANDMARK_SPREAD = 1.5  # the five points spread from the nose: the crop takes in the whole head
NO_PADDING = (0, 0, 0, 0)
Edit = tuple[int, int, float]  # expression point, axis (x, y, z), change per unit of the slider
_GAZE_VERTICAL: tuple[Edit, ...] = (
    (1, 1, 0.0025),
    (2, 1, -0.0025),
    (11, 1, -0.010),
    (13, 1, -0.005),
    (15, 1, -0.010),
    (16, 1, -0.005),
)
_MOUTH_ACROSS: tuple[Edit, ...] = ((19, 0, 0.05), (20, 0, 0.04))
# Each expression slider's changes, (for a positive value, for a negative one), as FaceFusion makes them.
EXPRESSION_EDITS: dict[str, tuple[tuple[Edit, ...], tuple[Edit, ...]]] = {
    "face_editor_eye_gaze_horizontal": (((11, 0, 0.015), (15, 0, 0.020)), ((11, 0, 0.020), (15, 0, 0.015))),
    "face_editor_eye_gaze_vertical": (_GAZE_VERTICAL, _GAZE_VERTICAL),
    "face_editor_mouth_grim": (
        ((17, 2, -0.005), (19, 2, 0.01), (20, 1, -0.06), (20, 2, -0.03)),
        ((19, 1, -0.05), (19, 2, -0.02), (20, 2, -0.03)),
    ),
    "face_editor_mouth_position_horizontal": (_MOUTH_ACROSS, _MOUTH_ACROSS),
    "face_editor_mouth_position_vertical": (((19, 1, -0.04), (20, 1, -0.02)), ((19, 1, -0.05), (20, 1, -0.04))),
    "face_editor_mouth_pout": (
        ((19, 1, -0.022), (19, 2, 0.025), (20, 2, -0.002)),
        ((19, 1, 0.022), (19, 2, 0.025), (20, 2, -0.002)),
    ),
    "face_editor_mouth_purse": (
        ((19, 1, -0.04), (19, 2, -0.02)),
        ((14, 1, -0.02), (17, 2, 0.01), (19, 2, -0.015), (20, 2, -0.002)),
    ),
    "face_editor_mouth_smile": (
        ((20, 1, -0.015), (14, 1, -0.025), (17, 1, 0.01), (17, 2, 0.004), (3, 1, -0.0045), (7, 1, -0.0045)),
        ((14, 1, -0.02), (17, 1, 0.003), (19, 1, 0.02), (19, 2, -0.005), (20, 2, 0.01), (3, 1, 0.0045), (7, 1, 0.0045)),
    ),
    "face_editor_eyebrow_direction": (
        ((1, 1, 0.015), (2, 1, -0.020)),
        ((1, 0, -0.015), (2, 0, 0.020), (1, 1, 0.005), (2, 1, -0.005)),
    ),
}
# Degrees a head slider at 1 turns the head by (pitch, yaw, roll): FaceFusion's signs.
HEAD_TURNS = (-20.0, -60.0, 15.0)
# The wanted ratio each retargeter is given for a closing (negative) or an opening slider.
EYE_TARGETS, LIP_TARGETS = (0.0, 0.6), (0.0, 1.0)
# Open ratios, (top, bottom, left, right) landmarks: |top - bottom| / |left - right|. The 68 layout's are FaceFusion's;
# the face mesh's are their counterparts on its 468 points.
Ratio = tuple[int, int, int, int]
RATIO_POINTS: dict[int, tuple[Ratio, Ratio, Ratio]] = {
    68: ((37, 40, 39, 36), (43, 46, 45, 42), (62, 66, 54, 48)),  # first eye, second eye, lips
    MESH_POINTS: ((160, 153, 133, 33), (385, 373, 263, 362), (13, 14, 291, 61)),
}


class FaceEditor(Processor):
    name = "face_editor"
    options = FaceEditorOptions
    model_option = "face_editor_model"

    def model_names(self, options: Options) -> tuple[str, ...]:
        return tuple(live_portrait_model(options.face_editor_model, network) for network in NETWORKS)

    def analysis(self, options: Options) -> AnalysisNeeds:
        """The five points; the dense landmarks too where the eye or lip slider reads the face's open ratios."""
        if not (options.face_editor_eye_open_ratio or options.face_editor_lip_open_ratio):
            return AnalysisNeeds(faces=True)
        return AnalysisNeeds(faces=True, landmarks="2dfan4" if options.face_landmarker_model == "2dfan4" else "mesh")

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """Nothing from the sources; its models opened now, so a missing or mismatched file fails in prepare."""
        for name in self.model_names(options):
            store.session_for(name, options)
        return {}

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        return EditFaces(LivePortrait.load(options.face_editor_model, NETWORKS, store, options), options, stats)


def spread_landmark_5(landmark_5: FloatArray, spread: float = LANDMARK_SPREAD) -> FloatArray:
    """The five points moved ``spread`` times as far from the nose tip (the third point)."""
    nose = landmark_5[2]
    return np.asarray((landmark_5 - nose) * spread + nose, np.float32)


def edited_expression(expression: FloatArray, options: Options) -> FloatArray:
    """``expression`` with each slider's changes (``EXPRESSION_EDITS``), clipped to LivePortrait's bounds."""
    edited = expression.copy()
    for slider, (raising, lowering) in EXPRESSION_EDITS.items():
        value = float(getattr(options, slider))
        for point, axis, change in raising if value > 0 else lowering:
            edited[0, point, axis] += np.float32(change * value)
    return limit_expression(edited)


def edited_rotation(own: Motion, options: Options) -> FloatArray:
    """The head's rotation turned by the head sliders, inside FaceFusion's angle limits."""
    sliders = (options.face_editor_head_pitch, options.face_editor_head_yaw, options.face_editor_head_roll)
    turned = tuple(angle + turn * slider for angle, turn, slider in zip(own.angles, HEAD_TURNS, sliders, strict=True))
    return rotation_matrix(*limit_angles(own.angles, (turned[0], turned[1], turned[2])))


def open_ratio(landmarks: FloatArray, points: Ratio) -> float:
    top, bottom, left, right = (landmarks[index] for index in points)
    return float(np.linalg.norm(top - bottom) / (np.linalg.norm(left - right) + 1e-6))


def open_ratios(face: Face) -> tuple[float, float, float] | None:
    """The face's two eyes' and its lips' open ratios off its dense landmarks; None without usable ones."""
    dense = face.landmark_dense
    if dense is None or len(dense) not in RATIO_POINTS or (len(dense) == MESH_POINTS and not mesh_found(face)):
        return None
    first, second, lips = (open_ratio(dense, points) for points in RATIO_POINTS[len(dense)])
    return first, second, lips


@dataclass(frozen=True)
class EditFaces:
    networks: LivePortrait
    options: Options
    stats: FaceStats

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        with timed(self.stats, "edit"):
            return list(each(pool, self.edit, list(zip(frames, faces, strict=True))))

    def edit(self, pair: tuple[Frame, list[Face]]) -> Frame:
        frame, faces = pair
        if not faces:
            return frame
        frame = frame.copy()  # one copy a frame; its faces are edited into it in turn
        for face in faces:
            self.edit_face(frame, face)
        return frame

    def edit_face(self, frame: Frame, face: Face) -> None:
        """``face`` in ``frame`` redrawn with the sliders applied, in place."""
        crop, matrix = warp_face(frame, spread_landmark_5(face.landmark_5), TEMPLATE, CROP_SIZE)
        mask = create_box_mask(CROP_SIZE, self.options.face_mask_blur, NO_PADDING)
        crop_fed = crop_input(crop)
        features = self.networks.features(crop_fed)
        own = self.networks.motion(crop_fed)
        own_points = own.keypoints()
        driving = own.keypoints(edited_expression(own.expression, self.options), edited_rotation(own, self.options))
        driving = driving + self.retargeted(own_points, open_ratios(face))
        driving = self.networks.stitch(driving, own_points)
        paste_back(frame, self.networks.generate(features, driving, own_points), mask, matrix, in_place=True)

    def retargeted(self, own_points: FloatArray, ratios: tuple[float, float, float] | None) -> FloatArray:
        """The eye and lip sliders' keypoint offsets, each the retargeter's answer times the slider's size (none for
        a slider at 0, or a face without dense landmarks)."""
        offset = np.zeros_like(own_points)
        eyes, lips = self.options.face_editor_eye_open_ratio, self.options.face_editor_lip_open_ratio
        if ratios is None:
            return offset
        if eyes:
            wanted = EYE_TARGETS[eyes > 0]
            offset += self.networks.retarget("eye_retargeter", own_points, [*ratios[:2], wanted]) * abs(eyes)
        if lips:
            wanted = LIP_TARGETS[lips > 0]
            offset += self.networks.retarget("lip_retargeter", own_points, [ratios[2], wanted]) * abs(lips)
        return offset


PROCESSOR = FaceEditor()
