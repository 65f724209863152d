"""The source images of a run, read in prepare: each one's largest face, for the processors that take an identity."""

from __future__ import annotations

import os
from collections.abc import Sequence

import cv2
import numpy as np

from facefusion_provider.engine.detect import detect_faces
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.select import largest_face
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import InputMissingError, InvalidMediaError, NoFaceError
from facefusion_provider.options import Options

SourceFace = tuple[str, Frame, Face]  # the image's path, its pixels (RGB) and its largest face


def read_image(path: str) -> Frame:
    """An image file as RGB, turned upright by its EXIF orientation (phones store portraits sideways; a PyAV decode,
    as in media.images, would not turn them). InputMissingError or InvalidMediaError naming the file otherwise."""
    name = os.path.basename(path)
    try:
        with open(path, "rb") as handle:
            data = np.frombuffer(handle.read(), np.uint8)
    except FileNotFoundError:
        raise InputMissingError(f"source image {name} does not exist ({path})") from None
    except IsADirectoryError:
        raise InvalidMediaError(f"source {name} is a folder, not an image") from None
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise InvalidMediaError(f"source {name} is not an image that can be read (JPEG, PNG, WebP, BMP, TIFF, ...)")
    return np.ascontiguousarray(image[:, :, ::-1])


def source_faces(source_paths: Sequence[str], options: Options, store: ModelStore) -> list[SourceFace]:
    """The largest face of every source image; NoFaceError naming the first image without one."""
    found = []
    for path in source_paths:
        image = read_image(path)
        faces = detect_faces(image, options, store)
        if not faces:
            raise NoFaceError(
                f"no face found in source image {os.path.basename(path)} (detector {options.face_detector_model}, "
                f"score >= {options.face_detector_score}): use a clear, front-facing photo of the face"
            )
        found.append((path, image, largest_face(faces)))
    return found
