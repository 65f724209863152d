"""Still images in and out with PyAV alone (no Pillow or OpenCV in the media layer)."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import av
import av.container
import av.video.stream
import numpy as np
import numpy.typing as npt

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.containers import MediaSource, media_errors, open_media
from facefusion_provider.media.probe import is_still_image_format
from facefusion_provider.types import IMAGE_EXTENSIONS, VideoProbe

RgbImage = npt.NDArray[np.uint8]  # H x W x 3, RGB
# FFmpeg's encoder for each image extension, and the pixel format it is written in.
IMAGE_ENCODERS: dict[str, tuple[str, str]] = {
    ".jpg": ("mjpeg", "yuvj444p"),
    ".jpeg": ("mjpeg", "yuvj444p"),
    ".png": ("png", "rgb24"),
    ".webp": ("libwebp", "yuv420p"),
}
assert set(IMAGE_ENCODERS) == set(IMAGE_EXTENSIONS)
STILL_FRAME_RATE, STILL_TIME_BASE = "25/1", "1/25"  # FFmpeg's image2 demuxer's: the one frame lasts 1/25 s
STILL_SEGMENT_EXTENSION = ".png"  # an image work's one segment: lossless, whatever the output's format
ALPHA_PIX_FMTS = {"png": "rgba", "libwebp": "yuva420p"}  # where a transparent picture keeps its alpha (not JPEG)


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


def image_quality_settings(extension: str, quality: int) -> tuple[dict[str, str], int | None]:
    """The encoder options and the JPEG qscale (None: not used) for FaceFusion's ``output_image_quality`` 0-100.

    As FaceFusion's FFmpeg command: WebP takes the quality itself; JPEG the qscale ``round(31 - 0.31 x quality)``
    (1 at most quality). PNG is lossless: the quality sets zlib's compression level, 9 at quality 0, 0 at 100."""
    codec = IMAGE_ENCODERS[extension][0]
    if codec == "libwebp":
        return {"quality": str(quality)}, None
    if codec == "png":
        return {"compression_level": str(round(9 - quality * 0.09))}, None
    return {}, max(1, round(31 - quality * 0.31))


def encode_output_image(image: RgbImage, extension: str, quality: int) -> bytes:
    """The bytes of an image file of ``extension`` (``IMAGE_EXTENSIONS``) at FaceFusion's ``quality`` (0-100); an
    RGBA ``image`` keeps its alpha in PNG and WebP (a JPEG has none: its colours are kept)."""
    codec, pix_fmt = IMAGE_ENCODERS[extension.lower()]
    options, qscale = image_quality_settings(extension.lower(), quality)
    height, width = image.shape[:2]
    transparent = image.shape[2] == 4 and codec in ALPHA_PIX_FMTS
    pix_fmt = ALPHA_PIX_FMTS[codec] if transparent else pix_fmt
    picture = av.VideoFrame.from_ndarray(
        np.ascontiguousarray(image if transparent else image[:, :, :3]), format="rgba" if transparent else "rgb24"
    )
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="image2pipe") as container:
        stream = container.add_stream(codec, rate=1, options=options)
        assert isinstance(stream, av.video.stream.VideoStream)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        if qscale is not None:
            stream.codec_context.qmin = stream.codec_context.qmax = qscale
        container.mux(stream.encode(picture.reformat(format=pix_fmt)))
        container.mux(stream.encode(None))
    return buffer.getvalue()


def picture_alpha(frame: av.VideoFrame) -> npt.NDArray[np.uint8] | None:
    """A picture's transparency (H x W, 255 opaque); None where it has none, or every pixel is opaque."""
    if frame.format.name != "pal8" and not any(component.is_alpha for component in frame.format.components):
        return None
    alpha = np.asarray(frame.to_ndarray(format="rgba"), dtype=np.uint8)[:, :, 3]
    return alpha if int(alpha.min()) < 255 else None


def read_picture(source: MediaSource, name: str) -> RgbImage:
    """The first picture of an image file: RGBA where it is transparent, else RGB."""
    frame = _picture(source, name)
    alpha = picture_alpha(frame)
    return rgb_array(frame) if alpha is None else np.dstack([rgb_array(frame), alpha])


