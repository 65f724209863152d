"""A fresh ``airflow standalone`` whose ``[facefusion] pool`` names a pool that does not exist: the provider's plugin
(scheduler listener) fails a run as it starts, naming the pool and how to create it, where Airflow alone would leave
``swap_span`` scheduled for ever; once the pool exists, clearing the run makes it succeed. Also the plugin's API
middleware: a bad param value is answered in one line naming the field, without jsonschema's dump."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow_harness import (
    DAG_ID,
    SWAP_TASKS,
    TEST_SETTINGS,
    StandaloneAirflow,
    conf,
    count_frames,
    make_clip,
    make_image,
)

pytestmark = pytest.mark.slow

MISSING_POOL = "facefusion_gpu"


@pytest.fixture(scope="module")
def server(standalone_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> StandaloneAirflow:
    settings = {**TEST_SETTINGS, "work_root": tmp_path_factory.mktemp("work").as_uri(), "pool": MISSING_POOL}
    server: StandaloneAirflow = standalone_factory(settings, {})
    return server


def test_a_missing_pool_fails_the_run_at_its_start_naming_it_and_a_clear_runs_it_once_created(
    server: StandaloneAirflow, tmp_path: Path
) -> None:
    face, clip = make_image(tmp_path / "face.png"), make_clip(tmp_path / "clip.mp4", 16, seed=5)
    output = tmp_path / "out" / "clip.mp4"
    run_id = server.trigger(conf([face], clip, output, segment_size=8, processors=[]))

    assert server.wait(run_id, timeout=60) == "failed"
    assert set(server.task_states(run_id).values()) == {(None, 0)}  # failed before any task ran
    note = server.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["note"]
    assert note.startswith(f"Not started: pool '{MISSING_POOL}' (tasks {SWAP_TASKS.swap}) does not exist.")
    assert f"`airflow pools set {MISSING_POOL} <slots>" in note and "\n" not in note
    assert f"pool '{MISSING_POOL}'" in server.log_tail(200_000)  # the scheduler's log says it too

    server.ensure_pool(MISSING_POOL, 2)
    server.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/clear", json={"dry_run": False})
    assert server.wait(run_id) == "success", server.task_states(run_id)
    assert count_frames(output) == 16


def test_a_bad_param_is_answered_in_one_line_naming_the_field(server: StandaloneAirflow, tmp_path: Path) -> None:
    good = {"source_uris": ["/f.png"], "target_uri": "/in.mp4", "output_uri": "/out.mp4"}
    for change, detail in [
        (
            {"face_swapper_blend": 150},
            "Face swapper blend (face_swapper_blend): 150 is greater than the maximum of 100",
        ),
        (
            {"face_selector_mode": "all"},
            "Face selector mode (face_selector_mode): 'all' is not one of ['one', 'many', 'reference']",
        ),
        ({"source_uris": []}, "Source faces (source_uris): required: fill it in"),
    ]:
        response = server.client.post(
            f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": {**good, **change}}
        )
        assert (response.status_code, response.json()) == (400, {"detail": detail})


def test_a_conf_no_task_could_use_is_answered_400_before_a_run_exists(server: StandaloneAirflow) -> None:
    good = {"source_uris": ["/f.png"], "target_uri": "/in.mp4", "output_uri": "/out.mp4"}
    runs_before = server.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"]
    deep = '{"logical_date": null, "conf": {"options": ' + "[" * 10_000 + "]" * 10_000 + "}}"
    bodies = [
        (deep, "request body: nested too deeply to read"),
        (
            {"conf": {**good, "options": {"face_swapper_blend": "90"}}},
            "Face swapper blend (face_swapper_blend): Input should be a valid integer (got '90')",
        ),
        ({"conf": {**good, "face_swaper_blend": 90}}, "face_swaper_blend: unknown conf key; did you mean"),
        ({"conf": {**good, "target_uri": "/" + "a" * 6_000_000}}, "Target video (target_uri): the path or URI is"),
    ]
    for body, detail in bodies:
        response = server.client.post(
            f"/api/v2/dags/{DAG_ID}/dagRuns",
            content=body if isinstance(body, str) else None,
            json=None if isinstance(body, str) else {"logical_date": None, **body},
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 400 and response.json()["detail"].startswith(detail)
    assert server.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"] == runs_before
