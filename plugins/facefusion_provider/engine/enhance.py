"""Face enhancement with FaceFusion's gfpgan_1.4: the face restored at 512x512 and blended back."""

from __future__ import annotations

import numpy as np

from facefusion_provider.engine.align import warp_face
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.paste import create_box_mask, paste_back
from facefusion_provider.engine.runtime import run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options

ENHANCER_SIZE = 512
NO_PADDING = (0, 0, 0, 0)


def prepare_enhancer_input(crop: Frame) -> FloatArray:
    """(512, 512, 3) RGB uint8 -> (1, 3, 512, 512) float32 in [-1, 1]."""
    return ((crop.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None]


def normalize_enhancer_output(output: FloatArray) -> FloatArray:
    """(1, 3, 512, 512) in [-1, 1] -> (512, 512, 3) float32 in 0..255, rounded as FaceFusion does."""
    return np.asarray(np.rint((np.clip(output[0], -1.0, 1.0) + 1.0) / 2.0 * 255.0).transpose(1, 2, 0), np.float32)


def enhance_face(frame: Frame, face: Face, options: Options, store: ModelStore) -> Frame:
    """``frame`` with ``face`` restored by the enhancer, blended in by ``face_enhancer_blend`` (0-100)."""
    session = store.session_for(options.face_enhancer_model, options)
    crop, matrix = warp_face(frame, face.landmark_5, "ffhq_512", ENHANCER_SIZE)
    input_name = session.get_inputs()[0].name
    (output, *_) = run_session(session, {input_name: prepare_enhancer_input(crop)})
    mask = create_box_mask(ENHANCER_SIZE, options.face_mask_blur, NO_PADDING)
    return paste_back(frame, normalize_enhancer_output(output), mask, matrix, options.face_enhancer_blend / 100.0)
