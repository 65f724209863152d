"""Outputs of another size than the target's, end to end through ``facefusion-worker run``: the frame enhancer on its
bilinear x2 stand-in, and ``output_video_scale``. Segments are encoded at the new size and the merge joins them (the
MP4 index join, the .mov and .mkv remux) with the target's frame count, timestamps and sound; a span started mid-video
gives the frames of one started at frame 0; an output past the encoder's largest frame, or another frame rate, is
refused at prepare naming the option. The frames' tolerance is stated in ``tests/support/resized.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import av
import cv2
import pytest
from committed import work_uri_for
from readback import frame_digests
from resized import assert_resized, assert_same_timing_and_sound, rgb_frames
from standins import frame_enhancer_standin

from facefusion_provider import storage, worker
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.work.layout import WorkLayout, output_marker_uri
from facefusion_provider.work.records import OutputMarker
from facefusion_provider.worker import cli

from .conftest import MakeVideo

FRAMES, SEGMENT = 20, 8
WIDTH, HEIGHT = 288, 160  # the x2 stand-in's tiles of 256 (240 kept): two across
ENHANCE = ["--processors", "frame_enhancer", "--frame-enhancer-model", "real_esrgan_x2"]
ENHANCE += ["--frame-enhancer-blend", "100"]
ENHANCE_OPTIONS: dict[str, Any] = {
    "processors": ["frame_enhancer"],
    "frame_enhancer_model": "real_esrgan_x2",
    "frame_enhancer_blend": 100,
    "output_video_quality": 100,
    "segment_size": SEGMENT,
}


@pytest.fixture
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    frame_enhancer_standin(folder, "real_esrgan_x2")
    return folder


@pytest.fixture
def target(make_video: MakeVideo) -> str:
    return make_video(frames=FRAMES, width=WIDTH, height=HEIGHT, audio_rate=48000)


def _marker(output: Path) -> OutputMarker:
    return OutputMarker.model_validate_json(Path(storage.local_path(output_marker_uri(str(output))) or "").read_text())


def _run(target: str, output: Path, models: Path, *extra: str) -> None:
    argv = ["run", "--target", target, "--output", str(output), "--work-root", str(output.parent / "work")]
    argv += ["--models-dir", str(models), "--output-video-quality", "100", "--segment-size", str(SEGMENT), *extra]
    assert cli.main(argv) == 0


def test_an_enhanced_mp4_is_twice_the_size_and_joins_frame_exact_with_the_sound(
    target: str, models: Path, tmp_path: Path
) -> None:
    output = tmp_path / "enhanced.mp4"
    _run(target, output, models, *ENHANCE)

    assert_resized(output, target, (2 * WIDTH, 2 * HEIGHT), cv2.INTER_LINEAR)
    assert_same_timing_and_sound(output, target)
    assert _marker(output).method == "index"  # joined from the segments' indexes: no second encode


@pytest.mark.parametrize("extension", ["mov", "mkv"])
def test_an_enhanced_mov_or_mkv_is_remuxed_frame_exact_with_the_sound(
    extension: str, target: str, models: Path, tmp_path: Path
) -> None:
    output = tmp_path / f"enhanced.{extension}"
    _run(target, output, models, *ENHANCE)

    assert_resized(output, target, (2 * WIDTH, 2 * HEIGHT), cv2.INTER_LINEAR)
    assert_same_timing_and_sound(output, target)
    assert _marker(output).method == "remux"


def test_output_video_scale_alone_resizes_every_frame(target: str, models: Path, tmp_path: Path) -> None:
    output = tmp_path / "smaller.mp4"
    _run(target, output, models, "--processors", "--output-video-scale", "0.5")

    assert_resized(output, target, (WIDTH // 2, HEIGHT // 2), cv2.INTER_AREA)
    assert_same_timing_and_sound(output, target)


def test_output_video_scale_multiplies_the_enhancers_scale(target: str, models: Path, tmp_path: Path) -> None:
    """x2, then 0.75: 1.5 times the target, each side rounded to an even number as FaceFusion rounds it."""
    output = tmp_path / "one-and-a-half.mp4"
    _run(target, output, models, *ENHANCE, "--output-video-scale", "0.75")

    with av.open(str(output)) as container:
        stream = container.streams.video[0]
        assert (stream.width, stream.height) == (432, 240)  # int(576 * 0.75), int(320 * 0.75), both already even
    assert len(rgb_frames(output)) == FRAMES


def test_a_span_started_mid_video_gives_the_frames_of_a_run_from_frame_0(
    target: str, models: Path, work_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FACEFUSION_MODELS_DIR", str(models))
    whole = tmp_path / "whole.mp4"
    worker.run([], target, str(whole), str(tmp_path / "whole-work"), **ENHANCE_OPTIONS)
    work_uri = work_uri_for(work_root, [], target, **ENHANCE_OPTIONS)
    spec = worker.prepare(work_uri, [], target, **ENHANCE_OPTIONS)
    assert len(spec.segments) == 3
    worker.swap_span(work_uri, target, 1, 3, span=1)  # frames 8-19 first, reached by a seek
    worker.swap_span(work_uri, target, 0, 1, span=0)
    pieces = tmp_path / "pieces.mp4"
    worker.merge(work_uri, target, str(pieces))

    assert [d.md5 for d in frame_digests(str(pieces))] == [d.md5 for d in frame_digests(str(whole))]


def test_an_x8_enhancer_on_a_4k_target_is_refused_at_prepare_naming_the_model(
    make_video: MakeVideo, work_root: str
) -> None:
    target = make_video(frames=2, width=3840, height=2160)
    options = {**ENHANCE_OPTIONS, "frame_enhancer_model": "real_esrgan_x8"}
    work_uri = work_uri_for(work_root, [], target, **options)
    with pytest.raises(InvalidOptionError, match=r"^options\.frame_enhancer_model: .* 3840x2160 .* 30720x17280") as no:
        worker.prepare(work_uri, [], target, **options)
    assert "8192" in str(no.value) and "\n" not in str(no.value) and not no.value.retryable
    assert not storage.exists(WorkLayout(work_uri).work_json)


def test_another_frame_rate_is_refused_at_prepare_naming_the_field(make_video: MakeVideo, work_root: str) -> None:
    target = make_video(frames=4)  # 30 fps
    options = {"processors": [], "output_video_fps": 25.0}
    work_uri = work_uri_for(work_root, [], target, **options)
    with pytest.raises(InvalidOptionError, match=r"^options\.output_video_fps: 25 differs from the target's 30\.000"):
        worker.prepare(work_uri, [], target, **options)
    same = {"processors": [], "output_video_fps": 30.0}  # the target's own rate is the default's output
    worker.prepare(work_uri_for(work_root, [], target, **same), [], target, **same)
