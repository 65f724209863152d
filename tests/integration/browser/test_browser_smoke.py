"""The first runs from the Airflow UI, in a real browser, on a fresh ``airflow standalone`` (no Variable, nothing set up
by hand; ``[facefusion] pool`` names a pool that does not exist yet):
- the trigger form is a real form (a typed field per option, dropdowns, help texts, sections) that shows no error
  before the user acts, no help text drawn over another at 1280 and 1920 px, refuses Face swapper blend 150 naming
  the field (never clamps it to 100), and names an empty required field;
- a run in the missing pool fails at once with a note naming the pool; created and cleared, it runs, the note goes,
  its Output tab shows the preview; clicked, its video link downloads the output's bytes and the preview opens in the
  tab's sandboxed frame;
- a run with a bad output fails in validate and its page (and its Output tab) says why, naming the field by its title
  and key;
- a run with one span failed (the worker's fault switch) says which span failed, is cleared alone from its panel, and
  succeeds with frame-range labels and output links to S3 (moto; presigned URLs): clicked, the video downloads and
  the preview opens;
- two runs writing one output: the first's tab says by which run and when it was replaced, links that run, and its
  links serve nothing (409); the second's serve its file; removed, the tab says so and stops reloading;
- the ingestion DAG says it is not configured, does nothing and shows nothing failed; triggered with its prefixes, its
  run's tab lists the swap run it started, a link that opens that run.

Screenshots: ``$FACEFUSION_TEST_ARTIFACTS`` (see conftest); the best ones are kept in docs/ (``ui-trigger-form.png``,
``ui-trigger-form-1920.png``, ``ui-grid.png``, ``ui-failed-run.png``, ``ui-finished-run.png``, ``ui-replaced-run.png``,
``ui-ingestion-run.png``).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from airflow_harness import DAG_ID, SWAP_TASKS, StandaloneAirflow, count_frames, make_clip, make_image
from airflow_ui import DEFAULT_SECTION, MONACO, AirflowUI
from faults import fault_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
from s3_servers import MotoServer

pytestmark = pytest.mark.slow

SEGMENT = 8  # frames per segment: one segment per span in these tiny runs
INGEST_DAG_ID = "facefusion_s3_ingest"
BUCKET, CONN_ID = "videos", "facefusion_s3"
POOL = "gpu_missing"
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
        "AIRFLOW__FACEFUSION__POOL": POOL,  # created by the pool test, which runs before any other run
        **fault_env(FAULTS),
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

    assert form.field_errors() == {}  # nothing red before the user acts
    assert form.sections() == [
        DEFAULT_SECTION,
        "Faces: detection and selection",
        "Swap, masks and enhancer",
        "Frames and segments",
        "Output video",
        "Execution",
        "Output image",
        "Advanced Options",
    ]
    assert form.expanded_sections() == [DEFAULT_SECTION]  # everyday options open, the rest collapsed
    assert form.labels(DEFAULT_SECTION) == [
        "Source faces",  # no star: Airflow would show the empty field's section red before the user acts
        "Target video",
        "Output video",
        "Processors",
        "Face selector mode",
        "Face swapper model",
        "Face swapper blend",
    ]
    mode = form.field("Face selector mode", DEFAULT_SECTION)
    assert "Which faces in the video to replace" in mode.inner_text()  # plain words first
    assert "face_selector_mode · choices: one, many, reference" in mode.inner_text()  # the key, on a second line
    assert form.dropdown_options(mode) == ["one", "many", "reference"]
    assert form.field("Target video", DEFAULT_SECTION).inner_text().count("Required: the video whose faces") == 1
    blend = form.field("Face swapper blend", DEFAULT_SECTION)
    assert "from 0 to 100; anything outside is refused" in blend.inner_text()
    form.fill("Face swapper blend", 150)
    assert blend.get_by_role("spinbutton").input_value() == "150"  # not silently clamped to 100
    masks = form.labels("Swap, masks and enhancer")
    assert masks[masks.index("Face mask types") + 1] == "Face mask areas"  # beside the field it depends on
    assert "Only with the area mask" in form.field("Face mask areas", "Swap, masks and enhancer").inner_text()
    frames = form.labels("Frames and segments")
    assert frames == ["Trim frame start", "Trim frame end", "Segment size"]  # unset by default; no deprecated field
    padding = form.field("Face mask padding", "Swap, masks and enhancer")  # four numbers: a JSON list editor
    assert padding.locator(MONACO).count() == 1 and "top, right, bottom, left" in padding.inner_text()
    assert form.field_errors() == {}
    # No help text drawn over (its key line once covered the last line of a help that wraps), at two widths.
    viewport = ui.page.viewport_size
    for width in (1280, 1920):
        ui.page.set_viewport_size({"width": width, "height": 1000})
        overlapped = {section: form.overlapped_help(section) for section in form.sections()[:-1]}
        assert [label for labels in overlapped.values() for label in labels] == [], overlapped
        form.open_section(DEFAULT_SECTION)
        ui.screenshot_element(form.dialog, f"trigger-form-{width}")
    assert viewport is not None
    ui.page.set_viewport_size(viewport)
    ui.screenshot_element(form.dialog, "trigger-form")


def test_a_bad_value_is_refused_naming_the_field_by_its_title(ui: AirflowUI, tmp_path: Path) -> None:
    form = ui.open_trigger_form(DAG_ID)
    assert form.field_errors() == {} and form.can_submit()  # no error before the user acts
    assert form.submit_expecting_error().splitlines()[-1] == "Source faces (source_uris): required: fill it in"
    form.fill_fields({"Source faces": ["/in/face.png"], "Target video": "/in/clip.mp4", "Output video": "/out/x.mp4"})

    # Out of range: refused by the API in one line naming the field, never run as 100.
    form.fill("Face swapper blend", 150, section=DEFAULT_SECTION)
    assert form.submit_expecting_error().splitlines() == [
        "400 Bad Request",
        "",
        "Face swapper blend (face_swapper_blend): 150 is greater than the maximum of 100",
    ]
    form.dialog.get_by_test_id("error-alert").scroll_into_view_if_needed()
    ui.screenshot("bad-value")
    form.fill("Face swapper blend", 90, section=DEFAULT_SECTION)
    form.fill("Face mask padding", [0, 0, 0, 500], section="Swap, masks and enhancer")
    assert form.submit_expecting_error().splitlines()[-1] == (
        "Face mask padding (face_mask_padding): 500 is greater than the maximum of 100"
    )
    form.fill("Face mask padding", [0, 0, 0, 5], section="Swap, masks and enhancer")
    form.fill("Target video", "", section=DEFAULT_SECTION)
    assert form.submit_expecting_error().splitlines()[-1] == "Target video (target_uri): required: fill it in"
    ui.screenshot("required-field")


def _trigger(server: StandaloneAirflow, conf: dict[str, object]) -> str:
    run = server.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
    return str(run["dag_run_id"])


def _note(server: StandaloneAirflow, run_id: str) -> str | None:
    note = server.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}")["note"]
    return None if note is None else str(note)


def test_a_run_in_a_missing_pool_says_so_and_once_the_pool_exists_runs_and_shows_its_output(
    ui: AirflowUI, browser_airflow: StandaloneAirflow, tmp_path: Path
) -> None:
    face, clip = make_image(tmp_path / "face.png"), make_clip(tmp_path / "clip.mp4", SEGMENT, seed=5)
    output = tmp_path / "out" / "local.mp4"
    conf = {"source_uris": [str(face)], "target_uri": str(clip), "output_uri": str(output), "processors": []}
    run_id = _trigger(browser_airflow, {**conf, "segment_size": SEGMENT, "output_video_preset": "ultrafast"})

    try:
        assert ui.wait_for_run_state(DAG_ID, run_id, timeout=60) == "failed"
        # As a user arriving at the failed run. A page open while the run fails shows the new state but keeps the note
        # it first read: Airflow's run header refetches no note (seen here, the note written with the state).
        ui.open_run(DAG_ID, run_id)
        ui.wait_for_text(f"Not started: pool '{POOL}' (tasks swap_span) does not exist")
        ui.screenshot("missing-pool")
    finally:  # the module's later runs use the pool: one failure here must not fail them all
        browser_airflow.api("POST", "/api/v2/pools", json={"name": POOL, "slots": 4})
    browser_airflow.api(
        "POST", f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/clear", json={"dry_run": False}
    )
    assert ui.wait_for_run_state(DAG_ID, run_id, timeout=120) == "success"
    assert _note(browser_airflow, run_id) is None  # the provider's note went with the condition
    ui.open_run(DAG_ID, run_id)  # read afresh: the open page may still hold the note it showed while the run failed
    ui.wait_for_text("Add a note")
    assert ui.page.get_by_text("Not started: pool").count() == 0

    # The run's Output tab: done, the preview shown, the video one click away.
    tab = ui.output_tab(DAG_ID, run_id)
    assert tab.locator("#progress").inner_text() == "Done: the output video is ready."
    assert tab.locator('meta[http-equiv="refresh"]').count() == 0  # done: no more reloads
    preview = tab.locator("#preview")
    preview.wait_for()
    ui.page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=preview.element_handle())
    ui.screenshot("finished-run")

    # Clicked as a person does, in Airflow's sandboxed frame (no popups there): the video downloads, the local
    # output's own bytes (a file:// link would show nothing), and the preview opens in the frame itself.
    href = str(tab.locator("#output-video").get_attribute("href"))
    assert href == f"{ui.base_url}/facefusion/outputs/{DAG_ID}/{quote(run_id, safe='')}/video"
    saved = ui.download_by_click(tab.locator("#output-video"))
    assert (len(saved), saved[4:8]) == (output.stat().st_size, b"ftyp") and saved == output.read_bytes()
    frame = ui.output_frame()
    tab.locator("#preview-link").click()
    frame.wait_for_url(re.compile(r"/preview$"))  # the frame now shows the picture alone
    frame.wait_for_function("() => [...document.images].some(img => img.complete && img.naturalWidth > 0)")


def test_a_run_with_a_bad_output_says_why_on_its_page_naming_the_field(
    ui: AirflowUI, browser_airflow: StandaloneAirflow, tmp_path: Path
) -> None:
    face, clip = make_image(tmp_path / "face.png"), make_clip(tmp_path / "clip.mp4", SEGMENT, seed=6)
    # A folder that is a file: only validate, looking at the disk, can tell (the API refuses what the conf alone shows)
    bad_output = f"{face}/escape.mp4"
    run_id = _trigger(browser_airflow, {"source_uris": [str(face)], "target_uri": str(clip), "output_uri": bad_output})

    assert ui.wait_for_run_state(DAG_ID, run_id, timeout=90) == "failed"
    note = str(_note(browser_airflow, run_id))
    assert re.match(r"^Failed in validate: Output video \(output_uri\): .*is a file, not a folder", note), note
    ui.open_run(DAG_ID, run_id)  # the page read the run as it failed, maybe before the scheduler wrote the note
    ui.wait_for_text("Failed in validate: Output video (output_uri):")
    ui.screenshot("failed-run")
    # The Output tab, which reloads itself while the run works, says the reason too (the header's note does not
    # refresh on a page left open), and stops reloading.
    tab = ui.output_tab(DAG_ID, run_id)
    assert tab.locator("#progress").inner_text() == note
    assert tab.locator("meta[http-equiv='refresh']").count() == 0


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
    assert str(_note(browser_airflow, run_id)).startswith(f"Failed in swap_span [{_frames(FAILING_SPAN)}]: ")

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
    assert _note(browser_airflow, run_id) is None
    assert browser_airflow.xcom(run_id, SWAP_TASKS.validate, "options")["processors"] == []  # null means none

    # merge's page links to the provider's view (same origin: no credential stored in the link); clicked, the
    # logged-in browser's session opens it, the view redirects to a presigned URL of a few minutes, and S3 answers
    # the video as a download and the preview as a picture, which opens in the page.
    links = ui.extra_links(DAG_ID, run_id, SWAP_TASKS.merge, names=("Output video", "Output preview"))
    run_path = f"/facefusion/outputs/{DAG_ID}/{quote(run_id, safe='')}"
    assert links["Output video"].endswith(f"{run_path}/video") and "X-Amz" not in links["Output video"]
    assert links["Output preview"].endswith(f"{run_path}/preview")
    ui.screenshot("merge-links")
    saved = ui.download_by_click(ui.extra_link(DAG_ID, run_id, SWAP_TASKS.merge, "Output video"))
    stored = moto.client().get_object(Bucket=BUCKET, Key="out/clip.mp4")["Body"].read()
    assert (saved, saved[4:8]) == (stored, b"ftyp")
    (tmp_path / "output.mp4").write_bytes(saved)
    assert count_frames(tmp_path / "output.mp4") == 3 * SEGMENT
    answer = ui.answer_to_click(ui.extra_link(DAG_ID, run_id, SWAP_TASKS.merge, "Output preview"), "/out/clip.")
    assert answer.url.startswith(f"{moto.url}/{BUCKET}/out/clip.preview.jpg?") and "X-Amz-Signature=" in answer.url
    assert (answer.status, answer.headers["content-type"], answer.body()[:3]) == (200, "image/jpeg", b"\xff\xd8\xff")
    assert "Output video" in ui.extra_links(DAG_ID, run_id, SWAP_TASKS.swap, 0, names=("Output video",))


def test_two_runs_writing_one_output_the_first_says_replaced_and_serves_nothing_and_a_removed_output_says_so(
    ui: AirflowUI, browser_airflow: StandaloneAirflow, tmp_path: Path
) -> None:
    face, output = make_image(tmp_path / "face.png"), tmp_path / "out" / "shared.mp4"
    runs = []
    for seed in (7, 8):  # two clips, so two works, written one after the other to the same output
        clip = make_clip(tmp_path / f"clip{seed}.mp4", SEGMENT, seed=seed)
        conf = {"source_uris": [str(face)], "target_uri": str(clip), "output_uri": str(output), "processors": []}
        run_id = _trigger(browser_airflow, {**conf, "segment_size": SEGMENT, "output_video_preset": "ultrafast"})
        assert ui.wait_for_run_state(DAG_ID, run_id, timeout=120) == "success"
        runs.append(run_id)
    first, second = runs

    # The first run's tab says by whom and when its output was replaced, links that run, shows nothing of it.
    tab = ui.output_tab(DAG_ID, first)
    line = tab.locator("#progress").inner_text()
    assert re.fullmatch(
        rf"Replaced: \S*/out/shared\.mp4 now holds the output of run {re.escape(second)} of {DAG_ID} at "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\.",
        line,
    ), line
    assert tab.locator("#output-video, #preview, meta[http-equiv='refresh']").count() == 0
    ui.screenshot("replaced")
    # Its merge's links, clicked, serve nothing of the other run's output: one line saying why.
    for name in ("Output video", "Output preview"):
        answer = ui.answer_to_click(ui.extra_link(DAG_ID, first, SWAP_TASKS.merge, name), "/facefusion/outputs/")
        assert (answer.status, answer.headers["content-type"]) == (409, "text/plain; charset=utf-8")
        assert answer.text().startswith("replaced: ") and f"run {second} of {DAG_ID}" in answer.text()
    # The tab's link opens the run that replaced it, in Airflow's page (the frame may not navigate it itself).
    ui.output_tab(DAG_ID, first).locator("#replaced-by a.run-link").click()
    ui.page.get_by_test_id("header-card").get_by_role("heading", name=second, exact=True).wait_for()

    # The second run's tab and links serve its own file.
    tab = ui.output_tab(DAG_ID, second)
    assert tab.locator("#progress").inner_text() == "Done: the output video is ready."
    saved = ui.download_by_click(tab.locator("#output-video"))
    assert (saved, saved[4:8]) == (output.read_bytes(), b"ftyp")
    assert ui.download_by_click(ui.extra_link(DAG_ID, second, SWAP_TASKS.merge, "Output video")) == saved

    # Removed: the tab says so and stops reloading; the link finds nothing.
    output.unlink()
    tab = ui.output_tab(DAG_ID, second)
    assert re.fullmatch(
        r"Removed: the output is no longer at \S*/out/shared\.mp4\.", tab.locator("#progress").inner_text()
    )
    assert tab.locator("meta[http-equiv='refresh'], #output-video").count() == 0
    answer = ui.answer_to_click(ui.extra_link(DAG_ID, second, SWAP_TASKS.merge, "Output video"), "/facefusion/")
    assert answer.status == 404 and answer.text().startswith("removed: ")


def test_the_ingestion_dag_does_nothing_until_configured_and_its_form_requires_the_prefixes(
    ui: AirflowUI, browser_airflow: StandaloneAirflow
) -> None:
    dag = browser_airflow.api("GET", f"/api/v2/dags/{INGEST_DAG_ID}")
    assert (dag["is_paused"], dag["timetable_summary"]) == (True, None)  # paused, and no schedule without its Variable
    assert ui.dag_failure_counts(INGEST_DAG_ID) == (0, 0)
    assert {tag["name"] for tag in dag["tags"]} == {"facefusion", "not configured"}
    ui.wait_for_text("not configured")  # a tag on the DAG's page, at a glance (its description says how)
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


def test_an_ingestion_runs_tab_lists_the_runs_it_started_each_a_link_to_its_run(
    ui: AirflowUI, browser_airflow: StandaloneAirflow, moto: MotoServer, tmp_path: Path
) -> None:
    s3 = moto.client()
    s3.put_object(Bucket=BUCKET, Key="ingest/in/clip.mp4", Body=make_clip(tmp_path / "clip.mp4", SEGMENT).read_bytes())
    s3.put_object(Bucket=BUCKET, Key="ingest/face.png", Body=make_image(tmp_path / "face.png").read_bytes())
    conf = {
        "mode": "videos",
        "input_prefix": f"s3://{BUCKET}/ingest/in/",
        "output_prefix": f"s3://{BUCKET}/ingest/out/",
        "source_uris": [f"s3://{BUCKET}/ingest/face.png"],
        "processors": [],
    }
    browser_airflow.api("PATCH", f"/api/v2/dags/{INGEST_DAG_ID}", json={"is_paused": False})  # after the test above
    body = {"logical_date": None, "conf": conf}
    run_id = str(browser_airflow.api("POST", f"/api/v2/dags/{INGEST_DAG_ID}/dagRuns", json=body)["dag_run_id"])
    assert ui.wait_for_run_state(INGEST_DAG_ID, run_id, timeout=120) == "success"

    tab = ui.output_tab(INGEST_DAG_ID, run_id)
    assert tab.locator("#progress").inner_text() == f"Scanned s3://{BUCKET}/ingest/in/ (videos): 1 start."
    rows = tab.locator("#jobs tr").all_inner_texts()
    assert len(rows) == 2 and rows[1].startswith(f"s3://{BUCKET}/ingest/out/clip.mp4"), rows
    link = tab.locator("#jobs a.run-link")
    started = link.inner_text()
    ui.screenshot("ingestion-run")
    link.click()  # the swap run's page, in Airflow's page
    ui.page.get_by_test_id("header-card").get_by_role("heading", name=started, exact=True).wait_for()
    assert "/dags/facefusion_swap_batch/runs/" in ui.page.url
