"""The preview image: a contact sheet with a few original frames on top and the same output frames below.

A few frames spread over the video keep a thumbnail pair (original over output) when their segment is processed, where
both frames are at hand; the merge lays them side by side, so the preview costs no decoding at merge time.
"""

from __future__ import annotations

import av
import numpy as np

from facefusion_provider.media.containers import MediaSource
from facefusion_provider.media.images import RgbImage, encode_image, read_image, rgb_array, rgb_frame

PREVIEW_SAMPLES = 4
THUMBNAIL_WIDTH = 320
GAP = 4
BACKGROUND = 16
CHECKER, CHECKER_LIGHT, CHECKER_DARK = 16, 204, 153  # the board under a transparent output: square size, greys


def thumbnail_pair(original: av.VideoFrame, output: av.VideoFrame, rotation: int, *, beside: bool = False) -> bytes:
    """JPEG of ``original`` above ``output`` (``beside``: to its left, an image target's whole preview), upright, the
    original at most THUMBNAIL_WIDTH wide and the output at its height whatever its own size (an upscaled output shows
    as large as its original): one column of the sheet."""
    before = _thumbnail(original, rotation)
    after = _thumbnail(output, rotation, height=before.shape[0])
    return encode_image(_sheet([[before, after]] if beside else [[before], [after]]))


def preview_frames(frame_start: int, frame_end: int, samples: int = PREVIEW_SAMPLES) -> list[int]:
    """The frames the preview shows: the middle of each of ``samples`` equal parts of ``[frame_start, frame_end)``,
    however many segments those frames fall in (every frame of a shorter video)."""
    count = frame_end - frame_start
    if count <= samples:
        return list(range(frame_start, frame_end))
    return [frame_start + (2 * part + 1) * count // (2 * samples) for part in range(samples)]


def contact_sheet(columns: list[MediaSource]) -> bytes:
    """JPEG of the thumbnail pairs ``columns`` (from ``thumbnail_pair``) side by side."""
    images = [read_image(column, "preview thumbnail") for column in columns]
    return encode_image(_sheet([images]))


def _thumbnail(frame: av.VideoFrame, rotation: int, height: int | None = None) -> RgbImage:
    """``frame`` upright, at most THUMBNAIL_WIDTH wide, or ``height`` high (even sizes)."""
    upright = np.rot90(opaque_rgb(frame), k=(rotation // 90) % 4)
    frame_height, width = upright.shape[:2]
    if height is None:
        scaled_width = min(THUMBNAIL_WIDTH, width + width % 2)
        scaled_height = max(2, round(frame_height * scaled_width / width / 2) * 2)
    else:
        scaled_width, scaled_height = max(2, round(width * height / frame_height / 2) * 2), height
    return rgb_array(rgb_frame(upright).reformat(width=scaled_width, height=scaled_height))


def opaque_rgb(frame: av.VideoFrame) -> RgbImage:
    """The frame's RGB; a transparent one's laid over a grey checkerboard, as image editors show transparency."""
    if not any(component.is_alpha for component in frame.format.components):
        return rgb_array(frame)
    rgba = frame.to_ndarray(format="rgba").astype(np.float32)
    rows, columns = np.indices(rgba.shape[:2]) // CHECKER
    board = np.where((rows + columns) % 2, CHECKER_DARK, CHECKER_LIGHT).astype(np.float32)[:, :, None]
    alpha = rgba[:, :, 3:] / np.float32(255)
    return np.asarray((rgba[:, :, :3] * alpha + board * (1 - alpha)).round(), np.uint8)


def _sheet(rows: list[list[RgbImage]]) -> RgbImage:
    """Images in a grid of equal cells with a GAP border; even sizes (JPEG's 4:2:0 likes them)."""
    cell_height = max(image.shape[0] for row in rows for image in row)
    cell_width = max(image.shape[1] for row in rows for image in row)
    columns = max(len(row) for row in rows)
    height = len(rows) * cell_height + (len(rows) + 1) * GAP
    width = columns * cell_width + (columns + 1) * GAP
    sheet = np.full((height + height % 2, width + width % 2, 3), BACKGROUND, dtype=np.uint8)
    for r, row in enumerate(rows):
        for c, image in enumerate(row):
            y, x = GAP + r * (cell_height + GAP), GAP + c * (cell_width + GAP)
            sheet[y : y + image.shape[0], x : x + image.shape[1]] = image
    return sheet
