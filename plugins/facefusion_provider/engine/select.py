"""Face selection: which detected faces a frame processor works on (FaceFusion's one / many / reference modes)."""

from __future__ import annotations

import numpy.typing as npt

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.recognize import RECOGNIZER_MODEL, embed_face, face_distance
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import ModelMissingError
from facefusion_provider.options import Options


def largest_face(faces: list[Face]) -> Face:
    return max(faces, key=lambda face: face.area)


def require_recognizer(options: Options, store: ModelStore) -> None:
    """Reference mode compares identities: without the recognizer model it cannot run, so say so before any work."""
    if options.face_selector_mode != "reference":
        return
    try:
        store.session_for(RECOGNIZER_MODEL, options)
    except ModelMissingError as error:
        raise ModelMissingError(
            f"face_selector_mode=reference needs {RECOGNIZER_MODEL}.onnx in the model directory (--models-dir) to "
            f"compare faces with the reference face; provide it or use face_selector_mode one or many. {error}"
        ) from None


def with_embeddings(frame: Frame, faces: list[Face], options: Options, store: ModelStore) -> list[Face]:
    return [
        face if face.embedding is not None else face.with_(embedding=embed_face(frame, face, store, options))
        for face in faces
    ]


def select_faces(
    frame: Frame,
    faces: list[Face],
    options: Options,
    store: ModelStore,
    reference_embedding: npt.ArrayLike | None = None,
) -> list[Face]:
    """The faces to process: the largest (one), all (many), or those close to the reference identity (reference)."""
    if not faces:
        return []
    if options.face_selector_mode == "one":
        return [largest_face(faces)]
    if options.face_selector_mode == "many":
        return list(faces)
    if reference_embedding is None:
        raise ValueError("face_selector_mode=reference needs the reference face's embedding")
    return [
        face
        for face in with_embeddings(frame, faces, options, store)
        if face.embedding is not None
        and face_distance(face.embedding, reference_embedding) <= options.reference_face_distance
    ]
