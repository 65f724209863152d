"""Face selection: which detected faces a frame processor works on (FaceFusion's one / many / reference modes, in
``face_selector_order``, through the gender, race and age filters)."""

from __future__ import annotations

import numpy.typing as npt

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.face_filter import FaceSelection, sort_and_filter
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


def classifies_targets(options: Options) -> bool:
    """Whether the target's faces are classified: a filter is set and chooses among them (in reference mode, as in
    FaceFusion, it chooses among the reference frame's faces instead, and every face close to that one is taken)."""
    return FaceSelection.of(options).filters and options.face_selector_mode != "reference"


def reference_face(faces: list[Face], options: Options) -> Face | None:
    """The reference frame's face at ``reference_face_position`` in ``face_selector_order``, after the filters (past
    the last: the last); None when none is left."""
    chosen = sort_and_filter(faces, FaceSelection.of(options))
    return chosen[min(options.reference_face_position, len(chosen) - 1)] if chosen else None


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
    """The faces to process: the first in ``face_selector_order`` that the filters keep (one), all they keep in that
    order (many), or those close to the reference identity (reference)."""
    if not faces:
        return []
    if options.face_selector_mode == "one":
        return sort_and_filter(faces, FaceSelection.of(options))[:1]
    if options.face_selector_mode == "many":
        return sort_and_filter(faces, FaceSelection.of(options))
    if reference_embedding is None:
        raise ValueError("face_selector_mode=reference needs the reference face's embedding")
    return [
        face
        for face in with_embeddings(frame, faces, options, store)
        if face.embedding is not None
        and face_distance(face.embedding, reference_embedding) <= options.reference_face_distance
    ]
