"""A processed frame back into the encoder's frame: only what the processors changed is converted back, into a copy of
the decoded frame's own planes, so every other pixel stays the decoded one."""

from __future__ import annotations

import av
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.face import Frame
from facefusion_provider.engine.paste import PendingFrame, YuvMatrix, changed_box, paste_into_yuv420
from facefusion_provider.media.images import rgb_frame, rgba_frame
from facefusion_provider.media.planes import YUV420_FORMATS, described_like, plane_bytes, writable_copy, yuv420_colour


def write_back(result: Frame | PendingFrame, image: Frame, original: av.VideoFrame) -> av.VideoFrame:
    """The frame to encode for ``result`` (the processor's output for ``image``, itself ``original`` as RGB).

    Unchanged: ``original`` itself, bit-exact. Pending (``PendingFrame``): a copy of ``original``'s YUV planes with
    only its patches' rectangle converted back and replaced, and its crops pasted straight in, so nothing is converted
    whole. RGBA (a transparent background) or resized (an upscaler, ``output_video_scale``): a new frame with
    ``original``'s colour description.
    Changed: ``original`` with only the changed rectangle (even-aligned) converted back and replaced in its planes, so
    every pixel outside it is the decoded one; formats other than 8-bit 4:2:0 are converted back whole, as before.
    """
    if isinstance(result, PendingFrame):
        colour = yuv420_colour(original)
        if colour is not None:
            written, planes = writable_copy(original)
            patched = result.patched_region()
            if patched is not None:
                _replace_region(planes, *patched, original)
            luma, *chroma = planes
            if len(chroma) == 1:  # NV12: U and V interleaved, one two-channel plane
                chroma = [chroma[0].reshape(chroma[0].shape[0], -1, 2)]
            for paste in result.pastes:
                paste_into_yuv420(luma, chroma, paste, YuvMatrix(*colour))
            return written
        result = result.rgb()  # a colour matrix the planes' paste does not know: written in RGB, converted back
    if result.shape[2:] == (4,):  # RGBA, a transparent output's (the encoder takes its alpha): converted whole
        return described_like(rgba_frame(result), original)
    if result.shape != image.shape:
        return described_like(rgb_frame(result), original)
    box = changed_box(image, result) if result is not image else None
    if box is None:
        return original
    if original.format.name not in YUV420_FORMATS or original.width % 2 or original.height % 2:
        return described_like(rgb_frame(result), original)
    x1, y1, x2, y2 = box
    x1, y1, x2, y2 = x1 & ~1, y1 & ~1, min(original.width, x2 + (x2 & 1)), min(original.height, y2 + (y2 & 1))
    written, planes = writable_copy(original)
    _replace_region(planes, (x1, y1, x2, y2), result[y1:y2, x1:x2], original)
    return written


def _replace_region(
    planes: list[npt.NDArray[np.uint8]], box: tuple[int, int, int, int], pixels: Frame, original: av.VideoFrame
) -> None:
    """``pixels`` (RGB, the even-aligned ``box`` of the frame) converted as ``original`` is and written into its
    ``planes``."""
    x1, y1 = box[:2]
    region = described_like(rgb_frame(pixels), original).reformat(format=original.format.name)
    for plane, patch in zip(planes, plane_bytes(region), strict=True):
        # A plane's rows and bytes are in proportion to the frame's (chroma: half the rows; half the bytes, or all
        # of them where U and V are interleaved).
        top, left = y1 * plane.shape[0] // original.height, x1 * plane.shape[1] // original.width
        plane[top : top + patch.shape[0], left : left + patch.shape[1]] = patch
