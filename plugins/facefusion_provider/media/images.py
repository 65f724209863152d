"""Still images in and out with PyAV alone (no Pillow or OpenCV in the media layer)."""

from __future__ import annotations

import io

import av
import av.video.stream
import numpy as np
import numpy.typing as npt

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.containers import MediaSource, open_media

RgbImage = npt.NDArray[np.uint8]  # H x W x 3, RGB


def encode_image(image: RgbImage, codec: str = "mjpeg", quality: int = 3) -> bytes:
    """A JPEG (``mjpeg``, quality 2 best .. 31 worst) or PNG (``png``) file's bytes."""
    height, width = image.shape[:2]
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="image2pipe") as container:
        stream = container.add_stream(codec, rate=1)
        assert isinstance(stream, av.video.stream.VideoStream)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuvj444p" if codec == "mjpeg" else "rgb24"
        if codec == "mjpeg":
            stream.codec_context.qmin = stream.codec_context.qmax = quality
        frame = rgb_frame(image)
        container.mux(stream.encode(frame.reformat(format=stream.pix_fmt)))
        container.mux(stream.encode(None))
    return buffer.getvalue()


def read_image(source: MediaSource, name: str) -> RgbImage:
    """Decode the first picture of an image file as RGB."""
    with open_media(source, name) as container:
        if not container.streams.video:
            raise InvalidMediaError(f"{name}: is not an image")
        for frame in container.decode(container.streams.video[0]):
            return rgb_array(frame)
    raise InvalidMediaError(f"{name}: holds no picture")


def rgb_array(frame: av.VideoFrame) -> RgbImage:
    """The frame's pixels as an RGB array (converted from the frame's own format)."""
    return np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)


def rgb_frame(image: RgbImage) -> av.VideoFrame:
    return av.VideoFrame.from_ndarray(np.ascontiguousarray(image, dtype=np.uint8), format="rgb24")


def rgba_frame(image: npt.NDArray[np.uint8]) -> av.VideoFrame:
    """An H x W x 4 RGBA array (straight alpha) as a frame."""
    return av.VideoFrame.from_ndarray(np.ascontiguousarray(image, dtype=np.uint8), format="rgba")
