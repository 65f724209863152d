"""The first run from the Airflow UI, in a real browser, on a fresh ``airflow standalone`` (no pool, no Variable, nothing
set up by hand): the trigger form is a real form (a typed field per option, dropdowns, ranges, descriptions, sections);
a run triggered from it has one span failed (the worker's fault switch), cleared alone from its panel, and succeeds in
the grid with frame-range labels and output links; a bad value is blocked naming the field; the ingestion DAG does
nothing and shows nothing failed.

The module's server writes outputs to a moto S3 (through ``[facefusion] aws_conn_id``); merge's extra links lead to the
provider's view, which redirects the logged-in browser to presigned http URLs. Screenshots: ``$FACEFUSION_TEST_ARTIFACTS``
(see conftest); the best two are kept in docs/ (``ui-trigger-form.png``, ``ui-grid.png``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from airflow_harness import DAG_ID, SWAP_TASKS, StandaloneAirflow, count_frames, make_clip, make_image
from airflow_ui import DEFAULT_SECTION, AirflowUI

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
from s3_servers import MotoServer

pytestmark = pytest.mark.slow

SEGMENT = 8  # frames per segment: one segment per span in these tiny runs
INGEST_DAG_ID = "facefusion_s3_ingest"
BUCKET, CONN_ID = "videos", "facefusion_s3"
# The worker's test-only fault switch fails span 2 for good on its first try, in runs long enough to have one.
FAILING_SPAN = 2
FAULTS = [{"command": SWAP_TASKS.swap_command, "indexes": [FAILING_SPAN], "tries": [1], "retryable": False}]
TASKS = (
    SWAP_TASKS.validate,
    SWAP_TASKS.prepare,
    SWAP_TASKS.plan,
    SWAP_TASKS.swap,
    SWAP_TASKS.merge,
    SWAP_TASKS.cleanup,
)


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        server.client().create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser_airflow_env(moto: MotoServer) -> dict[str, str]:
    """The fault switch, and S3 through an AWS connection (outputs and their presigned links)."""
    connection = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": moto.url, "region_name": "us-east-1"},
    }
    return {
        "FACEFUSION_TEST_FAULTS": json.dumps(FAULTS),
        f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection),
        "AIRFLOW__FACEFUSION__AWS_CONN_ID": CONN_ID,
    }


def _labels(ui: AirflowUI, run_id: str) -> dict[int, tuple[str, str | None, int]]:
    """``{map index: (frame-range label, state, try)}`` of the run's spans, as the mapped task's list shows them."""
    rows = ui.mapped_task_instances(DAG_ID, run_id, SWAP_TASKS.swap)
    return {index: (row.map_label, row.state, row.try_number) for index, row in rows.items()}


def _frames(index: int) -> str:
    return f"frames {index * SEGMENT}-{(index + 1) * SEGMENT - 1} (1 segment)"


def test_the_trigger_form_is_a_typed_field_per_option_in_sections(ui: AirflowUI) -> None:
    form = ui.open_trigger_form(DAG_ID)

    assert form.sections() == [
        DEFAULT_SECTION,
        "Faces: detection and selection",
        "Swap, masks and enhancer",
        "Frames and segments",
        "Output video",
        "Execution",
        "Advanced Options",
    ]
    assert form.expanded_sections() == [DEFAULT_SECTION]  # everyday options open, the rest collapsed
    assert form.labels(DEFAULT_SECTION)[:6] == [
        "Source faces *",
        "Target video *",
        "Output video *",
        "Processors",  # none selected is a choice (frames pass through): not required
        "Face selector mode *",
        "Face swapper model *",
    ]
    mode = form.field("Face selector mode", DEFAULT_SECTION)
    assert "Which target faces to swap: one (the largest)" in mode.inner_text()  # the description
    assert form.dropdown_options(mode) == ["one", "many", "reference"]
    blend = form.field("Face swapper blend", DEFAULT_SECTION).get_by_role("spinbutton")
    assert (blend.get_attribute("aria-valuemin"), blend.get_attribute("aria-valuemax")) == ("0", "100")
    form.fill("Face swapper blend", 150)
    assert blend.input_value() == "100"  # the form keeps a number in its range
    frames = form.labels("Frames and segments")
    assert frames == ["Trim frame start", "Trim frame end", "Segment size"]  # unset by default; no deprecated field
    assert form.expanded_sections() == ["Frames and segments"]
    padding = form.field("Face mask padding", "Swap, masks and enhancer")  # four numbers: a JSON list editor
    assert padding.get_by_role("code").count() == 1 and "top, right, bottom, left" in padding.inner_text()
    assert form.field_errors() == {}


def test_a_run_from_the_form_has_a_failed_span_cleared_alone_from_the_ui_then_succeeds_with_output_links(
    ui: AirflowUI, browser_airflow: StandaloneAirflow, moto: MotoServer, tmp_path: Path
) -> None:
    face, clip = make_image(tmp_path / "face.png"), make_clip(tmp_path / "clip.mp4", 3 * SEGMENT, seed=3)
    output = f"s3://{BUCKET}/out/clip.mp4"

    form = ui.open_trigger_form(DAG_ID)
    form.fill("Source faces", [str(face)])
    form.fill("Target video", str(clip))
    form.fill("Output video", output)
    form.fill("Processors", [])  # none: frames pass through (what this test watches is Airflow, not the engine)
    form.fill("Face selector mode", "many")  # a dropdown
    form.fill("Face swapper blend", 70)  # a number
    form.fill("Segment size", SEGMENT, section="Frames and segments")
    form.fill("Output video preset", "ultrafast", section="Output video")
    assert form.can_submit(), form.field_errors()
    form.open_section(DEFAULT_SECTION)
    ui.screenshot_element(form.dialog, "trigger-form")
    run_id = form.submit()

    run_conf = browser_airflow.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["conf"]
    assert {key: run_conf[key] for key in ("output_uri", "processors", "face_selector_mode", "segment_size")} == {
        "output_uri": output,
        "processors": None,  # the emptied multi-select
        "face_selector_mode": "many",
        "segment_size": SEGMENT,
    }
    assert (run_conf["face_swapper_blend"], run_conf["output_video_preset"]) == (70, "ultrafast")

    # Span 2 fails for good on its first try (the fault switch): the run fails, the other spans succeed.
    assert ui.wait_for_run_state(DAG_ID, run_id, timeout=180) == "failed"
    assert _labels(ui, run_id)[FAILING_SPAN] == (_frames(FAILING_SPAN), "failed", 1)
    ui.screenshot("failed-span")

    # Cleared from its panel, it alone runs again (try 2), with what follows it; the others keep their first try.
    affected = ui.clear_task_instance(DAG_ID, run_id, SWAP_TASKS.swap, FAILING_SPAN)
    assert (SWAP_TASKS.swap, FAILING_SPAN) in affected and (SWAP_TASKS.merge, -1) in affected
    assert ui.wait_for_run_state(DAG_ID, run_id, timeout=180) == "success"
    assert ui.grid_states(run_id) == dict.fromkeys(TASKS, "success")
    assert _labels(ui, run_id) == {
        0: (_frames(0), "success", 1),
        1: (_frames(1), "success", 1),
        2: (_frames(2), "success", 2),
    }
    ui.screenshot("grid")
    assert browser_airflow.xcom(run_id, SWAP_TASKS.validate, "options")["processors"] == []  # null means none

    # merge's page links to the provider's view (same origin: no credential stored in the link); the logged-in
    # browser's session opens it, and the view redirects to a presigned URL of a few minutes.
    links = ui.extra_links(DAG_ID, run_id, SWAP_TASKS.merge, names=("Output video", "Output preview"))
    run_path = f"/facefusion/outputs/{DAG_ID}/{quote(run_id, safe='')}"
    assert links["Output video"].endswith(f"{run_path}/video") and "X-Amz" not in links["Output video"]
    assert links["Output preview"].endswith(f"{run_path}/preview")
    video = ui.page.request.get(ui.base_url + f"{run_path}/video")
    assert video.ok and video.url.startswith(f"{moto.url}/{BUCKET}/out/clip.mp4?X-Amz-Algorithm=AWS4-HMAC-SHA256")
    (tmp_path / "output.mp4").write_bytes(video.body())
    assert count_frames(tmp_path / "output.mp4") == 3 * SEGMENT
    assert ui.page.request.get(ui.base_url + f"{run_path}/preview").body()[:3] == b"\xff\xd8\xff"  # a JPEG
    ui.screenshot("merge-links")
    assert "Output video" in ui.extra_links(DAG_ID, run_id, SWAP_TASKS.swap, 0, names=("Output video",))


def test_a_bad_value_is_blocked_in_the_form_naming_the_field(ui: AirflowUI, tmp_path: Path) -> None:
    form = ui.open_trigger_form(DAG_ID)
    assert not form.can_submit()  # the required fields are empty
    assert form.field_errors() == dict.fromkeys(
        ("Source faces", "Target video", "Output video"), "This field is required"
    )
    form.fill_fields({"Source faces": ["/in/face.png"], "Target video": "/in/clip.mp4", "Output video": "/out/x.mp4"})
    assert form.can_submit()

    # A value the form cannot correct: the API refuses it, the dialog says so in one line naming the field.
    form.fill("Face mask padding", [0, 0, 0, 500], section="Swap, masks and enhancer")
    assert form.submit_expecting_error().splitlines() == [
        "400 Bad Request",
        "",
        "Invalid input for param face_mask_padding: 500 is greater than the maximum of 100",
    ]
    form.dialog.get_by_test_id("error-alert").scroll_into_view_if_needed()
    ui.screenshot("bad-value")
    form.fill("Target video", "", section=DEFAULT_SECTION)
    assert form.field_errors() == {"Target video": "This field is required"}
    assert not form.can_submit()
    ui.screenshot("required-field")


def test_the_ingestion_dag_does_nothing_until_configured_and_its_form_requires_the_prefixes(
    ui: AirflowUI, browser_airflow: StandaloneAirflow
) -> None:
    dag = browser_airflow.api("GET", f"/api/v2/dags/{INGEST_DAG_ID}")
    assert (dag["is_paused"], dag["timetable_summary"]) == (True, None)  # paused, and no schedule without its Variable
    assert ui.dag_failure_counts(INGEST_DAG_ID) == (0, 0)
    ui.screenshot("ingestion-dag")

    form = ui.open_trigger_form(INGEST_DAG_ID)
    assert form.labels(DEFAULT_SECTION) == [
        "Mode *",
        "Input prefix *",
        "Output prefix *",
        "Ledger prefix",
        "Source URIs",
        "Target URIs",
    ]
    assert form.field_errors() == dict.fromkeys(("Input prefix", "Output prefix"), "This field is required")
    assert not form.can_submit()
    form.fill_fields({"Input prefix": "s3://videos/in/", "Output prefix": "s3://videos/out/"})
    assert form.can_submit()
    labels = [label for section in form.sections()[:-1] for label in form.labels(section)]
    assert [label for label in labels if not label or "_" in label] == [], labels  # every param titled
