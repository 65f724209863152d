"""The run's "Output" tab: where the run's output stands, its preview picture and its video; on an ingestion run, the
runs it started.

A plugin external view (``destination: dag_run``) that Airflow's UI shows as a tab of every run's page (Airflow 3.3
cannot show it on some DAGs only: see docs/ui.md), in a same-origin frame sandboxed without ``allow-popups`` or
``allow-top-navigation``: this route of the outputs app (same access check: the user's read access to the DAG's runs).
What it says comes from the run's task states and XComs (Airflow's database) and the output's marker in storage
together (``run_output.py``); the picture and the video come from the outputs view (``outputs.py``), whose links
download or open in the frame itself (a new window is blocked there). While the run works, the page reloads itself
every ``REFRESH_SECONDS``; once Airflow says the run ended, it says how and stops.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from facefusion_provider.airflow_plugin.run_output import (
    FINAL_STAGES,
    FINISHED_RUN_STATES,
    DagTasks,
    RunFacts,
    Stage,
    StoredOutput,
    output_stage,
    provider_tasks,
    stage_line,
)
from facefusion_provider.links.output import output_link_path
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.run_inputs import is_image_uri

log = logging.getLogger(__name__)

REFRESH_SECONDS = 10
RUN_VIEW_NAME = "Output"  # the tab's name on the run page
NOT_OURS = "This DAG's runs write no face swap output: there is nothing to show here."
WORK_KEY, OUTPUT_KEY = "work_uri", "output_uri"  # validate's XComs
SCAN_REPORT_KEY = "report"  # scan's summary of the jobs it found
STYLE = (
    "body{font-family:sans-serif;margin:1rem;color:#222}@media(prefers-color-scheme:dark){body{color:#eee}"
    "a{color:#8cf}}table{border-collapse:collapse}td,th{padding:.2rem .8rem .2rem 0;text-align:left}"
)
# The frame may not navigate Airflow's page (no allow-top-navigation): a link to another run's page is handed to the
# UI's own router (same origin), as if the user had followed a link of the UI; outside Airflow's page it opens here.
RUN_LINK_SCRIPT = """<script>
document.addEventListener("click", function (event) {
  var link = event.target.closest("a.run-link");
  if (!link || window.parent === window || event.button !== 0 || event.ctrlKey || event.metaKey) return;
  try {
    var history = window.parent.history, idx = ((history.state || {}).idx || 0) + 1;
    history.pushState({usr: null, key: Math.random().toString(36).slice(2, 10), idx: idx}, "", link.href);
    window.parent.dispatchEvent(new PopStateEvent("popstate", {state: history.state}));
    event.preventDefault();
  } catch (error) {}
});
</script>"""


def ui_base() -> str:
    """``[api] base_url`` without its trailing slash ("" when unset: links relative to the API server's root)."""
    from airflow.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/")


def run_page_url(dag_id: str, run_id: str) -> str:
    """The Airflow UI's page of a run (the React router's path; its run ids keep ``:`` and ``+``)."""
    return f"{ui_base()}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe=':+')}"


def run_link(dag_id: str, run_id: str) -> str:
    return (
        f'<a class="run-link" href="{html.escape(run_page_url(dag_id, run_id))}">{html.escape(run_id)}</a>'
        f" of {html.escape(dag_id)}"
    )


def page(body: str, *, refresh: bool) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return (
        f'<!doctype html><html><head><meta charset="utf-8">{meta}<title>{RUN_VIEW_NAME}</title>'
        f"<style>{STYLE}</style></head><body>{body}{RUN_LINK_SCRIPT}</body></html>"
    )


def run_page_html(
    run: RunFacts, stored: StoredOutput | None, segments: tuple[int, int] | None, video_url: str, preview_url: str
) -> str:
    """The tab of a run with an output: one line where it stands, then (once done) the video's download link and
    the preview picture (a link that opens it whole in the frame); a replaced output names the run that replaced it."""
    stage = output_stage(run, stored)
    parts = [f'<p id="progress">{html.escape(stage_line(stage, run, stored, segments))}</p>']
    marker = stored.marker if stored is not None else None
    if stage is Stage.REPLACED and marker is not None and marker.run is not None and marker.run.kind == "airflow":
        parts.append(
            f'<p id="replaced-by">The run that replaced it: {run_link(marker.run.dag_id, marker.run.run_id)}.</p>'
        )
    if stage is Stage.DONE:
        name = html.escape((run.output_uri or "").rsplit("/", 1)[-1])
        image = is_image_uri(run.output_uri or "")  # an image target's output
        caption = (
            "Left: the original image; right: the output."
            if image
            else "Top row: original frames; bottom row: the same frames swapped."
        )
        parts.append(
            f'<p><a id="output-video" href="{html.escape(video_url)}" download="{name}">Download the output '
            f"{'image' if image else 'video'}</a> ({name})</p>"
        )
        parts.append(
            f'<figure><a id="preview-link" href="{html.escape(preview_url)}" title="Open the preview">'
            f'<img id="preview" src="{html.escape(preview_url)}" alt="Preview of the output" style="max-width:100%">'
            f"</a><figcaption>{caption} Click to open it whole.</figcaption></figure>"
        )
    return page("".join(parts), refresh=stage not in FINAL_STAGES)


@dataclass(frozen=True)
class StartedJob:
    """A swap run an ingestion run asked for: its output, and the run as Airflow has it now (None: not started)."""

    output_uri: str
    dag_id: str
    run_id: str
    run_state: str | None


def started_jobs(scan_value: Any, run_states: Mapping[tuple[str, str], str]) -> list[StartedJob]:
    """The runs in the scan's return value (``[{"trigger_run_id", "trigger_dag_id", "conf"}]``), with their states."""
    jobs = []
    for item in scan_value if isinstance(scan_value, list) else []:
        if not isinstance(item, dict) or not item.get("trigger_run_id"):
            continue
        dag_id, run_id = str(item.get("trigger_dag_id") or ""), str(item["trigger_run_id"])
        output = str((item.get("conf") or {}).get("output_uri") or "")
        jobs.append(StartedJob(output, dag_id, run_id, run_states.get((dag_id, run_id))))
    return jobs


def ingest_line(run_state: str, scan_states: Sequence[str | None], report: Any) -> str:
    """Where an ingestion run stands: scanning, the scan's counts, or why it found nothing."""
    from facefusion_provider.operators.ingest import report_lines

    if "failed" in scan_states or "upstream_failed" in scan_states:
        return "The scan failed: its task's log says why."
    if "skipped" in scan_states:
        return "Nothing scanned: the ingestion is not configured (the DAG's description says how)."
    if isinstance(report, dict):
        return f"Scanned {report_lines(report)[0]}."
    if run_state in FINISHED_RUN_STATES:
        return "The run ended without a scan report: see the scan task's log."
    return "Scanning: looking for new jobs."


def ingest_page_html(run_state: str, line: str, jobs: Sequence[StartedJob]) -> str:
    """An ingestion run's tab: what its scan found, and each swap run it started, linked, with its state."""
    parts = [f'<p id="progress">{html.escape(line)}</p>']
    if jobs:
        rows = "".join(
            f"<tr><td>{html.escape(job.output_uri)}</td><td>{run_link(job.dag_id, job.run_id)}</td>"
            f"<td>{html.escape(job.run_state or 'not started yet')}</td></tr>"
            for job in jobs
        )
        parts.append(
            '<table id="jobs"><caption>Runs this scan started</caption>'
            f"<tr><th>Output</th><th>Run</th><th>State</th></tr>{rows}</table>"
        )
    elif run_state in FINISHED_RUN_STATES:
        parts.append('<p id="jobs">No run started: nothing new to ingest.</p>')
    return page("".join(parts), refresh=run_state not in FINISHED_RUN_STATES)


def dag_tasks(dag_id: str) -> DagTasks:
    """The provider's tasks of the DAG as last parsed (none when Airflow has no serialized DAG of that id)."""
    from airflow.models.serialized_dag import SerializedDagModel

    dag = SerializedDagModel.get_dag(dag_id)
    return provider_tasks(list(dag.tasks)) if dag is not None else DagTasks()


def task_xcoms(session: Any, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    """``{key: value}`` of the XComs a task of the run pushed (an unmapped task's)."""
    from airflow.models.xcom import XComModel

    rows: list[Any] = list(session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id, task_ids=task_id)))
    return {row.key: XComModel.deserialize_value(row) for row in rows}


