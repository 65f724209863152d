"""The preview: original frames on top, the same output frames below, upright, as a JPEG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from facefusion_provider import worker
from facefusion_provider.media.decode import decode_frame
from facefusion_provider.media.images import read_image, rgb_array
from facefusion_provider.media.preview import GAP, preview_frame_indexes
from facefusion_provider.media.probe import probe_video

from .conftest import MakeVideo


def test_preview_frames_are_chunk_starts_spread_over_the_video() -> None:
    assert preview_frame_indexes([0], 0, 1) == [0]
    assert preview_frame_indexes([0], 0, 100) == [0, 50]
    assert preview_frame_indexes([10, 74, 138], 10, 200) == [10, 74, 105, 138]
    assert preview_frame_indexes(list(range(0, 1280, 128)), 0, 1280) == [0, 384, 768, 1152]


def test_preview_shows_originals_over_outputs(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=24, width=96, height=64)
    result = worker.run([], target, str(tmp_path / "out.mp4"), str(tmp_path / "work"), processors=[], chunk_size=8)
    sheet = read_image(str(tmp_path / "out.preview.jpg"), "preview")
    assert sheet.shape == (2 * 64 + 3 * GAP, 4 * 96 + 5 * GAP, 3)  # chunk starts 0, 8, 16 and the middle frame 12
    probe = probe_video(target, target)
    for column, index in enumerate((0, 8, 12, 16)):
        x = GAP + column * (96 + GAP)
        original = rgb_array(decode_frame(target, probe, index, target)).astype(int)
        top, bottom = (
            sheet[GAP : GAP + 64, x : x + 96].astype(int),
            sheet[2 * GAP + 64 : 2 * GAP + 128, x : x + 96].astype(int),
        )
        assert np.abs(top - original).mean() < 12 and np.abs(bottom - original).mean() < 12
    assert result.preview_uri.endswith("out.preview.jpg")


def test_preview_is_upright_for_rotated_video(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=4, width=96, height=64, rotation=90)
    worker.run([], target, str(tmp_path / "out.mp4"), str(tmp_path / "work"), processors=[])
    sheet = read_image(str(tmp_path / "out.preview.jpg"), "preview")
    assert sheet.shape == (2 * 96 + 3 * GAP, 2 * 64 + 3 * GAP, 3)  # frames 0 and 2 (the middle), turned upright
