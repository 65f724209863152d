"""Dense landmarks: MediaPipe's 468-point face mesh (LiteRT, offline) and FaceFusion's 68-point landmarkers (ONNX):
2dfan4, peppa_wutz, or ``many``, both with FaceFusion's pick between them.

All run on a square crop around the detector box, turned so that the eyes lie level, so tilted heads work too.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.align import Matrix, estimate_similarity, invert_affine, transform_points
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.runtime import run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options

if TYPE_CHECKING:
    from ai_edge_litert.interpreter import Interpreter

MESH_SIZE = 192
MESH_POINTS = 468
MESH_ROI_SCALE = 1.5  # MediaPipe's face ROI: 1.5 x the long side of the face box
MESH_MIN_SCORE = 0.5  # below this the mesh model says there is no face in its crop
# Face mesh indices (MediaPipe topology, image left to right as the Face's 5 points are ordered).
MESH_EYE_CORNERS = ((33, 133), (362, 263))
MESH_NOSE_TIP = 1
MESH_MOUTH_CORNERS = (61, 291)

FAN_SIZE = 256
FAN_FACE_SIZE = 195.0  # 2dfan4 sees the face box's long side at 195 of its 256 pixels
FAN_HEATMAP_SIZE = 64
FAN_MIN_SCORE = 0.5  # FaceFusion's default face_landmarker_score: below it the detector's 5 points are kept
PEPPA_SCORE_FULL = 0.95  # peppa_wutz's mean point score that FaceFusion maps to 1 (2dfan4's heatmap peak: 0.9)
MANY_LANDMARKERS = ("2dfan4", "peppa_wutz")
MANY_PEPPA_MARGIN = 0.2  # FaceFusion's many takes 2dfan4's points unless peppa_wutz scores this much higher


@functools.lru_cache(maxsize=4)
def tflite_interpreter(path: str) -> Interpreter:
    """A LiteRT interpreter with its tensors allocated, once per process (one thread: the mesh takes about 1 ms).
    LiteRT is imported here: a worker whose options need no face mesh runs without it installed."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=1)
    interpreter.allocate_tensors()
    return interpreter


def eye_angle(landmark_5: FloatArray) -> float:
    """Angle of the line from the image-left eye to the image-right eye, in radians (y down)."""
    dx, dy = (landmark_5[1] - landmark_5[0]).astype(np.float64)
    return math.atan2(dy, dx)


def crop_matrix(center: npt.ArrayLike, angle: float, side: float, crop_size: int) -> Matrix:
    """Affine from the frame to a square crop of ``side`` frame pixels around ``center``, turned by ``-angle``."""
    scale = crop_size / max(side, 1e-6)
    cos, sin = math.cos(angle) * scale, math.sin(angle) * scale
    cx, cy = np.asarray(center, np.float64)
    half = crop_size / 2.0
    return np.array(
        [[cos, sin, half - cos * cx - sin * cy], [-sin, cos, half + sin * cx - cos * cy]],
        np.float64,
    )


def landmark_5_from_mesh(mesh: FloatArray) -> FloatArray:
    """The five points (eye centres, nose tip, mouth corners) read off a 468-point mesh."""
    eyes = [(mesh[outer] + mesh[inner]) / 2 for outer, inner in MESH_EYE_CORNERS]
    mouth = [mesh[index] for index in MESH_MOUTH_CORNERS]
    return np.stack([*eyes, mesh[MESH_NOSE_TIP], *mouth]).astype(np.float32)


def landmark_5_from_68(landmark_68: FloatArray) -> FloatArray:
    """FaceFusion's 5/68: eye centres, nose tip and mouth corners of the 68-point layout."""
    return np.stack(
        [
            landmark_68[36:42].mean(axis=0),
            landmark_68[42:48].mean(axis=0),
            landmark_68[30],
            landmark_68[48],
            landmark_68[54],
        ]
    ).astype(np.float32)


def _run_face_mesh(frame: Frame, matrix: Matrix, store: ModelStore) -> tuple[FloatArray, float]:
    crop = cv2.warpAffine(
        frame, matrix, (MESH_SIZE, MESH_SIZE), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
    )
    interpreter = tflite_interpreter(store.resolve("face_mesh_468"))
    inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()
    interpreter.set_tensor(inputs[0]["index"], (crop.astype(np.float32) / 255.0)[np.newaxis])
    interpreter.invoke()
    raw_points = interpreter.get_tensor(outputs[0]["index"]).reshape(468, 3)[:, :2]
    raw_score = float(interpreter.get_tensor(outputs[1]["index"]).reshape(-1)[-1])
    points = transform_points(raw_points, invert_affine(matrix))
    return points, 1.0 / (1.0 + math.exp(-raw_score))


