"""FaceFusion's face classifier (fairface): each face's gender, race and age class, for the face selector's filters
and the age modifier's fran (told each face's age).

The face is aligned to FaceFusion's arcface_112_v2 template (``arcface_112`` here) at 224 x 224, RGB / 255
normalised by ImageNet's mean and standard deviation, NCHW. The model answers class ids, by position: race, gender,
age. Gender 1 is female, else male; race 1 black, 2 latino, 3 and 4 asian, 5 indian, 6 arabic, else white; age
classes 0-8 are FaceFusion's ranges below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from facefusion_provider.engine.align import warp_face
from facefusion_provider.engine.face import Face, FaceClasses, FloatArray, Frame
from facefusion_provider.engine.models import IMAGENET_MEAN, IMAGENET_STD, model_spec
from facefusion_provider.engine.runtime import run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import ModelIncompatibleError, ModelMissingError
from facefusion_provider.options import Options

CLASSIFIER_MODEL = "fairface"
CLASSIFIER_SIZE = 224
# FaceFusion's age classes by id (its ranges: the end is excluded, so 20-29 holds 20 to 28).
AGE_CLASSES: tuple[range, ...] = (
    range(0, 2),
    range(3, 9),
    range(10, 19),
    range(20, 29),
    range(30, 39),
    range(40, 49),
    range(50, 59),
    range(60, 69),
    range(70, 100),
)
RACES_BY_ID: dict[int, str] = {1: "black", 2: "latino", 3: "asian", 4: "asian", 5: "indian", 6: "arabic"}
FEMALE_ID = 1


FILTERS_NEED = "face_selector_gender, face_selector_race and face_selector_age_start/end need"


def require_classifier(
    store: ModelStore, options: Options, needed_by: str = FILTERS_NEED, remedy: str = "leave those options empty"
) -> None:
    """What ``needed_by`` names classifies faces (the filters; fran, told each face's age): without the classifier
    model it cannot run, so say so, with ``remedy``, before any work."""
    try:
        session = store.session_for(CLASSIFIER_MODEL, options)
    except ModelMissingError as error:
        raise ModelMissingError(
            f"{needed_by} {CLASSIFIER_MODEL}.onnx (FaceFusion's face classifier) in the model directory "
            f"(--models-dir); provide it or {remedy}. {error}"
        ) from None
    outputs = session.get_outputs()
    if len(outputs) != 3:
        _incompatible_outputs([output.shape for output in outputs])


def prepare_classifier_input(frame: Frame, face: Face) -> FloatArray:
    """The face aligned to arcface_112_v2 at 224 as 1x3x224x224 RGB, (x / 255 - mean) / std."""
    crop, _ = warp_face(frame, face.landmark_5, "arcface_112", CLASSIFIER_SIZE)
    mean, std = np.asarray(IMAGENET_MEAN, np.float32), np.asarray(IMAGENET_STD, np.float32)
    normalised = (crop.astype(np.float32) / 255.0 - mean) / std
    return np.ascontiguousarray(normalised.transpose(2, 0, 1)[None], np.float32)


def face_classes(race_id: int, gender_id: int, age_id: int) -> FaceClasses:
    """FaceFusion's reading of the model's ids."""
    gender = "female" if gender_id == FEMALE_ID else "male"
    return FaceClasses(gender, RACES_BY_ID.get(race_id, "white"), AGE_CLASSES[age_id if 0 <= age_id < 8 else 8])


def classify_face(frame: Frame, face: Face, store: ModelStore, options: Options) -> FaceClasses:
    session = store.session_for(CLASSIFIER_MODEL, options)
    outputs = run_session(session, {"input": prepare_classifier_input(frame, face)})
    if len(outputs) != 3 or any(np.size(output) != 1 for output in outputs):
        _incompatible_outputs([np.shape(output) for output in outputs])
    race_id, gender_id, age_id = (int(np.asarray(output).reshape(-1)[0]) for output in outputs)
    return face_classes(race_id, gender_id, age_id)


def with_classes(frame: Frame, faces: Sequence[Face], store: ModelStore, options: Options) -> list[Face]:
    """``faces`` with their classes (those already classified kept as they are)."""
    return [
        face if face.classes is not None else face.with_(classes=classify_face(frame, face, store, options))
        for face in faces
    ]


def _incompatible_outputs(shapes: Sequence[Sequence[Any]]) -> NoReturn:
    spec = model_spec(CLASSIFIER_MODEL)
    expected = ", ".join(name for name, _ in spec.outputs)
    found = ", ".join("x".join(str(dim) for dim in shape) for shape in shapes)
    raise ModelIncompatibleError(
        f"{spec.file_name} does not answer as FaceFusion's {CLASSIFIER_MODEL}: expected three outputs of one id "
        f"each ({expected}), found {len(shapes)} of shapes {found or 'none'}. Use FaceFusion's {spec.file_name}."
    )
