"""An upscaled output through the whole DAG (``airflow dags test``, local workers): the frame enhancer on its bilinear
x2 stand-in, segments encoded at twice the target's size, joined from their indexes into an MP4 with the target's
frame count, timing and sound; every frame OpenCV's resize of its target frame (tolerance: ``tests/support/resized.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import pytest
from demo_airflow import dags_test, run_succeeded, swap_conf
from people import person_file
from resized import assert_resized, assert_same_timing_and_sound
from standins import frame_enhancer_standin
from synth import VideoSpec, pattern_frames, write_video

from facefusion_provider.engine.store import MODELS_CACHE_ENV, MODELS_DIR_ENV
from facefusion_provider.work.layout import output_marker_uri

pytestmark = pytest.mark.slow

FRAMES, SEGMENT = 16, 8
WIDTH, HEIGHT = 288, 160


def test_the_dag_upscales_a_clip_frame_exact_with_its_sound(dags_test_env: dict[str, str], tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    frame_enhancer_standin(models, "real_esrgan_x2")
    spec = VideoSpec(width=WIDTH, height=HEIGHT, audio_rate=48000)
    target = str(tmp_path / "clip.mp4")
    write_video(target, spec, pattern_frames(FRAMES, WIDTH, HEIGHT))
    env = {**dags_test_env, MODELS_DIR_ENV: str(models), MODELS_CACHE_ENV: str(tmp_path / "model-cache")}
    output = tmp_path / "out" / "upscaled.mp4"
    options = {
        "processors": ["frame_enhancer"],
        "frame_enhancer_model": "real_esrgan_x2",
        "frame_enhancer_blend": 100,
        "output_video_quality": 100,
        "segment_size": SEGMENT,
    }

    source = person_file(tmp_path / "astronaut.png")  # the DAG asks for a source; the frame enhancer reads none

    result = dags_test(swap_conf([str(source)], target, str(output), options), env, timeout=600)

    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    assert_resized(output, target, (2 * WIDTH, 2 * HEIGHT), cv2.INTER_LINEAR)
    assert_same_timing_and_sound(output, target)
    marker = Path(output_marker_uri(str(output)).removeprefix("file://"))
    assert json.loads(marker.read_text())["method"] == "index"
