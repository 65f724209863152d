"""The run's Output tab and its output links: where the output stands, from the run's task states and the output's
marker together (a finished run never says "Preparing"; an output another run wrote since says by whom and serves
nothing; a removed one says so and stops refreshing); an ingestion run's tab lists the runs it started; what the
ingestion DAG's page says about its configuration."""

from __future__ import annotations

import dataclasses
import html
from datetime import UTC, datetime
from types import SimpleNamespace

from facefusion_provider.airflow_plugin import FaceFusionPlugin
from facefusion_provider.airflow_plugin.run_output import (
    DagTasks,
    RunFacts,
    Stage,
    StoredOutput,
    link_refusal,
    output_stage,
    provider_tasks,
    stage_line,
)
from facefusion_provider.airflow_plugin.run_view import (
    ingest_line,
    ingest_page_html,
    run_page_html,
    started_jobs,
)
from facefusion_provider.operators.ingest_summary import ingest_description, ingest_tags
from facefusion_provider.work.records import OutputMarker, RunHolder

VIDEO, PREVIEW = "/facefusion/outputs/d/r/video", "/facefusion/outputs/d/r/preview"
OUTPUT = "s3://videos/out/clip.mp4"
TASKS = DagTasks(validate="validate", plan="plan")
SWAP_TASKS = ("validate", "prepare", "plan", "swap_span", "merge", "cleanup")
REFRESH = 'http-equiv="refresh"'


def _run(run_state: str = "running", done: tuple[str, ...] = SWAP_TASKS, **states: tuple[str | None, ...]) -> RunFacts:
    """Run ``manual_a`` of work ``w-a``: the tasks in ``done`` succeeded, the others have no state yet, unless
    ``states`` says otherwise."""
    task_states = {task: ("success",) if task in done else (None,) for task in SWAP_TASKS}
    return RunFacts("manual_a", run_state, {**task_states, **states}, TASKS, "w-a", OUTPUT, "s3://work/work/w-a")


def _marker(work_id: str, run_id: str = "manual_b") -> OutputMarker:
    return OutputMarker(
        work_id=work_id,
        output_uri=OUTPUT,
        frame_count=24,
        sha256=None,
        size=100,
        run=RunHolder(kind="airflow", dag_id="facefusion_swap", run_id=run_id),
        written_at=datetime(2026, 12, 6, 15, 40, 5, tzinfo=UTC),
    )


def _page(run: RunFacts, stored: StoredOutput | None, segments: tuple[int, int] | None = None) -> str:
    return run_page_html(run, stored, segments, VIDEO, PREVIEW)


NOTHING = StoredOutput(None, False)
OURS = StoredOutput(_marker("w-a", "manual_a"), True)
THEIRS = StoredOutput(_marker("w-b"), True)


def test_a_running_run_says_preparing_until_plan_then_segments_saved_then_merging_and_reloads_itself() -> None:
    # The work may be prepared already (another run's): until this run's plan succeeded it still prepares.
    preparing = _run(done=("validate",), prepare=("running",))
    assert output_stage(preparing, NOTHING) is Stage.PREPARING
    assert "Preparing: the video is being read." in _page(preparing, NOTHING)
    swapping = _run(done=("validate", "prepare", "plan"), swap_span=("running", "success"))
    page = _page(swapping, NOTHING, (12, 32))
    assert "Swapping: 12 of 32 segments saved (37%)." in page
    assert REFRESH in page and PREVIEW not in page  # no preview before the output exists
    assert "Merging: all 32 segments saved" in _page(swapping, NOTHING, (32, 32))
    assert output_stage(_run("queued", done=()), None) is Stage.WAITING
    assert stage_line(output_stage(_run(done=()), None), _run(done=()), None, None) == "Checking the inputs."