def read_run_facts(dag_id: str, run_id: str) -> RunFacts | None:
    """The run's state, its task instances' states and validate's XComs; None when there is no such run."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    tasks = dag_tasks(dag_id)
    with create_session() as session:
        dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if dag_run is None:
            return None
        run_state, note = str(dag_run.state or "queued"), str(dag_run.note or "")
        task_states: dict[str, tuple[str | None, ...]] = {}
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.state).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
            )
        )
        for task_id, state in rows:
            task_states[task_id] = (*task_states.get(task_id, ()), None if state is None else str(state))
        values = task_xcoms(session, dag_id, run_id, tasks.validate) if tasks.validate else {}
    work_uri, output_uri = values.get(WORK_KEY), values.get(OUTPUT_KEY)
    accepted = isinstance(work_uri, str) and bool(work_uri) and isinstance(output_uri, str) and bool(output_uri)
    return RunFacts(
        run_id=run_id,
        run_state=run_state,
        task_states=task_states,
        tasks=tasks,
        work_id=WorkLayout(str(work_uri)).work_id if accepted else None,
        work_uri=str(work_uri) if accepted else None,
        output_uri=str(output_uri) if accepted else None,
        note=note,
    )


def read_stored_output(run: RunFacts) -> StoredOutput | None:
    """The marker beside the run's output and whether the output exists (None before validate accepted it)."""
    from facefusion_provider.hooks.storage import FaceFusionStorageHook

    if run.output_uri is None:
        return None
    hook = FaceFusionStorageHook()
    return StoredOutput(hook.output_marker(run.output_uri), hook.exists(run.output_uri))


