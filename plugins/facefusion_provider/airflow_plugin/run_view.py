"""The run's "Output" tab: how far the run is (segments saved of all), its preview picture and its output video.

A plugin external view (``destination: dag_run``) that Airflow's UI shows as a tab of every run's page, in a
same-origin frame: this route of the outputs app (same access check: the user's read access to the DAG's runs). It
reads what the run's ``validate`` accepted (its ``work_uri`` and ``output_uri`` XComs), the work's ``work.json`` and
segment markers, and the output's marker; the picture and the video come from the outputs view (``outputs.py``). While
the run works, the page reloads itself every ``REFRESH_SECONDS``.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from facefusion_provider.airflow_plugin.trigger_errors import DAG_IDS

log = logging.getLogger(__name__)

REFRESH_SECONDS = 10
VALIDATE_TASK_ID = "validate"
RUN_VIEW_NAME = "Output"  # the tab's name on the run page
NOT_OURS = "This run is not a face swap run: it has no output here."


@dataclass(frozen=True)
class RunProgress:
    """What the run's work shows now."""

    accepted: bool  # validate accepted the inputs
    done: bool  # the output exists, with this work's marker
    prepared: bool
    committed: int
    total: int
    problem: str = ""  # storage could not be read


def progress_line(progress: RunProgress) -> str:
    """One sentence a person reads: where the run is."""
    if progress.problem == NOT_OURS:
        return NOT_OURS
    if progress.problem:
        return f"Progress unknown: {progress.problem}"
    if not progress.accepted:
        return "Nothing yet: the run's inputs have not been accepted (see the run's note when it failed)."
    if progress.done:
        return "Done: the output video is ready."
    if not progress.prepared:
        return "Preparing: the video is being read."
    percent = 100 * progress.committed // progress.total if progress.total else 0
    return f"Swapping: {progress.committed} of {progress.total} segments saved ({percent}%)."


def run_page_html(progress: RunProgress, video_url: str, preview_url: str) -> str:
    """The tab's page: the progress line, then (once done) the link to the video and the preview picture."""
    refresh = (
        "" if progress.done or not progress.accepted else f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
    )
    parts = [f'<p id="progress">{html.escape(progress_line(progress))}</p>']
    if progress.done:
        parts.append(
            f'<p><a id="output-video" href="{html.escape(video_url)}" target="_blank">Open the output video</a></p>'
        )
        parts.append(
            f'<figure><img id="preview" src="{html.escape(preview_url)}" alt="Preview of the output" '
            'style="max-width:100%"><figcaption>Top row: original frames; bottom row: the same frames swapped.'
            "</figcaption></figure>"
        )
    style = "body{font-family:sans-serif;margin:1rem;color:#222}@media(prefers-color-scheme:dark){body{color:#eee}}"
    return (
        f'<!doctype html><html><head><meta charset="utf-8">{refresh}<title>{RUN_VIEW_NAME}</title>'
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"
    )


def validate_xcom(dag_id: str, run_id: str, key: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(run_id=run_id, key=key, dag_ids=dag_id, task_ids=VALIDATE_TASK_ID, limit=1)
        row = session.scalars(query).first()
        return XComModel.deserialize_value(row) if row is not None else None


def run_progress(dag_id: str, run_id: str) -> RunProgress:
    """The run's progress from its validated work and output (never from the request)."""
    from facefusion_provider.hooks.storage import FaceFusionStorageHook
    from facefusion_provider.work.layout import WorkLayout

    if dag_id not in DAG_IDS:
        return RunProgress(accepted=False, done=False, prepared=False, committed=0, total=0, problem=NOT_OURS)
    work_uri, output_uri = validate_xcom(dag_id, run_id, "work_uri"), validate_xcom(dag_id, run_id, "output_uri")
    if not isinstance(work_uri, str) or not isinstance(output_uri, str):
        return RunProgress(accepted=False, done=False, prepared=False, committed=0, total=0)
    hook = FaceFusionStorageHook()
    try:
        if hook.output_done(output_uri, WorkLayout(work_uri).work_id) is not None:
            return RunProgress(accepted=True, done=True, prepared=True, committed=0, total=0)
        if not hook.is_prepared(work_uri):
            return RunProgress(accepted=True, done=False, prepared=False, committed=0, total=0)
        total = len(hook.read_work(work_uri).segments)
        committed = len(hook.committed_segments(work_uri))
    except Exception as error:  # a view that explains beats a 500: the storage may be unreachable from here
        log.warning("progress of %s %s: %s", dag_id, run_id, error)
        return RunProgress(True, False, False, 0, 0, problem=f"{type(error).__name__}: {error}")
    return RunProgress(accepted=True, done=False, prepared=True, committed=min(committed, total), total=total)


router = APIRouter()


@router.get(
    "/runs/{dag_id}/{run_id}",
    response_class=HTMLResponse,
    dependencies=[Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))],
)
def run_page(dag_id: str, run_id: str) -> HTMLResponse:
    """The run's Output tab."""
    from airflow.configuration import conf

    from facefusion_provider.airflow_plugin import output_link_path

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return HTMLResponse(
        run_page_html(
            run_progress(dag_id, run_id),
            base + output_link_path(dag_id, run_id, "video"),
            base + output_link_path(dag_id, run_id, "preview"),
        )
    )
