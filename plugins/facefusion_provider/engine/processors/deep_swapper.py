"""The deep swapper: each selected face replaced by the one person a DeepFaceLab / DeepFaceLive model (``.dfm``) was
trained on, as FaceFusion 3.8.1 does: one of FaceFusion's 157 named models or the user's own (``custom/<name>``).

The face is cut out on dfl_whole_face at the size the model's ``in_face:0`` says, sharpened, and given as BGR 0..1
NHWC, with ``deep_swapper_morph`` / 100 as ``morph_value:0`` where the model has one. The model answers the face's
mask, its person's face and that face's mask; the face is colour-matched to the crop by how alike the two are, and
pasted back through the minimum of the box mask, the two model masks (eroded and softened) and the chosen occlusion,
area and region masks.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

from facefusion_provider.engine import runtime
from facefusion_provider.engine.align import WarpTemplate, transform_points, warp_face
from facefusion_provider.engine.crop_masks import create_area_mask, create_box_mask
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_masks import load_mask_models, occlusion_mask, region_mask
from facefusion_provider.engine.frame_color import conditional_match_frame_color
from facefusion_provider.engine.landmarks import mesh_found
from facefusion_provider.engine.models import DFM_FACE_INPUT, DFM_MORPH_INPUT, model_spec
from facefusion_provider.engine.paste import paste_back
from facefusion_provider.engine.processors.base import (
    FaceStats,
    FrameStep,
    ProcessedFrame,
    Processor,
    change_faces_in_place,
    timed,
)
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.runtime import input_shapes, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import ModelIncompatibleError
from facefusion_provider.options import DeepSwapperOptions, Options

TEMPLATE: WarpTemplate = "dfl_whole_face"
SHARPEN_AMOUNT, SHARPEN_SIGMA = 0.75, 2.0  # the crop x 1.75 - its blur x 0.75 before the model sees it
MODEL_MASK_SIGMA = 6.25  # the models' masks, eroded twice by a 3x3 ellipse, then blurred by this
MODEL_MASK_EROSIONS = 2
DFM_OUTPUTS = 3  # the face's mask, the model's person's face, that face's mask
EXPECTED_INPUTS = f"{DFM_FACE_INPUT} 1xSxSx3 (S the model's size) and, for models that morph, {DFM_MORPH_INPUT} 1"
MESH_MODEL = "face_mesh_468"


class DeepSwapper(Processor):
    name = "deep_swapper"
    options = DeepSwapperOptions
    model_option = "deep_swapper_model"

    def model_names(self, options: Options) -> tuple[str, ...]:
        masks = {"occlusion": options.face_occluder_model, "region": options.face_parser_model}
        return (
            options.deep_swapper_model,
            *(model for kind, model in masks.items() if kind in options.face_mask_types),
            *([MESH_MODEL] if self.analysis(options).landmarks == "mesh" else []),
        )

    def analysis(self, options: Options) -> AnalysisNeeds:
        """Aligned by the five points (2dfan4's when it is the landmarker); the area mask draws on the dense points."""
        if options.face_landmarker_model == "2dfan4":
            return AnalysisNeeds(faces=True, landmarks="2dfan4")
        return AnalysisNeeds(faces=True, landmarks="mesh" if "area" in options.face_mask_types else "none")

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """Nothing from the sources (the model is the person); the model checked now, so a missing file or one of
        another kind fails in prepare."""
        checked_session(options, store)
        return {}

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        session, size = checked_session(options, store)
        load_mask_models(store, options)
        mesh_masks = self.analysis(options).landmarks == "mesh"
        return SwapDeep(session, size, DFM_MORPH_INPUT in input_shapes(session), options, store, stats, mesh_masks)


def checked_session(options: Options, store: ModelStore) -> tuple[ort.InferenceSession, int]:
    """The chosen model's session and crop size; ModelIncompatibleError, one line naming the file and the inputs
    expected, for a file whose inputs or outputs are not a DeepFaceLab model's."""
    name = options.deep_swapper_model
    path = store.resolve(name)
    session = runtime.create_session(path, options.execution_providers, options.execution_thread_count)
    found = input_shapes(session)
    face = found.get(DFM_FACE_INPUT, [])
    size = face[1] if len(face) == 4 and isinstance(face[1], int) else None
    fits = (
        size is not None
        and size > 0
        and face[2] == size
        and face[3] == 3
        and set(found) <= {DFM_FACE_INPUT, DFM_MORPH_INPUT}
        and len(found.get(DFM_MORPH_INPUT, [1])) == 1
        and len(session.get_outputs()) == DFM_OUTPUTS
    )
    if not fits or size is None:
        shown = ", ".join(f"{key} {'x'.join(str(dim) for dim in shape)}" for key, shape in found.items())
        raise ModelIncompatibleError(
            f"{model_spec(name).file_name} ({path}) is not a DeepFaceLab model as deep_swapper_model {name} needs: "
            f"expected inputs {EXPECTED_INPUTS}, and {DFM_OUTPUTS} outputs; found inputs {shown or 'none'} and "
            f"{len(session.get_outputs())} outputs"
        )
    return session, size


def model_input(crop: Frame) -> FloatArray:
    """The crop (RGB) sharpened, as BGR 0..1, (1, S, S, 3) float32."""
    bgr = np.ascontiguousarray(crop[:, :, ::-1])
    blurred = cv2.GaussianBlur(bgr, (0, 0), SHARPEN_SIGMA)
    sharpened = cv2.addWeighted(bgr, 1.0 + SHARPEN_AMOUNT, blurred, -SHARPEN_AMOUNT, 0.0)
    return np.ascontiguousarray(sharpened[None].astype(np.float32) / 255.0, np.float32)


def model_face(output: FloatArray) -> Frame:
    """The model's (S, S, 3) BGR 0..1 face as RGB uint8."""
    return np.ascontiguousarray(np.clip(output * 255.0, 0, 255).astype(np.uint8)[:, :, ::-1])


def model_mask(face_mask: FloatArray, celeb_mask: FloatArray, size: int) -> FloatArray:
    """Where both of the model's masks say face, eroded and softened."""
    mask = np.clip(np.minimum(face_mask, celeb_mask).reshape(size, size), 0.0, 1.0).astype(np.float32)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (3, 3))
    eroded = cv2.erode(mask, kernel, iterations=MODEL_MASK_EROSIONS)
    return np.asarray(cv2.GaussianBlur(eroded, (0, 0), MODEL_MASK_SIGMA), np.float32)


