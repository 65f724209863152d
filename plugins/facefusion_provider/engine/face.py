"""The face record every engine stage reads and extends."""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
Frame = npt.NDArray[np.uint8]  # H x W x 3, RGB, uint8


@dataclass(frozen=True)
class FaceClasses:
    """What the face classifier (fairface) takes a face for: FaceFusion's gender, race and age class."""

    gender: str  # female or male
    race: str  # white, black, latino, asian, indian or arabic
    age: range  # the age class, its end excluded as FaceFusion's (20-29 is range(20, 29))


@dataclass(frozen=True)
class Face:
    """One detected face in frame pixel coordinates."""

    bbox: FloatArray  # (4,) x1, y1, x2, y2
    score: float
    landmark_5: (
        FloatArray  # (5, 2): right eye, left eye, nose tip, right mouth corner, left mouth corner (image left to right)
    )
    landmark_dense: FloatArray | None = None  # (468, 2) face mesh or (68, 2) 2dfan4, when a landmarker ran
    embedding: FloatArray | None = None  # (512,) identity embedding, L2-normalised, when a recognizer ran
    extras: dict[str, object] = field(default_factory=dict)
    classes: FaceClasses | None = None  # when the face classifier ran (a gender, race or age filter; fran)

    @property
    def area(self) -> float:
        x1, y1, x2, y2 = (float(v) for v in self.bbox)
        return max(0.0, x2 - x1) * max(0.0, y2 - y1)

    def with_(self, **changes: object) -> Face:
        return replace(self, **changes)  # type: ignore[arg-type]


def pack_faces(frames: list[list[Face]]) -> bytes:
    """The faces of consecutive frames as one ``.npz`` (no pickles, every array in its own dtype): exactly what
    ``unpack_faces`` gives back, so a swap from stored faces equals one from freshly detected ones, bit for bit."""
    faces = [face for frame in frames for face in frame]
    dense = [face.landmark_dense for face in faces if face.landmark_dense is not None]
    embeddings = [face.embedding for face in faces if face.embedding is not None]
    arrays: dict[str, Any] = {
        "counts": np.array([len(frame) for frame in frames], np.int32),
        "score": np.array([face.score for face in faces], np.float64),
        "dense_score": np.array([_dense_score(face) for face in faces], np.float64),
        "has_dense": np.array([face.landmark_dense is not None for face in faces], bool),
        "has_embedding": np.array([face.embedding is not None for face in faces], bool),
    }
    if faces:
        arrays["bbox"] = np.stack([face.bbox for face in faces])
        arrays["landmark_5"] = np.stack([face.landmark_5 for face in faces])
    if faces:
        # The detector's own five where 2dfan4 replaced them (the face debugger draws both): else the same five.
        arrays["detector_5"] = np.stack([detector_5(face) for face in faces])
    if dense:
        arrays["dense"] = np.stack(dense)
    if embeddings:
        arrays["embedding"] = np.stack(embeddings)
    arrays.update(_packed_classes(faces))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def unpack_faces(data: bytes) -> list[list[Face]]:
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        loaded = {name: arrays[name] for name in arrays.files}
    dense = iter(loaded.get("dense", ()))
    embeddings = iter(loaded.get("embedding", ()))
    faces = [
        Face(
            bbox=loaded["bbox"][i],
            score=float(loaded["score"][i]),
            landmark_5=loaded["landmark_5"][i],
            landmark_dense=next(dense) if loaded["has_dense"][i] else None,
            embedding=next(embeddings) if loaded["has_embedding"][i] else None,
            extras=_extras(loaded, i),
            classes=_unpacked_classes(loaded, i),
        )
        for i in range(len(loaded["score"]))
    ]
    bounds = np.concatenate([[0], np.cumsum(loaded["counts"])]).tolist()
    return [faces[start:end] for start, end in itertools.pairwise(bounds)]


def _packed_classes(faces: list[Face]) -> dict[str, Any]:
    """The classes as plain arrays (no pickles): gender and race as text ("" none), the age class's start and stop."""
    classes = [face.classes for face in faces]
    if all(found is None for found in classes):
        return {}
    return {
        "gender": np.array([found.gender if found else "" for found in classes], np.str_),
        "race": np.array([found.race if found else "" for found in classes], np.str_),
        "age": np.array([(found.age.start, found.age.stop) if found else (0, 0) for found in classes], np.int16),
    }


def _unpacked_classes(loaded: dict[str, Any], i: int) -> FaceClasses | None:
    if "gender" not in loaded or not loaded["gender"][i]:
        return None
    start, stop = (int(value) for value in loaded["age"][i])
    return FaceClasses(str(loaded["gender"][i]), str(loaded["race"][i]), range(start, stop))


def _extras(loaded: dict[str, Any], i: int) -> dict[str, object]:
    extras: dict[str, object] = {}
    if not np.isnan(loaded["dense_score"][i]):
        extras["landmark_dense_score"] = float(loaded["dense_score"][i])
    detector = loaded.get("detector_5")
    if detector is not None and not np.array_equal(detector[i], loaded["landmark_5"][i]):
        extras["landmark_5_detector"] = detector[i]
    return extras


def detector_5(face: Face) -> FloatArray:
    """The detector's own five points (2dfan4 replaces ``landmark_5`` with its 5/68 when it scores well)."""
    kept = face.extras.get("landmark_5_detector")
    return kept if isinstance(kept, np.ndarray) else face.landmark_5


def _dense_score(face: Face) -> float:
    score = face.extras.get("landmark_dense_score")
    return float(score) if isinstance(score, (int, float)) else float("nan")
