"""Our pre- and post-processing against InsightFace's own (the installed ``insightface`` package), on the same stand-in
models and the same frames: the inswapper's alignment, target tensor, source latent and output crop; the recogniser's
input and embedding; SCRFD's input tensor and decoded faces. Where the two references differ by design, the test states
the difference and checks it exactly (FaceFusion's conventions are the ones we follow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from insightface.app.common import Face as InsightFace
from insightface.model_zoo.arcface_onnx import ArcFaceONNX
from insightface.model_zoo.inswapper import INSwapper
from insightface.model_zoo.scrfd import SCRFD
from insightface.utils import face_align
from onnx import helper
from standins import recognizer_standin

from facefusion_provider.engine import detect
from facefusion_provider.engine.align import estimate_matrix, warp_face
from facefusion_provider.engine.detect import detect_faces
from facefusion_provider.engine.recognize import prepare_recognizer_input, raw_embedding
from facefusion_provider.engine.swap_models import load_emap, normalize_output, prepare_target, source_latent
from facefusion_provider.options import Options

from .builders import StoreFactory, face_at, inswapper_model, save_model, value_info

pytestmark = pytest.mark.filterwarnings("ignore:`estimate` is deprecated:FutureWarning")  # inside insightface

FACES = [((160.0, 120.0), 90.0, 0.0), ((150.0, 130.0), 70.0, 17.0), ((170.0, 110.0), 110.0, -25.0)]


class RecordingSession:
    """An onnxruntime session that keeps the inputs it was given (InsightFace's classes accept a ``session``)."""

    def __init__(self, path: Path) -> None:
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.feeds: list[dict[str, np.ndarray]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def run(self, output_names: Any, feeds: dict[str, np.ndarray], *args: Any) -> Any:
        self.feeds.append({name: np.array(value) for name, value in feeds.items()})
        return self.session.run(output_names, feeds, *args)


def assert_same_pixels(ours: np.ndarray, theirs: np.ndarray, level: float) -> None:
    """Equal tensors, but for a pixel here and there one level apart: the two matrices agree to 1e-6 but not in
    every bit, and OpenCV's fixed-point warp may then round a pixel the other way."""
    differences = np.abs(ours - theirs)
    assert differences.max() <= level + 1e-6 and (differences > 1e-6).mean() < 0.001


def _bgr(frame: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(frame[..., ::-1])


@pytest.mark.parametrize(
    ("template", "size", "insightface_size"), [("arcface_128", 128, 128), ("arcface_112", 112, 112)]
)
@pytest.mark.parametrize(("center", "face_size", "angle"), FACES)
def test_the_alignment_matrix_is_insightfaces(
    template: str, size: int, insightface_size: int, center: tuple[float, float], face_size: float, angle: float
) -> None:
    landmarks = face_at(center, face_size, angle).landmark_5 + np.random.default_rng(1).normal(0, 1.5, (5, 2))
    ours = estimate_matrix(landmarks, template, size)  # type: ignore[arg-type]
    np.testing.assert_allclose(ours, face_align.estimate_norm(landmarks, insightface_size), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("center", "face_size", "angle"), FACES)
def test_inswappers_tensors_and_output_crop_are_insightfaces(
    textured_frame: np.ndarray,
    models_dir: Path,
    center: tuple[float, float],
    face_size: float,
    angle: float,
) -> None:
    """InsightFace re-normalises the projected latent (``latent /= norm``); FaceFusion feeds ``normed_embedding @ emap``
    as it is. With a non-orthogonal emap the two differ in length only: same direction, checked to 1e-6."""
    rng = np.random.default_rng(5)
    emap = (np.eye(512) + rng.normal(0, 0.05, (512, 512))).astype(np.float32)
    path = inswapper_model(models_dir / "inswapper_128.onnx", kind="identity", emap=emap)
    embedding = rng.normal(size=512).astype(np.float32) * 7.0  # a raw recogniser output: not unit length
    face = face_at(center, face_size, angle)
    session = RecordingSession(path)
    swapper = INSwapper(model_file=str(path), session=session)
    their_crop_bgr, their_matrix = swapper.get(
        _bgr(textured_frame), InsightFace(kps=face.landmark_5), InsightFace(embedding=embedding), paste_back=False
    )
    (feeds,) = session.feeds

    crop, matrix = warp_face(textured_frame, face.landmark_5, "arcface_128", 128)
    np.testing.assert_allclose(matrix, their_matrix, rtol=1e-6, atol=1e-6)
    assert_same_pixels(prepare_target(crop[None]), feeds["target"], level=1 / 255)
    latent = source_latent(embedding, load_emap(str(path)))
    np.testing.assert_allclose(latent / np.linalg.norm(latent), feeds["source"], atol=1e-6)
    assert abs(float(np.linalg.norm(latent)) - 1.0) > 0.01, "the emap changes the length: the test would not see it"
    # Our output crop (float, RGB) is theirs before their uint8 truncation (BGR).
    output = normalize_output(prepare_target(crop[None]))[0]
    assert np.abs(np.floor(output) - their_crop_bgr[..., ::-1].astype(np.float32)).max() <= 1.0


@pytest.mark.parametrize(("center", "face_size", "angle"), FACES)
def test_the_recognisers_input_and_embedding_are_insightfaces(
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    center: tuple[float, float],
    face_size: float,
    angle: float,
) -> None:
    path = recognizer_standin(models_dir)
    face = face_at(center, face_size, angle)
    session = RecordingSession(path)
    theirs = ArcFaceONNX(model_file=str(path), session=session).get(
        _bgr(textured_frame), InsightFace(kps=face.landmark_5)
    )
    (feeds,) = session.feeds
    assert_same_pixels(prepare_recognizer_input(textured_frame, face), feeds["input"], level=1 / 127.5)
    ours = raw_embedding(textured_frame, face, store_for(models_dir), Options())
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def _scrfd_standin(path: Path, outputs: list[np.ndarray]) -> Path:
    """scrfd_2.5g's input and nine outputs (scores, boxes, points for strides 8, 16, 32); the outputs are fixed."""
    names = [f"{kind}_{stride}" for kind in ("score", "bbox", "kps") for stride in (8, 16, 32)]
    nodes = [
        helper.make_node("ReduceSum", ["input"], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero"], ["nothing"]),
    ]
    nodes += [helper.make_node("Add", [f"{name}_value", "nothing"], [name]) for name in names]
    return save_model(
        path,
        nodes,
        [value_info("input", [1, 3, "height", "width"])],
        [value_info(name, list(output.shape)) for name, output in zip(names, outputs, strict=True)],
        [np.array(0.0, np.float32), *outputs],
        ["zero", *[f"{name}_value" for name in names]],
    )


def _planted_outputs() -> list[np.ndarray]:
    """Two overlapping faces at stride 16 (the weaker one suppressed), one at stride 32, one below the threshold."""
    counts = [(640 // stride) ** 2 * 2 for stride in (8, 16, 32)]
    outputs = [np.zeros((count, width), np.float32) for width in (1, 4, 10) for count in counts]
    offsets = np.array([[-1, -1], [1, -1], [0, 0], [-1, 1], [1, 1]], np.float32).reshape(-1)
    for stride_index, cell, score, box in [
        (1, (10 * 40 + 15) * 2 + 1, 0.8, [2, 3, 4, 5]),
        (1, (10 * 40 + 16) * 2, 0.7, [3, 3, 3, 5]),
        (2, (3 * 20 + 7) * 2, 0.6, [1, 1.5, 1, 1]),
        (0, 17, 0.2, [1, 1, 1, 1]),
    ]:
        outputs[stride_index][cell] = score
        outputs[3 + stride_index][cell] = box
        outputs[6 + stride_index][cell] = offsets * (1 + stride_index)
    return outputs


def test_scrfds_input_and_decoded_faces_are_insightfaces(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both shrink the 1280x960 frame by half (bilinear) onto a 640x640 canvas, top left, as (pixel - 127.5) / 128,
    and decode the same faces. One difference, by design: FaceFusion feeds the detector BGR, InsightFace RGB (its blob
    swaps the channels of a BGR image); we follow FaceFusion."""
    frame = np.ascontiguousarray(cv2.resize(textured_frame, (1280, 960), interpolation=cv2.INTER_CUBIC))
    path = _scrfd_standin(models_dir / "scrfd_2.5g.onnx", _planted_outputs())
    scrfd = SCRFD(model_file=str(path))
    blobs: list[np.ndarray] = []
    prepare_blob = scrfd._prepare_input_blob
    monkeypatch.setattr(scrfd, "_prepare_input_blob", lambda *args: blobs.append(prepare_blob(*args)) or blobs[-1])
    boxes, points = scrfd.detect(_bgr(frame), input_size=(640, 640), det_thresh=0.5)

    tensors: list[np.ndarray] = []
    tensor = detect._facefusion_tensor
    monkeypatch.setattr(detect, "_facefusion_tensor", lambda *args: tensors.append(tensor(*args)) or tensors[-1])
    options = Options.model_validate({"face_detector_model": "scrfd_2.5g", "face_detector_score": 0.5})
    faces = detect_faces(frame, options, store_for(models_dir))

    (ours,), (theirs_rgb,) = tensors, blobs
    theirs = theirs_rgb[:, ::-1]
    np.testing.assert_array_equal(ours, theirs)
    assert len(faces) == len(boxes) == 2, "the weaker of the overlapping faces is suppressed, the faint one dropped"
    np.testing.assert_allclose([face.bbox for face in faces], boxes[:, :4], rtol=1e-5)
    np.testing.assert_allclose([face.score for face in faces], boxes[:, 4], rtol=1e-6)
    np.testing.assert_allclose([face.landmark_5 for face in faces], points, rtol=1e-5)
