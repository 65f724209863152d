"""The preview image: a contact sheet with a few original frames on top and the same output frames below."""

from __future__ import annotations

import av
import numpy as np

from facefusion_provider.media.containers import MediaSource
from facefusion_provider.media.decode import decode_frame
from facefusion_provider.media.images import RgbImage, encode_image, rgb_array, rgb_frame
from facefusion_provider.types import VideoProbe

PREVIEW_SAMPLES = 4
THUMBNAIL_WIDTH = 320
GAP = 4


def preview_frame_indexes(
    chunk_starts: list[int], frame_start: int, frame_end: int, samples: int = PREVIEW_SAMPLES
) -> list[int]:
    """Target frames to show: chunk starts where possible (each is a keyframe of the output, so cheap to decode)."""
    if len(chunk_starts) <= samples:
        picks = list(chunk_starts)
        middle = (frame_start + frame_end) // 2
        if len(picks) < samples and middle not in picks:
            picks.append(middle)
        return sorted(picks)
    step = (len(chunk_starts) - 1) / (samples - 1)
    return [chunk_starts[round(i * step)] for i in range(samples)]


def contact_sheet(
    *,
    original: MediaSource,
    original_probe: VideoProbe,
    output: MediaSource,
    output_probe: VideoProbe,
    frame_indexes: list[int],
    frame_start: int,
    original_name: str,
    output_name: str,
) -> bytes:
    """JPEG bytes: target frames ``frame_indexes`` (top row) beside the output's same frames (bottom row), upright."""
    top = [
        _thumbnail(decode_frame(original, original_probe, i, original_name), original_probe.rotation)
        for i in frame_indexes
    ]
    bottom = [
        _thumbnail(decode_frame(output, output_probe, i - frame_start, output_name), output_probe.rotation)
        for i in frame_indexes
    ]
    return encode_image(_grid([top, bottom]))


def _thumbnail(frame: av.VideoFrame, rotation: int) -> RgbImage:
    upright = np.rot90(rgb_array(frame), k=(rotation // 90) % 4)
    height, width = upright.shape[:2]
    scaled_width = min(THUMBNAIL_WIDTH, width + width % 2)
    scaled_height = max(2, round(height * scaled_width / width / 2) * 2)
    return rgb_array(rgb_frame(upright).reformat(width=scaled_width, height=scaled_height))


def _grid(rows: list[list[RgbImage]]) -> RgbImage:
    cell_height = max(image.shape[0] for row in rows for image in row)
    cell_width = max(image.shape[1] for row in rows for image in row)
    columns = max(len(row) for row in rows)
    height = len(rows) * cell_height + (len(rows) + 1) * GAP
    width = columns * cell_width + (columns + 1) * GAP
    sheet = np.full((height + height % 2, width + width % 2, 3), 16, dtype=np.uint8)
    for r, row in enumerate(rows):
        for c, image in enumerate(row):
            y, x = GAP + r * (cell_height + GAP), GAP + c * (cell_width + GAP)
            sheet[y : y + image.shape[0], x : x + image.shape[1]] = image
    return sheet
