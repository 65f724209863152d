"""A decoded frame's 8-bit 4:2:0 planes as arrays: views of its buffers, a writable copy, and how its code values
relate to RGB as PyAV converts them (the frame's colour tags)."""

from __future__ import annotations

import av
import numpy as np
import numpy.typing as npt

Plane = npt.NDArray[np.uint8]  # rows x bytes, a view of a frame's buffer
# 8-bit 4:2:0, chroma at half width and height: three planes, or NV12's two (U and V interleaved: NVDEC's frames)
YUV420_FORMATS = frozenset({"yuv420p", "yuvj420p", "nv12"})
BT601 = (0.299, 0.114)  # the luma weights of red and blue
BT709 = (0.2126, 0.0722)
# AVColorSpace values whose RGB conversion swscale (and so PyAV) makes with BT.601's or BT.709's weights.
LUMA_WEIGHTS = {1: BT709, 2: BT601, 5: BT601, 6: BT601}  # BT709, unspecified, BT470BG, SMPTE170M
JPEG_RANGE = 2  # AVColorRange: full range


def yuv420_colour(frame: av.VideoFrame) -> tuple[float, float, bool] | None:
    """The luma weights of red and blue and whether the range is full, for an even-sized 8-bit 4:2:0 frame whose
    colour matrix PyAV converts with BT.601's or BT.709's weights; None for any other."""
    weights = LUMA_WEIGHTS.get(int(frame.colorspace))
    if frame.format.name not in YUV420_FORMATS or frame.width % 2 or frame.height % 2 or weights is None:
        return None
    return (*weights, frame.format.name == "yuvj420p" or int(frame.color_range) == JPEG_RANGE)


def plane_bytes(frame: av.VideoFrame) -> list[Plane]:
    """Each plane's pixels as a (rows, bytes) view of its buffer (rows padded to its line size); a plane holding
    several components (NV12's U and V) has as many bytes a pixel."""
    components = [0] * len(frame.planes)
    for component in frame.format.components:
        components[component.plane] += 1
    views = []
    for plane, count in zip(frame.planes, components, strict=True):
        rows: Plane = np.frombuffer(memoryview(plane), np.uint8).reshape(plane.height, plane.line_size)
        views.append(rows[:, : plane.width * count])
    return views


def writable_copy(original: av.VideoFrame) -> tuple[av.VideoFrame, list[Plane]]:
    """A new frame holding ``original``'s pixels and colour description, and its planes as writable arrays."""
    # A new frame: the decoder may still reference the decoded frame's buffers.
    written = av.VideoFrame(original.width, original.height, original.format.name)
    planes = plane_bytes(written)
    for plane, source in zip(planes, plane_bytes(original), strict=True):
        plane[:] = source
    return described_like(written, original), planes


def described_like(frame: av.VideoFrame, original: av.VideoFrame) -> av.VideoFrame:
    """``frame`` with ``original``'s colour description, so the encoder converts it back the same way."""
    frame.colorspace = original.colorspace
    frame.color_range = original.color_range
    frame.color_primaries = original.color_primaries
    frame.color_trc = original.color_trc
    return frame