def test_a_finished_run_links_its_video_as_a_download_and_its_preview_in_the_same_frame() -> None:
    page = _page(_run("success"), OURS)
    assert "Done: the output video is ready." in page and REFRESH not in page
    assert f'<a id="output-video" href="{VIDEO}" download="clip.mp4">' in page
    assert f'<a id="preview-link" href="{PREVIEW}"' in page and f'<img id="preview" src="{PREVIEW}"' in page
    assert "target=" not in page  # the sandboxed frame blocks a new window: the links download or open in it
    assert link_refusal(_run("success"), OURS) is None


def test_a_finished_image_run_offers_the_image_and_its_side_by_side_preview() -> None:
    run = dataclasses.replace(_run("success"), output_uri="s3://out/portrait.webp")
    page = _page(run, OURS)
    assert f'<a id="output-video" href="{VIDEO}" download="portrait.webp">Download the output image</a>' in page
    assert "Left: the original image; right: the output." in page and "Top row" not in page


def test_a_run_whose_output_another_run_replaced_says_by_whom_and_serves_nothing() -> None:
    run = _run("success")
    assert output_stage(run, THEIRS) is Stage.REPLACED
    page = _page(run, THEIRS)
    assert (
        f"Replaced: {OUTPUT} now holds the output of run manual_b of facefusion_swap at 2026-12-06 15:40:05 UTC."
        in page
    )
    assert 'href="/dags/facefusion_swap/runs/manual_b"' in page and 'class="run-link"' in page  # to the run's page
    assert REFRESH not in page and VIDEO not in page and PREVIEW not in page
    refusal = link_refusal(run, THEIRS)
    assert refusal is not None and refusal.status == 409
    assert refusal.reason.startswith(f"replaced: {OUTPUT} holds the output of run manual_b of facefusion_swap at ")
    # An older marker names no run: still refused, by "another run".
    old = StoredOutput(_marker("w-b").model_copy(update={"run": None, "written_at": None}), True)
    assert "now holds the output of another run." in _page(run, old)


def test_a_removed_output_says_removed_and_stops_refreshing() -> None:
    for stored in (NOTHING, StoredOutput(_marker("w-a", "manual_a"), False)):  # file and marker gone, or the file
        run = _run("success")
        assert output_stage(run, stored) is Stage.REMOVED
        page = _page(run, stored)
        assert f"Removed: the output is no longer at {OUTPUT}." in page and REFRESH not in page
        refusal = link_refusal(run, stored)
        assert refusal is not None and (refusal.status, refusal.reason.split(":")[0]) == (404, "removed")


def test_a_running_run_over_an_older_output_is_not_done_and_its_links_refuse_the_older_file() -> None:
    run = _run(done=("validate", "prepare", "plan"))
    assert output_stage(run, THEIRS) is Stage.SWAPPING
    refusal = link_refusal(run, THEIRS)
    assert refusal is not None and refusal.status == 409 and refusal.reason.startswith("not this run's output: ")
    refusal = link_refusal(run, NOTHING)
    assert refusal is not None and (refusal.status, refusal.reason) == (
        404,
        "not written yet: run manual_a is swapping",
    )


def test_a_finished_run_never_says_preparing() -> None:
    failed = _run("failed", done=("validate",), prepare=("failed",), plan=("upstream_failed",))
    assert output_stage(failed, NOTHING) is Stage.FAILED
    page = _page(failed, NOTHING)
    assert "Failed in prepare: the run's note says why." in html.unescape(page) and REFRESH not in page
    refused = _run("failed", done=(), validate=("failed",))
    assert output_stage(refused, None) is Stage.REFUSED and REFRESH not in _page(refused, None)
    assert "Refused: the run's inputs were not accepted" in html.unescape(_page(refused, None))
    assert output_stage(_run("failed", done=()), None) is Stage.FAILED  # failed as it started (a missing pool)
    # The reason itself once the scheduler wrote the run's note (with the failed state): the tab shows it live.
    reason = "Failed in validate: Output video (output_uri): '..' is not allowed"
    noted = RunFacts("manual_a", "failed", {"validate": ("failed",)}, TASKS, note=reason)
    assert stage_line(output_stage(noted, None), noted, None, None) == reason
    written_by_a_person = RunFacts("manual_a", "failed", {"validate": ("failed",)}, TASKS, note="looking into it")
    assert stage_line(Stage.REFUSED, written_by_a_person, None, None).startswith("Refused: ")
    refusal = link_refusal(refused, None)
    assert refusal is not None and refusal.status == 404