def probe_image(source: MediaSource, name: str) -> VideoProbe:
    """An image target as a one-frame video: its size and format, the one frame at pts 0 (``still_image``)."""
    with open_media(source, name) as container:
        if not is_still_image_format(container.format.name) or not container.streams.video:
            raise InvalidMediaError(
                f"{name}: is not an image ({container.format.name}); an image target is a JPEG, PNG or WebP file "
                f"({', '.join(IMAGE_EXTENSIONS)}), a video target needs a video extension"
            )
        video = container.streams.video[0]
        frame = _upright(_first_frame(container, video, name))
        return VideoProbe(
            container=container.format.name,
            codec=video.codec_context.name,
            width=frame.width,
            height=frame.height,
            pix_fmt=frame.format.name,
            frame_rate=STILL_FRAME_RATE,
            time_base=STILL_TIME_BASE,
            frame_count=1,
            pts=[0],
            duration_seconds=0.0,
            video_stream_index=video.index,
            still_image=True,
        )


def still_frame(source: MediaSource, name: str) -> av.VideoFrame:
    """The one picture of an image target, as decoded, at pts 0 (the probe's one frame)."""
    frame = _upright(_picture(source, name))
    frame.pts = 0
    return frame


def _upright(frame: av.VideoFrame) -> av.VideoFrame:
    """``frame`` turned as its display matrix says (a JPEG's EXIF orientation): processed and written upright, as
    FaceFusion's OpenCV reads it; an image output carries no orientation of its own."""
    turns = (round(frame.rotation) // 90) % 4
    if turns == 0:
        return frame
    transparent = picture_alpha(frame) is not None
    pixels = frame.to_ndarray(format="rgba") if transparent else rgb_array(frame)
    turned = np.ascontiguousarray(np.rot90(pixels, k=turns), dtype=np.uint8)
    return av.VideoFrame.from_ndarray(turned, format="rgba" if transparent else "rgb24")


def _first_frame(
    container: av.container.InputContainer, video: av.video.stream.VideoStream, name: str
) -> av.VideoFrame:
    with media_errors(name, "decoding the image"):
        for frame in container.decode(video):
            return frame
    raise InvalidMediaError(f"{name}: holds no picture")


@dataclass
class StillImageEncoder:
    """An image work's one segment: its one frame written losslessly to ``path`` (a PNG) when closed, as a
    ``VideoEncoder`` writes a video segment; the merge encodes it in the output's format and quality."""

    path: str
    frame: av.VideoFrame | None = None
    alpha: npt.NDArray[np.uint8] | None = None  # the target's transparency, kept through the processors

    @property
    def frame_count(self) -> int:
        return 0 if self.frame is None else 1

    def encode(self, frame: av.VideoFrame, pts: int) -> None:
        if self.frame is not None:
            raise InvalidMediaError(f"{self.path}: an image segment holds one frame; frame at pts {pts} is a second")
        self.frame = frame

    def keep_alpha(self, original: av.VideoFrame) -> None:
        """Keep the transparency of ``original`` (the target's picture), as FaceFusion's image workflow does."""
        self.alpha = picture_alpha(original)

    def close(self) -> int:
        if self.frame is not None:
            image = rgb_array(self.frame)
            height, width = image.shape[:2]
            # The processors' alpha (a transparent background) and the target's own, the lower where both are.
            alphas = [picture_alpha(self.frame)]
            if self.alpha is not None:  # resized with the picture where a processor did
                plane = av.VideoFrame.from_ndarray(self.alpha, format="gray").reformat(width=width, height=height)
                alphas.append(np.asarray(plane.to_ndarray(), np.uint8))
            kept = [alpha for alpha in alphas if alpha is not None]
            if kept:
                image = np.dstack([image, np.minimum.reduce(kept)])
            data = encode_output_image(image, STILL_SEGMENT_EXTENSION, 100)
            with open(self.path, "wb") as handle:
                handle.write(data)
        return self.frame_count

    def abort(self) -> None:
        self.frame = None
        if os.path.exists(self.path):
            os.unlink(self.path)


def read_image(source: MediaSource, name: str) -> RgbImage:
    """Decode the first picture of an image file as RGB."""
    return rgb_array(_picture(source, name))


def _picture(source: MediaSource, name: str) -> av.VideoFrame:
    """The first picture of an image file, as decoded."""
    with open_media(source, name) as container:
        if not container.streams.video:
            raise InvalidMediaError(f"{name}: is not an image")
        return _first_frame(container, container.streams.video[0], name)


def rgb_array(frame: av.VideoFrame) -> RgbImage:
    """The frame's pixels as an RGB array (converted from the frame's own format)."""
    return np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)


def rgb_frame(image: RgbImage) -> av.VideoFrame:
    return av.VideoFrame.from_ndarray(np.ascontiguousarray(image, dtype=np.uint8), format="rgb24")


def rgba_frame(image: npt.NDArray[np.uint8]) -> av.VideoFrame:
    """An H x W x 4 RGBA array (straight alpha) as a frame."""
    return av.VideoFrame.from_ndarray(np.ascontiguousarray(image, dtype=np.uint8), format="rgba")
