"""The DAG under ``airflow standalone``, driven over REST: retries, clearing failed chunks, resume, repeat runs, bad conf.

One server for the whole module. Its test-only fault switch makes chunks 1 and 2 fail once (retryable) and chunk 3 fail
for good on its first try, in every run; clips of 24 frames (3 chunks) and 32 frames (4 chunks) choose which faults a
run meets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import TEST_SETTINGS, StandaloneAirflow, conf, count_frames, make_clip, make_image

from facefusion_provider import storage

pytestmark = pytest.mark.slow

FAULTS = [
    {"command": "swap-chunk", "indexes": [1, 2], "tries": [1], "retryable": True},
    {"command": "swap-chunk", "indexes": [3], "tries": [1], "retryable": False},
]
POOL_SLOTS = 3


@pytest.fixture(scope="module")
def server(standalone_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> StandaloneAirflow:
    work = tmp_path_factory.mktemp("work")
    server: StandaloneAirflow = standalone_factory(
        {**TEST_SETTINGS, "work_root": work.as_uri()}, {"FACEFUSION_TEST_FAULTS": json.dumps(FAULTS)}
    )
    server.api("POST", "/api/v2/pools", json={"name": "facefusion_gpu", "slots": POOL_SLOTS})
    return server


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("media")
    make_image(folder / "face.png")
    make_clip(folder / "three_chunks.mp4", 24, seed=1)
    make_clip(folder / "four_chunks.mp4", 32, seed=2)
    return folder


def _chunks(server: StandaloneAirflow, run_id: str) -> dict[int, tuple[str | None, int]]:
    return {index: value for (task, index), value in server.task_states(run_id).items() if task == "swap_chunk"}


def _launched(server: StandaloneAirflow, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1) -> bool:
    """Whether the task started a worker process (rather than finding its work done)."""
    log = server.task_log(run_id, task_id, try_number, map_index)
    assert ("Running command" in log) != ("Nothing to do, no worker started" in log), log[-2000:]
    return "Running command" in log


def test_two_chunks_failing_once_are_retried_and_the_output_is_published(
    server: StandaloneAirflow, media: Path
) -> None:
    output = media / "out" / "three_chunks.mp4"
    run_id = server.trigger(conf([media / "face.png"], media / "three_chunks.mp4", output, chunk_size=8, processors=[]))

    assert server.wait(run_id) == "success", server.task_states(run_id)

    assert _chunks(server, run_id) == {0: ("success", 1), 1: ("success", 2), 2: ("success", 2)}
    assert "injected transient failure (swap-chunk chunk 1 try 1)" in server.task_log(run_id, "swap_chunk", 1, 1)
    labels = {ti["map_index"]: ti["rendered_map_index"] for ti in server.task_instances(run_id) if ti["map_index"] >= 0}
    assert labels == {0: "frames 0-7", 1: "frames 8-15", 2: "frames 16-23"}
    assert count_frames(output) == 24
    events = server.api("GET", "/api/v2/assets/events", params={"limit": 100})["asset_events"]
    assert any(event["extra"].get("output_uri") == output.as_uri() for event in events)
    assert not storage.exists(server.xcom(run_id, "validate", "job_uri"))  # cleanup removed the job folder


def test_failed_chunk_is_cleared_alone_and_new_runs_reuse_committed_work(
    server: StandaloneAirflow, media: Path
) -> None:
    first_output, second_output = media / "out" / "four_chunks.mp4", media / "out" / "four_chunks_again.mp4"
    first_conf = conf([media / "face.png"], media / "four_chunks.mp4", first_output, chunk_size=8, processors=[])
    second_conf = {**first_conf, "output_uri": str(second_output)}

    # Chunk 3 fails for good on its first try: no retry, its message in its log, merge never starts.
    failed_run = server.trigger(first_conf)
    assert server.wait(failed_run) == "failed"
    assert _chunks(server, failed_run) == {0: ("success", 1), 1: ("success", 2), 2: ("success", 2), 3: ("failed", 1)}
    chunk_log = server.task_log(failed_run, "swap_chunk", 1, 3)
    assert "invalid_media" in chunk_log
    assert "injected permanent failure (swap-chunk chunk 3 try 1)" in chunk_log
    assert server.task_states(failed_run)[("merge", -1)][0] == "upstream_failed"

    # A new run over the same input and options (written elsewhere) reuses every committed chunk: it launches work
    # only for chunk 3, which meets its first-try fault again.
    job_uri = server.xcom(failed_run, "validate", "job_uri")
    layout = storage.JobLayout(job_uri)
    markers = {i: Path(storage.local_path(layout.chunk_marker(i)) or "") for i in range(3)}
    stamps = {i: path.stat().st_mtime_ns for i, path in markers.items()}
    second_run = server.trigger(second_conf)
    assert server.wait(second_run) == "failed"
    assert server.xcom(second_run, "validate", "job_uri") == job_uri
    assert [_launched(server, second_run, "swap_chunk", 1, i) for i in range(4)] == [False, False, False, True]
    assert {i: path.stat().st_mtime_ns for i, path in markers.items()} == stamps

    # Clearing only the failed task reruns chunk 3 alone (try 2); the succeeded chunks keep try 1.
    server.clear_failed(second_run)
    assert server.wait(second_run) == "success", server.task_states(second_run)
    assert _chunks(server, second_run) == {0: ("success", 1), 1: ("success", 1), 2: ("success", 1), 3: ("success", 2)}
    assert count_frames(second_output) == 32
    assert not first_output.exists()
    assert not storage.exists(job_uri)

    # A run after the successful one finds the output carrying its job id and does no chunk work at all.
    repeat_run = server.trigger(second_conf)
    assert server.wait(repeat_run) == "success"
    assert [_launched(server, repeat_run, "swap_chunk", 1, i) for i in range(4)] == [False] * 4
    assert not _launched(server, repeat_run, "merge")
    assert _chunks(server, repeat_run) == {i: ("success", 1) for i in range(4)}


def test_bad_conf_is_rejected_naming_the_field(server: StandaloneAirflow, media: Path) -> None:
    good = conf([media / "face.png"], media / "three_chunks.mp4", media / "out" / "bad.mp4", processors=[])

    response = server.client.post(
        "/api/v2/dags/facefusion_swap/dagRuns",
        json={"logical_date": None, "conf": {**good, "options": {"face_swapper_blend": 150}}},
    )
    assert response.status_code == 400
    assert "face_swapper_blend" in response.text

    # What a schema cannot know (the file is missing) fails in validate, before any worker starts.
    run_id = server.trigger({**good, "target_uri": str(media / "missing.mp4")})
    assert server.wait(run_id) == "failed"
    states = server.task_states(run_id)
    assert states[("validate", -1)] == ("failed", 1)
    assert states[("prepare", -1)][0] == "upstream_failed"
    assert "target_uri: " in server.task_log(run_id, "validate", 1)
