"""Face identity with FaceFusion's arcface_w600k_r50: a 512-d embedding per face, compared by cosine distance."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.align import warp_face
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.runtime import run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options

RECOGNIZER_MODEL = "arcface_w600k_r50"
RECOGNIZER_SIZE = 112


def normalize_embedding(embedding: npt.ArrayLike) -> FloatArray:
    vector = np.asarray(embedding, np.float32).reshape(-1)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def prepare_recognizer_input(frame: Frame, face: Face) -> FloatArray:
    """The face aligned to the 112 ArcFace template as 1x3x112x112 RGB in [-1, 1]."""
    crop, _ = warp_face(frame, face.landmark_5, "arcface_112", RECOGNIZER_SIZE)
    return (crop.astype(np.float32) / 127.5 - 1.0).transpose(2, 0, 1)[None]


def embed_face(frame: Frame, face: Face, store: ModelStore, options: Options) -> FloatArray:
    """The face's (512,) L2-normalised ArcFace embedding."""
    return normalize_embedding(raw_embedding(frame, face, store, options))


def raw_embedding(frame: Frame, face: Face, store: ModelStore, options: Options) -> FloatArray:
    """The recogniser's (512,) output as it is: crossface converters take it unnormalised."""
    session = store.session_for(RECOGNIZER_MODEL, options)
    input_name = session.get_inputs()[0].name
    (embedding, *_) = run_session(session, {input_name: prepare_recognizer_input(frame, face)})
    return np.asarray(embedding, np.float32).reshape(-1)


def face_distance(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """FaceFusion's identity distance: 1 - cosine similarity (0 the same face, about 1 strangers, at most 2)."""
    return float(1.0 - np.dot(normalize_embedding(a), normalize_embedding(b)))
