"""The whole DAG through ``airflow dags test`` on a real face video: every frame comes back, and the face is swapped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from airflow_harness import conf, count_frames, make_clip, make_image
from demo_airflow import dags_test, run_succeeded
from faults import fault_env
from judge import identity_judge
from people import carphone
from skimage import data

from facefusion_provider import storage
from facefusion_provider.media.images import encode_image

pytestmark = pytest.mark.slow


def _frames(path: Path) -> list[np.ndarray[Any, Any]]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def test_dag_swaps_the_face_in_every_frame(dags_test_env: dict[str, str], tmp_path: Path) -> None:
    target = carphone(tmp_path / "carphone.mp4")
    source = tmp_path / "astronaut.png"
    source.write_bytes(encode_image(np.ascontiguousarray(data.astronaut()), codec="png"))
    output = tmp_path / "out" / "swapped.mp4"

    result = dags_test(conf([source], target, output, segment_size=40), dags_test_env, timeout=600)

    text = result.stdout + result.stderr
    assert run_succeeded(result), text[-6000:]
    assert count_frames(output) == count_frames(target) == 120
    assert output.with_suffix(".preview.jpg").exists()
    # The span worker that committed the last segment merged: the merge task found the output and started no worker.
    assert "as its work's last segment was committed" in text, text[-6000:]
    assert "already holds the output" in text
    assert not [line for line in text.splitlines() if "Running worker" in line and "'merge'" in line]

    judge = identity_judge()
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


def test_with_standing_workers_the_spans_wait_and_a_serve_process_swaps_the_face(
    dags_test_env: dict[str, str], tmp_path: Path
) -> None:
    """``span_workers = standing``: the swap_span tasks start no worker and defer; one ``facefusion-worker serve``
    started beside Airflow works the run's segments, and the run ends with the face swapped."""
    target = carphone(tmp_path / "carphone.mp4", frames=60)
    source = tmp_path / "astronaut.png"
    source.write_bytes(encode_image(np.ascontiguousarray(data.astronaut()), codec="png"))
    output = tmp_path / "out" / "swapped.mp4"
    env = {**dags_test_env, "AIRFLOW__FACEFUSION__SPAN_WORKERS": "standing"}
    work_root = env["AIRFLOW__FACEFUSION__WORK_ROOT"]
    # A slow standing worker (0.2 s more a frame): the spans start while segments are still free, so they defer;
    # a fast one could commit all three before the first span task starts, and that span would have nothing to wait on.
    slow = fault_env([{"command": "swap-span", "frame_delay": 0.2}])
    standing = subprocess.Popen(
        [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", work_root],
        env={**env, **slow},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        result = dags_test(conf([source], target, output, segment_size=20), env, timeout=600)
    finally:
        standing.terminate()  # SIGTERM: a standing worker unwinds; its log says what it committed
        _, err = standing.communicate(timeout=60)
    text = result.stdout + result.stderr
    assert run_succeeded(result), text[-6000:]
    assert "waiting, deferred" in text
    assert not [line for line in text.splitlines() if "Running command" in line and "swap-span" in line]
    assert "3 segments of 1 runs committed so far" in err, err[-3000:]  # the standing worker did all three
    assert count_frames(output) == count_frames(target) == 60
    judge = identity_judge()
    source_descriptor = judge.descriptor(np.ascontiguousarray(data.astronaut()))
    original, swapped = _frames(target)[30], _frames(output)[30]
    where = judge.locate(original, upsample=0)
    assert where is not None
    moved = judge.descriptor(swapped, where)
    assert judge.distance(moved, source_descriptor) < judge.distance(moved, judge.descriptor(original, where))


def test_a_run_that_fails_for_good_keeps_its_work_for_a_clear(dags_test_env: dict[str, str], tmp_path: Path) -> None:
    """merge fails without retries (an injected fault): the tasks' failure callback, given validate's XComs by the DAG,
    turns the run's lease ``kept``, so its work and committed segments wait for a clear."""
    target = make_clip(tmp_path / "clip.mp4", 16)
    output = tmp_path / "out" / "kept.mp4"
    env = {**dags_test_env, **fault_env([{"command": "merge", "retryable": False}])}

    result = dags_test(conf([make_image(tmp_path / "face.png")], target, output, segment_size=8, processors=[]), env)

    text = result.stdout + result.stderr
    assert not run_succeeded(result) and "injected permanent failure (merge try 1)" in text, text[-6000:]
    work_root = Path(storage.local_path(env["AIRFLOW__FACEFUSION__WORK_ROOT"]) or "")
    leases = [json.loads(path.read_text()) for path in work_root.glob("work/*/runs/*.json")]
    (lease,) = [lease for lease in leases if lease["output_uri"] == output.as_uri()]
    assert lease["state"] == "kept" and lease["ttl_seconds"] == 168 * 3600, lease
    assert not output.exists()
