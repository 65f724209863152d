"""The run's Output tab: where the run is, in words, and once done its preview and its video; what the ingestion
DAG's page says about its configuration."""

from __future__ import annotations

from facefusion_provider.airflow_plugin import FaceFusionPlugin
from facefusion_provider.airflow_plugin.run_view import NOT_OURS, RunProgress, progress_line, run_page_html
from facefusion_provider.operators.ingest_summary import ingest_description, ingest_tags

VIDEO, PREVIEW = "/facefusion/outputs/d/r/video", "/facefusion/outputs/d/r/preview"


def _progress(**values: object) -> RunProgress:
    fields: dict[str, object] = {"accepted": True, "done": False, "prepared": True, "committed": 0, "total": 0}
    return RunProgress(**{**fields, **values})  # type: ignore[arg-type]


def test_a_running_run_says_how_many_segments_are_saved_and_reloads_itself() -> None:
    page = run_page_html(_progress(committed=12, total=32), VIDEO, PREVIEW)
    assert "Swapping: 12 of 32 segments saved (37%)." in page
    assert 'http-equiv="refresh"' in page and PREVIEW not in page  # no preview before the output exists
    assert progress_line(_progress(prepared=False)) == "Preparing: the video is being read."


def test_a_finished_run_shows_its_preview_and_links_its_video() -> None:
    page = run_page_html(_progress(done=True), VIDEO, PREVIEW)
    assert "Done: the output video is ready." in page and "refresh" not in page
    assert f'<img id="preview" src="{PREVIEW}"' in page and f'href="{VIDEO}"' in page


def test_a_run_without_accepted_inputs_or_of_another_dag_says_so() -> None:
    assert "not been accepted" in progress_line(_progress(accepted=False))
    assert progress_line(_progress(accepted=False, problem=NOT_OURS)) == NOT_OURS
    assert progress_line(_progress(problem="ClientError: access denied")).startswith("Progress unknown: ClientError")


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
