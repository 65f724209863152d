"""The preview: original frames on top, the same output frames below, upright, as a JPEG, built from the thumbnail
pairs the segments stored (no decoding at merge time)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from facefusion_provider import worker
from facefusion_provider.media.decode import decode_frame
from facefusion_provider.media.images import read_image, rgb_array, rgb_frame, rgba_frame
from facefusion_provider.media.preview import CHECKER_DARK, CHECKER_LIGHT, GAP, preview_frames, thumbnail_pair
from facefusion_provider.media.probe import probe_video

from .conftest import MakeVideo


def test_preview_shows_the_middle_of_four_equal_parts_of_the_frames() -> None:
    assert preview_frames(0, 300) == [37, 112, 187, 262]  # one 300-frame segment still gives four columns
    assert preview_frames(100, 108) == [101, 103, 105, 107]  # a trimmed range
    assert preview_frames(0, 3) == [0, 1, 2]
    assert preview_frames(0, 1) == [0]


def test_preview_shows_originals_over_outputs(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=24, width=96, height=64)
    result = worker.run([], target, str(tmp_path / "out.mp4"), str(tmp_path / "work"), processors=[], segment_size=8)
    sheet = read_image(str(tmp_path / "out.preview.jpg"), "preview")
    pair_height, pair_width = 2 * 64 + 3 * GAP, 96 + 2 * GAP  # each segment's pair has its own border
    assert sheet.shape == (pair_height + 2 * GAP, 4 * pair_width + 5 * GAP, 3)
    probe = probe_video(target, target)
    for column, index in enumerate((3, 9, 15, 21)):  # the middles of four equal parts, over three segments
        x = 2 * GAP + column * (pair_width + GAP)
        original = rgb_array(decode_frame(target, probe, index, target)).astype(int)
        top = sheet[2 * GAP : 2 * GAP + 64, x : x + 96].astype(int)
        bottom = sheet[3 * GAP + 64 : 3 * GAP + 128, x : x + 96].astype(int)
        assert np.abs(top - original).mean() < 12 and np.abs(bottom - original).mean() < 12
    assert result.preview_uri.endswith("out.preview.jpg")


def test_preview_is_upright_for_rotated_video(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=4, width=96, height=64, rotation=90)
    worker.run([], target, str(tmp_path / "out.mp4"), str(tmp_path / "work"), processors=[])
    sheet = read_image(str(tmp_path / "out.preview.jpg"), "preview")
    # Four frames, one segment: a column each, turned upright (96 high).
    assert sheet.shape == (2 * 96 + 5 * GAP, 4 * (64 + 2 * GAP) + 5 * GAP, 3)


def test_an_upscaled_output_shows_at_its_originals_height(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=4, width=96, height=64)
    worker.run([], target, str(tmp_path / "out.mp4"), str(tmp_path / "work"), processors=[], output_video_scale=2.0)
    sheet = read_image(str(tmp_path / "out.preview.jpg"), "preview")
    assert sheet.shape == (2 * 64 + 5 * GAP, 4 * (96 + 2 * GAP) + 5 * GAP, 3)  # as the 96x64 original, not 192x128
    probe = probe_video(target, target)
    original = rgb_array(decode_frame(target, probe, 0, target)).astype(int)
    bottom = sheet[3 * GAP + 64 : 3 * GAP + 128, 2 * GAP : 2 * GAP + 96].astype(int)
    assert np.abs(bottom - original).mean() < 12  # the output, twice as large, shown at the original's size


def test_a_transparent_output_shows_over_a_checkerboard() -> None:
    """An output frame with alpha 0 everywhere (a background remover's transparent fill, nothing kept): its thumbnail
    is the grey board, not the red its colour planes hold."""
    red = np.zeros((64, 64, 4), np.uint8)
    red[:, :, 0] = 255
    original = rgb_frame(np.ascontiguousarray(red[:, :, :3]))
    sheet = read_image(io.BytesIO(thumbnail_pair(original, rgba_frame(red), 0)), "thumbnail pair")
    below = sheet[2 * GAP + 64 : 2 * GAP + 128, GAP : GAP + 64].astype(int)
    assert np.abs(below - below[:, :, :1]).max() < 12, "grey, not red"
    light = np.abs(below[:, :, 0] - CHECKER_LIGHT) < 12
    dark = np.abs(below[:, :, 0] - CHECKER_DARK) < 12
    assert light.mean() > 0.3 and dark.mean() > 0.3 and (light | dark).mean() > 0.85
