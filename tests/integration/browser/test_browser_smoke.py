"""Smoke tests of the browser harness: log in, trigger a pass-through ``facefusion_swap`` run from the trigger form,
watch the grid to success and read the task states and frame-range labels the UI shows; then the other helpers: clear
one mapped task from its panel, read the form's errors, read a DAG page's failure counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow_harness import DAG_ID, SWAP_POOL, SWAP_TASKS, StandaloneAirflow, conf, count_frames, make_clip, make_image
from airflow_ui import AirflowUI

pytestmark = pytest.mark.slow

CHUNK_FRAMES = 8
INGEST_DAG_ID = "facefusion_s3_ingest"
# The worker's test-only fault switch fails this chunk index for good on its first try, in runs long enough to have it.
FAILING_INDEX = 3
FAULTS = [{"command": SWAP_TASKS.swap_command, "indexes": [FAILING_INDEX], "tries": [1], "retryable": False}]


@pytest.fixture(scope="module")
def browser_airflow_env(browser_airflow_env: dict[str, str]) -> dict[str, str]:
    return {**browser_airflow_env, "FACEFUSION_TEST_FAULTS": json.dumps(FAULTS)}


@pytest.fixture(scope="module", autouse=True)
def swap_pool(browser_airflow: StandaloneAirflow) -> None:
    """The current DAG's pool does not exist in a fresh home. Once its default is default_pool, this only sets that
    pool's slots: then delete the fixture."""
    browser_airflow.ensure_pool(SWAP_POOL, 3)


def test_a_run_triggered_from_the_form_succeeds_in_the_grid(
    ui: AirflowUI, browser_airflow: StandaloneAirflow, tmp_path: Path
) -> None:
    face, clip = make_image(tmp_path / "face.png"), make_clip(tmp_path / "clip.mp4", 3 * CHUNK_FRAMES, seed=3)
    output = tmp_path / "out" / "swapped.mp4"

    form = ui.open_trigger_form(DAG_ID)
    form.fill("Source faces", [str(face)])
    form.fill("Target video", str(clip))
    form.fill("Output video", str(output))
    form.fill("Options", {"processors": [], "chunk_size": CHUNK_FRAMES})
    assert form.can_submit(), form.field_errors()
    ui.screenshot("trigger-form")
    run_id = form.submit()

    assert ui.wait_for_run_state(DAG_ID, run_id, timeout=180) == "success"
    ui.screenshot("grid")
    tasks = (SWAP_TASKS.validate, SWAP_TASKS.prepare, SWAP_TASKS.plan, SWAP_TASKS.swap, SWAP_TASKS.merge)
    assert ui.grid_states(run_id) == dict.fromkeys((*tasks, SWAP_TASKS.cleanup), "success")
    swaps = ui.mapped_task_instances(DAG_ID, run_id, SWAP_TASKS.swap)
    assert {index: (row.map_label, row.state) for index, row in swaps.items()} == {
        i: (f"frames {i * CHUNK_FRAMES}-{(i + 1) * CHUNK_FRAMES - 1}", "success") for i in range(3)
    }
    ui.screenshot("mapped")
    assert browser_airflow.run_state(run_id) == "success"  # the UI's run is the API's run
    assert count_frames(output) == 3 * CHUNK_FRAMES


def test_a_failed_mapped_task_is_cleared_from_its_panel_and_form_errors_are_read(
    ui: AirflowUI, browser_airflow: StandaloneAirflow, tmp_path: Path
) -> None:
    face = make_image(tmp_path / "face.png")
    clip = make_clip(tmp_path / "clip.mp4", (FAILING_INDEX + 1) * CHUNK_FRAMES, seed=4)
    run_conf = conf([face], clip, tmp_path / "out.mp4", chunk_size=CHUNK_FRAMES, processors=[])
    run_id = browser_airflow.trigger(run_conf)
    assert browser_airflow.wait(run_id) == "failed"

    # Clear the failed map index from its panel: it runs again (try 2) with what follows it; no other index does.
    affected = ui.clear_task_instance(DAG_ID, run_id, SWAP_TASKS.swap, FAILING_INDEX)
    assert (SWAP_TASKS.swap, FAILING_INDEX) in affected and (SWAP_TASKS.merge, -1) in affected
    assert ui.wait_for_run_state(DAG_ID, run_id, timeout=120) == "success"
    states = browser_airflow.task_states(run_id)
    assert [states[(SWAP_TASKS.swap, i)][1] for i in range(FAILING_INDEX + 1)] == [1] * FAILING_INDEX + [2]

    # A value the API refuses: the dialog shows its error, naming the field; an emptied required field blocks submit.
    form = ui.open_trigger_form(DAG_ID)
    form.fill_fields({"Source faces": [str(face)], "Target video": str(clip), "Output video": str(tmp_path / "x.mp4")})
    form.fill("Options", {"processors": [], "face_swapper_blend": 150})
    assert "face_swapper_blend" in form.submit_expecting_error()
    form.fill("Target video", "")
    assert form.field_errors() == {"Target video": "This field is required"}
    assert not form.can_submit()
    ui.screenshot("form-errors")

    assert ui.dag_failure_counts(INGEST_DAG_ID) == (0, 0)