def _task(task_id: str, task_type: str, module: str) -> SimpleNamespace:
    return SimpleNamespace(task_id=task_id, task_type=task_type, _task_module=module)


def test_the_runs_tasks_are_found_by_the_operator_that_made_them_whatever_their_ids() -> None:
    tasks = provider_tasks(
        [
            _task("check", "ValidateSwapConfOperator", "facefusion_provider.operators.validate"),
            _task("split", "PlanSpansOperator", "facefusion_provider.operators.plan"),
            _task("validate", "ValidateSwapConfOperator", "someone_else.operators"),  # not this provider's
        ]
    )
    assert tasks == DagTasks(validate="check", plan="split") and tasks.has_output
    ingest = provider_tasks([_task("scan", "ScanForNewJobsOperator", "facefusion_provider.operators.ingest")])
    assert ingest == DagTasks(scan="scan") and not ingest.has_output
    assert provider_tasks([_task("hello", "BashOperator", "airflow.providers.standard")]) == DagTasks()


def test_an_ingestion_runs_tab_lists_the_runs_it_started_each_linked_with_its_state() -> None:
    scan_value = [
        {"trigger_run_id": "ingest__job1", "trigger_dag_id": "facefusion_swap_batch", "conf": {"output_uri": OUTPUT}},
        {
            "trigger_run_id": "ingest__job2",
            "trigger_dag_id": "facefusion_swap_batch",
            "conf": {"output_uri": "s3://o/2"},
        },
    ]
    jobs = started_jobs(scan_value, {("facefusion_swap_batch", "ingest__job1"): "success"})
    job = {"kind": "started", "label": "in/a.mp4", "attempt": 1, "detail": ""}
    report = {"input_prefix": "s3://videos/in/", "mode": "videos", "jobs": [job, job]}
    page = ingest_page_html("success", ingest_line("success", ("success",), report), jobs)
    assert '<p id="progress">Scanned s3://videos/in/ (videos): 2 started.</p>' in page
    assert 'href="/dags/facefusion_swap_batch/runs/ingest__job1">ingest__job1</a>' in page
    assert f"<td>{OUTPUT}</td>" in page and "<td>success</td>" in page and "<td>not started yet</td>" in page
    assert REFRESH not in page
    assert REFRESH in ingest_page_html("running", ingest_line("running", ("running",), None), [])
    assert ingest_line("running", ("running",), None) == "Scanning: looking for new jobs."
    assert ingest_line("success", ("skipped",), None).startswith("Nothing scanned: the ingestion is not configured")
    assert "No run started: nothing new to ingest." in ingest_page_html("success", "Scanned ...", [])


def test_the_tab_is_on_every_run_page() -> None:
    (view,) = FaceFusionPlugin.external_views
    assert (view["name"], view["destination"], view["href"]) == (
        "Output",
        "dag_run",
        "/facefusion/runs/{DAG_ID}/{RUN_ID}",
    )


def test_the_ingestion_dag_says_whether_it_is_configured() -> None:
    assert ingest_description({}, None).startswith("Not configured: set the Variable facefusion_ingest")
    assert ingest_tags({}) == ["facefusion", "not configured"]
    settings = {"mode": "faces", "input_prefix": "s3://f/in/", "output_prefix": "s3://f/out/"}
    assert ingest_description(settings, "*/15 * * * *") == (
        "Configured: new faces from s3://f/in/ to s3://f/out/; scans on schedule */15 * * * *."
    )
    assert ingest_tags(settings) == ["facefusion", "ingest faces"]
