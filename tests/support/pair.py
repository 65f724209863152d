"""Two people in one clip, for the face selector's tests: the astronaut (in colour) at the left, lower and smaller,
and a Labeled Faces in the Wild person (grey) at the right, higher and larger; both drift a pixel a frame."""

from __future__ import annotations

import functools
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np
from people import people as _people
from synth import VideoSpec, write_video

from facefusion_provider.engine.face import Face, Frame

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT = "astronaut", "lfw40"  # the people at the left and at the right
people = functools.cache(_people)


def pair_frame(shift: int = 0) -> Frame:
    """The two people, the left one moved ``shift`` pixels right and the right one ``shift`` pixels left."""
    faces = people()
    frame = np.full((HEIGHT, WIDTH, 3), 120, np.uint8)
    frame[70:390, 10 + shift : 330 + shift] = cv2.resize(faces[LEFT], (320, 320), interpolation=cv2.INTER_AREA)
    frame[10:230, 400 - shift : 620 - shift] = cv2.resize(faces[RIGHT], (220, 220), interpolation=cv2.INTER_AREA)
    return frame


def pair_clip(path: Path, frames: int) -> Path:
    """``frames`` frames of ``pair_frame`` (shift 0, 1, 2, ...) as an H.264 file at ``path``."""
    spec = VideoSpec(width=WIDTH, height=HEIGHT, frame_rate=Fraction(25))
    write_video(str(path), spec, (pair_frame(number) for number in range(frames)))
    return path


def who(face: Face) -> str:
    """Which of the two people ``face`` is, by where it is."""
    return LEFT if float(face.bbox[0] + face.bbox[2]) / 2 < WIDTH / 2 else RIGHT