def landmark_face_mesh(frame: Frame, face: Face, store: ModelStore) -> Face:
    """The face with its 468 mesh points in frame pixels (``landmark_dense``) and the mesh score in extras.

    A first pass crops around the detector box; a second crops around the first pass's own points, as MediaPipe's
    tracking does, which centres the face the way the mesh model was trained.
    """
    x1, y1, x2, y2 = (float(v) for v in face.bbox)
    first = crop_matrix(
        ((x1 + x2) / 2, (y1 + y2) / 2), eye_angle(face.landmark_5), max(x2 - x1, y2 - y1) * MESH_ROI_SCALE, MESH_SIZE
    )
    points, score = _run_face_mesh(frame, first, store)
    if score >= MESH_MIN_SCORE:
        points, score = _run_face_mesh(frame, mesh_crop(points), store)
    return face.with_(landmark_dense=points, extras={**face.extras, "landmark_dense_score": score})


def follow_face_mesh(frame: Frame, face: Face, store: ModelStore) -> Face:
    """``face`` (with its mesh) one frame on: the mesh run once on the crop its own points give, as MediaPipe tracks
    a face between detections. Its box and five points move with the mesh (the similarity between the two meshes), so
    a followed face keeps the detector's geometry; the mesh score says whether the face is still there."""
    if face.landmark_dense is None or len(face.landmark_dense) != MESH_POINTS:
        raise ValueError("a face is followed by its 468-point face mesh")
    points, score = _run_face_mesh(frame, mesh_crop(face.landmark_dense), store)
    motion = estimate_similarity(face.landmark_dense, points)
    corners = transform_points(face.bbox.reshape(2, 2), motion)
    centre, half = corners.mean(axis=0), np.abs(face.bbox[2:] - face.bbox[:2]) * _scale(motion) / 2
    return face.with_(
        bbox=np.concatenate([centre - half, centre + half]).astype(np.float32),
        landmark_5=transform_points(face.landmark_5, motion),
        landmark_dense=points,
        extras={**face.extras, "landmark_dense_score": score},
    )


def mesh_crop(points: FloatArray) -> Matrix:
    """The face mesh's crop around its own points: turned so the eyes lie level, 1.5 x their extent (MediaPipe's)."""
    angle = eye_angle(landmark_5_from_mesh(points))
    level = _rotation(angle)  # turns the face so the eyes lie level
    turned = transform_points(points, level)
    low, high = turned.min(axis=0), turned.max(axis=0)
    center = transform_points(((low + high) / 2)[np.newaxis], invert_affine(level))[0]
    return crop_matrix(center, angle, float(max(high - low)) * MESH_ROI_SCALE, MESH_SIZE)


def _scale(matrix: Matrix) -> float:
    return float(np.hypot(matrix[0, 0], matrix[1, 0]))


def _rotation(angle: float) -> Matrix:
    """A rotation about the origin by ``-angle``: the turn of ``crop_matrix`` without its scale and shift."""
    cos, sin = math.cos(angle), math.sin(angle)
    return np.array([[cos, sin, 0.0], [-sin, cos, 0.0]], np.float64)


def landmark_68_models(options: Options) -> tuple[str, ...]:
    """The 68-point landmarkers ``face_landmarker_model`` runs (none for the face mesh; ``many``: both)."""
    if options.face_landmarker_model == "face_mesh_468":
        return ()
    return MANY_LANDMARKERS if options.face_landmarker_model == "many" else (options.face_landmarker_model,)


def _run_2dfan4(tensor: FloatArray, options: Options, store: ModelStore) -> tuple[FloatArray, float]:
    """2dfan4's 68 points in its crop's pixels, and its score: the mean heatmap peak, 0.9 and above as 1."""
    session = store.session_for("2dfan4", options)
    raw_points, heatmaps, *_ = run_session(session, {session.get_inputs()[0].name: tensor})
    points = np.asarray(raw_points[0, :, :2] * (FAN_SIZE / FAN_HEATMAP_SIZE), np.float32)
    return points, float(np.interp(np.mean(np.amax(heatmaps[0], axis=(1, 2))), [0.0, 0.9], [0.0, 1.0]))