def segment_counts(run: RunFacts) -> tuple[int, int]:
    """(committed, total) segments of the run's work (read only while it swaps)."""
    from facefusion_provider.hooks.storage import FaceFusionStorageHook

    assert run.work_uri is not None
    hook = FaceFusionStorageHook()
    total = len(hook.read_work(run.work_uri).segments)
    return min(len(hook.committed_segments(run.work_uri)), total), total


def swap_run_page(dag_id: str, run: RunFacts) -> str:

    try:
        stored = read_stored_output(run)
        stage = output_stage(run, stored)
        segments = segment_counts(run) if stage is Stage.SWAPPING else None
    except Exception as error:  # a view that explains beats a 500: the storage may be unreachable from here
        log.warning("output of %s %s: %s", dag_id, run.run_id, error)
        problem = f"Progress unknown: the storage could not be read ({type(error).__name__}: {error})."
        return page(f'<p id="progress">{html.escape(problem)}</p>', refresh=True)
    base = ui_base()
    return run_page_html(
        run,
        stored,
        segments,
        base + output_link_path(dag_id, run.run_id, "video"),
        base + output_link_path(dag_id, run.run_id, "preview"),
    )


def ingest_run_page(dag_id: str, run: RunFacts) -> str:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select, tuple_

    with create_session() as session:
        values = task_xcoms(session, dag_id, run.run_id, run.tasks.scan)
        asked = started_jobs(values.get("return_value"), {})
        pairs = [(job.dag_id, job.run_id) for job in asked]
        states: dict[tuple[str, str], str] = {}
        if pairs:
            found = session.execute(
                select(DagRun.dag_id, DagRun.run_id, DagRun.state).where(
                    tuple_(DagRun.dag_id, DagRun.run_id).in_(pairs)
                )
            )
            states = {(row[0], row[1]): str(row[2]) for row in found}
    line = ingest_line(run.run_state, run.task_states.get(run.tasks.scan, ()), values.get(SCAN_REPORT_KEY))
    return ingest_page_html(run.run_state, line, started_jobs(values.get("return_value"), states))


router = APIRouter()


@router.get(
    "/runs/{dag_id}/{run_id}",
    response_class=HTMLResponse,
    dependencies=[Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))],
)
def run_tab(dag_id: str, run_id: str) -> HTMLResponse:
    """The run's Output tab."""
    run = read_run_facts(dag_id, run_id)
    if run is None:
        missing = f'<p id="progress">No run {html.escape(run_id)} of {html.escape(dag_id)}.</p>'
        return HTMLResponse(page(missing, refresh=False), status_code=404)
    if run.tasks.has_output:
        return HTMLResponse(swap_run_page(dag_id, run))
    if run.tasks.scan:
        return HTMLResponse(ingest_run_page(dag_id, run))
    return HTMLResponse(page(f'<p id="progress">{NOT_OURS}</p>', refresh=False))
