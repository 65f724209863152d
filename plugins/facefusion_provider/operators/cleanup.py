"""``cleanup``: release this run's hold on the shared work, remove the work when no live run needs it, and publish
the output as an Airflow Asset."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Asset, BaseOperator, Context
from airflow.sdk.exceptions import AirflowException
from pydantic import JsonValue

from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.job.layout import WorkLayout
from facefusion_provider.job.records import OutputMarker, RunLease
from facefusion_provider.operators import run_metrics
from facefusion_provider.settings import load_settings

# One asset for every output of the DAG; each event's extra names the file (output_uri) and the work that made it.
SWAP_OUTPUT_ASSET = Asset(name="facefusion_swap_output", uri="x-facefusion://facefusion_swap/output")
LIVE_RUN_STATES = frozenset({"queued", "running"})


def lease_is_live(lease: RunLease, state: str | None, now: datetime, keep_failed: timedelta) -> bool:
    """Whether the run that holds ``lease`` may still need the work: queued or running, or failed recently enough
    that a clear from the UI would resume it. A finished run's cleanup releases its own lease; a run Airflow no
    longer knows needs nothing."""
    if state in LIVE_RUN_STATES:
        return True
    return state == "failed" and now - lease.created_at < keep_failed


class CleanupJobOperator(BaseOperator):
    """Once this run's output carries its marker: release the run's lease on ``work_uri``, remove the work unless a
    live run holds a lease (or a run failed within ``[facefusion] keep_failed_work_hours``), then record an event on
    each outlet asset with ``{"output_uri", "work_id", "frame_count", "sha256"}`` as its extra. Reports the run's
    merge seconds, output bytes and fps (its frames over the seconds since the run started).

    A cleanup repeated after the work is gone succeeds from the output's marker alone.

    :param work_uri: the shared work folder.
    :param output_uri: this run's output.
    :param run_key: this run's lease on the work, from ``validate``.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, "work_uri", "output_uri", "run_key")

    def __init__(self, *, work_uri: str, output_uri: str, run_key: str, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [SWAP_OUTPUT_ASSET])
        super().__init__(**kwargs)
        self.work_uri = work_uri
        self.output_uri = output_uri
        self.run_key = run_key

    def execute(self, context: Context) -> dict[str, JsonValue]:
        hook = FaceFusionStorageHook()
        work_id = WorkLayout(self.work_uri).work_id
        marker = hook.output_done(self.output_uri, work_id)
        if marker is None:
            # Retryable: an object store may show the output a moment after merge wrote it.
            raise AirflowException(f"{self.output_uri} carries no marker of work {work_id}: keeping {self.work_uri}")
        keep_failed = load_settings().keep_failed_work
        ti, now = context["ti"], datetime.now(UTC)

        def is_live(lease: RunLease) -> bool:
            if lease.dag_id == "?":  # unreadable: keep the work
                return True
            if not lease.dag_id:  # a `facefusion-worker run` process: Airflow cannot tell whether it still runs
                return now - lease.created_at < keep_failed
            state = self._run_state(ti, lease)
            return lease_is_live(lease, state, now, keep_failed)

        holders = hook.release_work(self.work_uri, self.run_key, is_live)
        if holders:
            self.log.info("Kept %s: runs %s still use it", self.work_uri, ", ".join(holders))
        else:
            self.log.info("Removed %s (no other run uses it)", self.work_uri)
        self.log.info("Output %s: %d frames, sha256 %s", self.output_uri, marker.frame_count, marker.sha256)
        _report_run(marker, context, now)
        extra: dict[str, JsonValue] = {
            "output_uri": self.output_uri,
            "work_id": work_id,
            "frame_count": marker.frame_count,
            "sha256": marker.sha256,
        }
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = extra
        return extra

    @staticmethod
    def _run_state(ti: Any, lease: RunLease) -> str | None:
        """The Airflow state of the lease's run, or None when Airflow has no such run (deleted, or not a DAG run)."""
        if ti.get_dr_count(dag_id=lease.dag_id, run_ids=[lease.run_id]) == 0:
            return None
        raw = ti.get_dagrun_state(dag_id=lease.dag_id, run_id=lease.run_id)
        return str(getattr(raw, "value", raw))  # the Task SDK's enum prints as "DagRunState.SUCCESS"


def _report_run(marker: OutputMarker, context: Context, now: datetime) -> None:
    """The run's figures from its output's marker; fps counts from the run's start, queueing and reuse included."""
    tags = run_metrics.run_tags(context["ti"])
    if "total_s" in marker.timings:  # a marker from before merges recorded their time has none
        run_metrics.merge_seconds(marker.timings["total_s"], tags=tags)
    run_metrics.output_bytes(marker.size, tags=tags)
    started = context["dag_run"].start_date
    if started is not None:
        run_metrics.run_fps(marker.frame_count, (now - started).total_seconds(), tags=tags)