def _run_peppa_wutz(tensor: FloatArray, options: Options, store: ModelStore) -> tuple[FloatArray, float]:
    """peppa_wutz's 68 (x, y, score) in 64 units of its crop: the points in crop pixels, the mean score mapped."""
    session = store.session_for("peppa_wutz", options)
    (prediction, *_) = run_session(session, {session.get_inputs()[0].name: tensor})
    rows = np.asarray(prediction, np.float32).reshape(-1, 3)
    points = rows[:, :2] * (FAN_SIZE / FAN_HEATMAP_SIZE)
    return points, float(np.interp(rows[:, 2].mean(), [0.0, PEPPA_SCORE_FULL], [0.0, 1.0]))


LANDMARKERS_68 = {"2dfan4": _run_2dfan4, "peppa_wutz": _run_peppa_wutz}


def landmark_68(frame: Frame, face: Face, options: Options, store: ModelStore) -> Face:
    """The face with the chosen 68-point landmarker's points (``many``: 2dfan4's unless peppa_wutz's score is 0.2
    higher, as FaceFusion picks); when their score is high enough, its 5 points are read off them (5/68).
    Both see the same crop: the box's long side at 195 of 256 pixels, BGR 0..1, dark faces' contrast raised."""
    x1, y1, x2, y2 = (float(v) for v in face.bbox)
    side = max(x2 - x1, y2 - y1) * FAN_SIZE / FAN_FACE_SIZE
    matrix = crop_matrix(((x1 + x2) / 2, (y1 + y2) / 2), eye_angle(face.landmark_5), side, FAN_SIZE)
    crop = cv2.warpAffine(frame, matrix, (FAN_SIZE, FAN_SIZE), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    crop = _optimize_contrast(np.asarray(crop, np.uint8))
    tensor = (crop[:, :, ::-1].astype(np.float32) / 255.0).transpose(2, 0, 1)[np.newaxis]
    found = {model: LANDMARKERS_68[model](tensor, options, store) for model in landmark_68_models(options)}
    if len(found) == 2 and found["2dfan4"][1] <= found["peppa_wutz"][1] - MANY_PEPPA_MARGIN:
        crop_points, score = found["peppa_wutz"]
    else:
        crop_points, score = next(iter(found.values()))
    points = transform_points(crop_points, invert_affine(matrix))
    landmark_5 = landmark_5_from_68(points) if score >= FAN_MIN_SCORE else face.landmark_5
    # The detector's own five are kept for the face debugger, which draws both sets.
    extras = {**face.extras, "landmark_dense_score": score, "landmark_5_detector": face.landmark_5}
    return face.with_(landmark_dense=points, landmark_5=landmark_5, extras=extras)


def _optimize_contrast(crop: Frame) -> Frame:
    """FaceFusion's trick for dark faces: equalise lightness (CLAHE) when the crop is very dark."""
    lab = cv2.cvtColor(crop, cv2.COLOR_RGB2LAB)
    if float(np.mean(lab[:, :, 0])) >= 30:
        return crop
    lab[:, :, 0] = cv2.createCLAHE(clipLimit=2).apply(lab[:, :, 0])
    return np.asarray(cv2.cvtColor(lab, cv2.COLOR_LAB2RGB), np.uint8)


def detect_landmarks(frame: Frame, face: Face, options: Options, store: ModelStore) -> Face:
    """Dense landmarks by ``options.face_landmarker_model``."""
    if landmark_68_models(options):
        return landmark_68(frame, face, options, store)
    return landmark_face_mesh(frame, face, store)


def mesh_landmarks(frame: Frame, face: Face, options: Options, store: ModelStore) -> Face:
    """The 468-point mesh a face processor reads; with a 68-point landmarker chosen, its 5/68 points steer the mesh
    crop first."""
    if landmark_68_models(options):
        face = landmark_68(frame, face, options, store)
    return landmark_face_mesh(frame, face, store)


def mesh_found(face: Face) -> bool:
    """Whether the mesh model saw a face in its crop (else its points are noise and the face is left alone)."""
    score = face.extras.get("landmark_dense_score")
    return isinstance(score, float) and score >= MESH_MIN_SCORE
