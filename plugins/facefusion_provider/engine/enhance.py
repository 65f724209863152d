"""Face enhancement with FaceFusion's enhancers (gfpgan_1.2/1.3/1.4, gpen_bfr_256/512/1024/2048, codeformer,
restoreformer_plus_plus): the face aligned to the model's template and size, restored, and blended back through a box
mask."""

from __future__ import annotations

import numpy as np

from facefusion_provider.engine.align import warp_face
from facefusion_provider.engine.crop_masks import create_box_mask
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.models import enhance_facts
from facefusion_provider.engine.paste import paste_back
from facefusion_provider.engine.runtime import input_shapes, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options

ENHANCER_SIZE = 512
NO_PADDING = (0, 0, 0, 0)


def prepare_enhancer_input(crop: Frame) -> FloatArray:
    """(S, S, 3) RGB uint8 -> (1, 3, S, S) float32 in [-1, 1]."""
    return ((crop.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None]


def normalize_enhancer_output(output: FloatArray) -> FloatArray:
    """(1, 3, S, S) in [-1, 1] -> (S, S, 3) float32 in 0..255, rounded as FaceFusion does."""
    return np.asarray(np.rint((np.clip(output[0], -1.0, 1.0) + 1.0) / 2.0 * 255.0).transpose(1, 2, 0), np.float32)


def enhancer_feeds(crop: Frame, input_names: set[str], weight: float) -> dict[str, np.ndarray]:
    """``input`` from the crop, and ``face_enhancer_weight`` as the model's ``weight`` (CodeFormer's), float64 of shape
    (1,), when it has one."""
    feeds: dict[str, np.ndarray] = {"input": prepare_enhancer_input(crop)}
    if "weight" in input_names:
        feeds["weight"] = np.array([weight], np.float64)
    return feeds


def enhance_face(frame: Frame, face: Face, options: Options, store: ModelStore, *, in_place: bool = False) -> Frame:
    """``frame`` with ``face`` restored by the enhancer, blended in by ``face_enhancer_blend`` (0-100); a new array, or
    ``frame`` itself changed when ``in_place``."""
    facts = enhance_facts(options.face_enhancer_model)
    session = store.session_for(options.face_enhancer_model, options)
    crop, matrix = warp_face(frame, face.landmark_5, facts.template, facts.size)
    (output, *_) = run_session(session, enhancer_feeds(crop, set(input_shapes(session)), options.face_enhancer_weight))
    mask = create_box_mask(facts.size, options.face_mask_blur, NO_PADDING)
    blend = options.face_enhancer_blend / 100.0
    return paste_back(frame, normalize_enhancer_output(output), mask, matrix, blend, in_place=in_place)