@dataclass(frozen=True)
class SwapDeep:
    session: ort.InferenceSession
    size: int
    morphs: bool  # the model has a morph_value:0 input
    options: Options
    store: ModelStore
    stats: FaceStats
    mesh_masks: bool  # the area mask from the face mesh: a face the mesh model misses is left alone

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        if self.mesh_masks:
            faces = [[face for face in frame_faces if mesh_found(face)] for frame_faces in faces]
        with timed(self.stats, "deep_swap"):
            return change_faces_in_place(frames, faces, pool, self.swap_face, self.stats)

    def swap_face(self, frame: Frame, face: Face) -> None:
        options, size = self.options, self.size
        crop, matrix = warp_face(frame, face.landmark_5, TEMPLATE, size)
        masks = [create_box_mask(size, options.face_mask_blur, options.face_mask_padding)]
        if "occlusion" in options.face_mask_types:
            masks.append(occlusion_mask(crop, self.store, options))
        feeds = {DFM_FACE_INPUT: model_input(crop)}
        if self.morphs:
            feeds[DFM_MORPH_INPUT] = np.array([options.deep_swapper_morph / 100.0], np.float32)
        face_mask, celeb_face, celeb_mask = run_session(self.session, feeds)
        swapped = conditional_match_frame_color(crop, model_face(celeb_face[0]))
        masks.append(model_mask(face_mask[0], celeb_mask[0], size))
        if "area" in options.face_mask_types and face.landmark_dense is not None:
            masks.append(create_area_mask(size, transform_points(face.landmark_dense, matrix), options))
        if "region" in options.face_mask_types:
            masks.append(region_mask(swapped, self.store, options))
        paste_back(frame, swapped, np.asarray(np.minimum.reduce(masks), np.float32), matrix, in_place=True)


PROCESSOR = DeepSwapper()
