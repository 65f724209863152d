"""A second face clip, made here from public-domain material: another face, skin tone, light and motion than carphone.

How it is made (``graded_hopper_clip``): matplotlib's sample photo ``grace_hopper.jpg`` (public domain, US Navy) is
filmed by a virtual camera for 36 frames of 256x256: the camera rolls (+-15 degrees), pushes in (x1.3) and pans. The
photo is graded in linear light as if lit by a warm key light in a dim room: tungsten colour (R x1, G x0.72, B x0.42),
exposure x0.35, and a side light whose direction swings from one side of the face to the other (0.1 to 1.9 across the
frame). A little sensor noise is added, then the frames go through H.264 (libx264, CRF 23) and back, as a video would.
Her skin ends up darker and far warmer (LAB about 38, 22, 29) than the carphone man's (about 50, 6, 14), and her glasses
and wrinkles are what a swap must get past. Everything is seeded: every run makes the same frames, in about 0.3 s.
"""

from __future__ import annotations

import io
import math

import av
import cv2
import numpy as np
from matplotlib import cbook
from PIL import Image

from facefusion_provider.engine.face import Frame

FRAMES = 36
SIZE = 256
TUNGSTEN = np.array([1.0, 0.72, 0.42], np.float32)
EXPOSURE = 0.35


def hopper_photo() -> Frame:
    with Image.open(cbook.get_sample_data("grace_hopper.jpg")) as image:
        return np.ascontiguousarray(np.asarray(image.convert("RGB")))


def camera_matrix(progress: float) -> np.ndarray:
    """Where the virtual camera looks at ``progress`` (0..1) of the clip: roll, push-in and pan over the photo."""
    angle = 15.0 * math.sin(2.0 * math.pi * progress)
    zoom = SIZE / 440.0 * (1.0 + 0.3 * progress)
    center = (256.0 + 30.0 * math.sin(math.pi * progress), 250.0 - 20.0 * progress)
    matrix = cv2.getRotationMatrix2D(center, angle, zoom)
    matrix[:, 2] += (SIZE / 2 - center[0], SIZE / 2 - center[1])
    return matrix


def side_light(progress: float) -> np.ndarray:
    """A light falling off across the frame, its bright side swinging from right to left over the clip."""
    xs = np.linspace(0.0, 1.0, SIZE, dtype=np.float32)[np.newaxis, :].repeat(SIZE, axis=0)
    right = 0.5 + 0.5 * math.cos(math.pi * progress)
    return np.asarray(0.1 + 1.8 * (right * xs + (1.0 - right) * (1.0 - xs)), np.float32)


def graded_frames() -> list[Frame]:
    """The clip's frames before compression (RGB uint8)."""
    linear = (hopper_photo().astype(np.float32) / 255.0) ** 2.2
    noise = np.random.default_rng(2)
    frames = []
    for number in range(FRAMES):
        progress = number / (FRAMES - 1)
        view = cv2.warpAffine(
            linear, camera_matrix(progress), (SIZE, SIZE), flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REFLECT
        )
        lit = np.clip(view * side_light(progress)[:, :, np.newaxis] * TUNGSTEN * EXPOSURE, 0.0, 1.0) ** (1 / 2.2)
        grained = lit + noise.normal(0.0, 0.01, lit.shape)
        frames.append(np.clip(grained * 255.0 + 0.5, 0, 255).astype(np.uint8))
    return frames


def h264_round_trip(frames: list[Frame]) -> list[Frame]:
    """The frames encoded with libx264 (CRF 23, yuv420p) in memory and decoded again."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=25, options={"crf": "23", "preset": "veryfast"})
        stream.width, stream.height, stream.pix_fmt = SIZE, SIZE, "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    buffer.seek(0)
    with av.open(buffer, "r") as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def graded_hopper_clip() -> list[Frame]:
    return h264_round_trip(graded_frames())
