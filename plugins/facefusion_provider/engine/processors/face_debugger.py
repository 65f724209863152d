"""The face debugger: what the analysis found on each selected face, drawn over the frame as FaceFusion draws it
(``face_debugger_items``): the box (its top edge thicker), the detector's five points, the five read off the dense
landmarks (5/68), the dense landmarks (68, or the face mesh's 468 when the chain reads the mesh), the 68 placed from
the five by ``fan_68_5`` (68/5), and the outline of the paste-back mask (``face_mask_types``). Lines and dots scale
with the frame's height. Colours: red for the box and the detector's points, green for what the landmarker found,
cyan where it fell back on the five (or for 68/5), orange on a face the tracker filled in where detection missed it."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

from facefusion_provider.engine.align import estimate_matrix, invert_affine, transform_points, warp_face
from facefusion_provider.engine.crop_masks import create_area_mask, create_box_mask
from facefusion_provider.engine.face import Face, FloatArray, Frame, detector_5
from facefusion_provider.engine.face_masks import load_mask_models, mask_models, with_model_masks
from facefusion_provider.engine.landmarks import (
    FAN_MIN_SCORE,
    MESH_POINTS,
    landmark_5_from_mesh,
    landmark_68_models,
    mesh_found,
)
from facefusion_provider.engine.processors.base import FaceStats, FrameStep, ProcessedFrame, Processor, timed
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.runtime import each, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.engine.track import FILLED_KEY
from facefusion_provider.options import FaceDebuggerOptions, Options

Colour = tuple[int, int, int]  # RGB
RED: Colour = (255, 0, 0)
BOX_TOP: Colour = (255, 100, 100)
GREEN: Colour = (0, 255, 0)
CYAN: Colour = (0, 255, 255)
ORANGE: Colour = (255, 165, 0)  # every point set and the mask of a face the tracker filled in (FaceFusion's refill)
MASK_CROP = 512  # FaceFusion draws the mask from an arcface_128 crop of this size
MASK_THRESHOLD = 100  # of 255: the outline is drawn around the mask warped back above this
LANDMARK_68_5_MODEL = "fan_68_5"
DENSE_ITEMS = frozenset({"face-landmark-5/68", "face-landmark-68"})


class FaceDebugger(Processor):
    name = "face_debugger"
    options = FaceDebuggerOptions

    def model_names(self, options: Options) -> tuple[str, ...]:
        items = options.face_debugger_items
        return (
            *(mask_models(options) if "face-mask" in items else ()),
            *([LANDMARK_68_5_MODEL] if "face-landmark-68/5" in items else []),
        )

    def analysis(self, options: Options) -> AnalysisNeeds:
        """The dense landmarks where an item draws them (the chosen landmarker's), or the area mask needs them."""
        items = set(options.face_debugger_items)
        mask_area = "face-mask" in items and "area" in options.face_mask_types
        if not (items & DENSE_ITEMS or mask_area):
            return AnalysisNeeds(faces=True)
        return AnalysisNeeds(faces=True, landmarks="2dfan4" if landmark_68_models(options) else "mesh")

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """Nothing from the sources; the models its items need opened now, so a missing file fails in prepare."""
        for name in self.model_names(options):
            store.session_for(name, options)
        return {}

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        if "face-mask" in options.face_debugger_items:
            load_mask_models(store, options)
        fan_68_5 = None
        if "face-landmark-68/5" in options.face_debugger_items:
            fan_68_5 = store.session_for(LANDMARK_68_5_MODEL, options)
        return DebugFaces(options, store, fan_68_5, stats)


def line_scale(frame: Frame) -> int:
    """FaceFusion's line width and dot radius: one per 270 rows, 1 to 10."""
    return max(1, min(10, round(int(frame.shape[0]) / 270)))


def landmark_5_68(face: Face) -> FloatArray:
    """The five read off the dense landmarks: the mesh's when it found the face, else ``landmark_5`` (2dfan4's 5/68,
    or the detector's where 2dfan4 scored too low)."""
    dense = face.landmark_dense
    if dense is not None and len(dense) == MESH_POINTS and mesh_found(face):
        return landmark_5_from_mesh(dense)
    return face.landmark_5


def landmark_68_5(face: Face, session: ort.InferenceSession) -> FloatArray:
    """FaceFusion's 68/5: the five in ffhq_512's unit square, through fan_68_5, back to the frame."""
    matrix = estimate_matrix(detector_5(face), "ffhq_512", 1)
    unit = transform_points(detector_5(face), matrix).astype(np.float32)
    points = np.asarray(run_session(session, {"input": unit[None]})[0][0], np.float32)
    return transform_points(points, invert_affine(matrix))


def draw_points(frame: Frame, points: FloatArray, colour: Colour) -> None:
    for x, y in points.astype(np.int32):
        cv2.circle(frame, (int(x), int(y)), line_scale(frame), colour, -1)


def draw_box(frame: Frame, face: Face) -> None:
    x1, y1, x2, y2 = (int(v) for v in face.bbox.astype(np.int32))
    cv2.rectangle(frame, (x1, y1), (x2, y2), RED, line_scale(frame))
    cv2.line(frame, (x1, y1), (x2, y1), BOX_TOP, line_scale(frame) + 1)  # the face's top: detections are upright


@dataclass(frozen=True)
class DebugFaces:
    options: Options
    store: ModelStore
    fan_68_5: ort.InferenceSession | None
    stats: FaceStats

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        with timed(self.stats, "debug"):
            return list(each(pool, self.debug, list(zip(frames, faces, strict=True))))

    def debug(self, pair: tuple[Frame, list[Face]]) -> Frame:
        frame, faces = pair
        if not faces:
            return frame
        drawn = np.ascontiguousarray(frame.copy())
        for face in faces:
            self.draw(drawn, face)
        return drawn

    def draw(self, frame: Frame, face: Face) -> None:
        """The items in FaceFusion's order: box, mask, then the point sets, each over the one before."""
        items = self.options.face_debugger_items
        filled = face.extras.get(FILLED_KEY) is True
        fell_back = CYAN if np.array_equal(detector_5(face), landmark_5_68(face)) else GREEN
        score = face.extras.get("landmark_dense_score")
        dense = GREEN if not isinstance(score, float) or score >= FAN_MIN_SCORE else CYAN
        if "bounding-box" in items:
            draw_box(frame, face)
        if "face-mask" in items:
            self.draw_mask(frame, face, ORANGE if filled else fell_back)
        if "face-landmark-5" in items:
            draw_points(frame, detector_5(face), ORANGE if filled else RED)
        if "face-landmark-5/68" in items:
            draw_points(frame, landmark_5_68(face), ORANGE if filled else fell_back)
        if "face-landmark-68" in items and face.landmark_dense is not None:
            draw_points(frame, face.landmark_dense, ORANGE if filled else dense)
        if "face-landmark-68/5" in items and self.fan_68_5 is not None:
            draw_points(frame, landmark_68_5(face, self.fan_68_5), ORANGE if filled else CYAN)

    def draw_mask(self, frame: Frame, face: Face, colour: Colour) -> None:
        """The outline, in the frame, of the face's mask drawn in a 512 arcface_128 crop aligned by its 5/68: the box
        mask (unblurred, padded), the area mask, the occlusion and region masks, their minimum."""
        crop, matrix = warp_face(frame, landmark_5_68(face), "arcface_128", MASK_CROP)
        masks = []
        if "box" in self.options.face_mask_types:
            masks.append(create_box_mask(MASK_CROP, 0.0, self.options.face_mask_padding))
        if "area" in self.options.face_mask_types and face.landmark_dense is not None:
            masks.append(create_area_mask(MASK_CROP, transform_points(face.landmark_dense, matrix), self.options))
        base = np.minimum.reduce(masks) if masks else np.ones((MASK_CROP, MASK_CROP), np.float32)
        mask = with_model_masks(np.asarray(base, np.float32), crop, crop, self.store, self.options)
        levels = (np.clip(mask, 0.0, 1.0) * 255).astype(np.uint8)
        height, width = frame.shape[:2]
        back = cv2.warpAffine(levels, invert_affine(matrix), (width, height))
        outline = cv2.threshold(back, MASK_THRESHOLD, 255, cv2.THRESH_BINARY)[1]
        contours, _ = cv2.findContours(outline, cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(frame, contours, -1, colour, line_scale(frame))


PROCESSOR = FaceDebugger()
