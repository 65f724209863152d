"""``cleanup``: release this run's hold on the shared work, remove the work when no live run needs it, and publish
the output as an Airflow Asset."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Asset, BaseOperator, Context, XComArg
from airflow.sdk.exceptions import AirflowException
from pydantic import JsonValue

from facefusion_provider.exceptions import FaceFusionError
from facefusion_provider.hooks import run_metrics
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.settings import load_settings
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.records import OutputMarker

logger = logging.getLogger(__name__)

# One asset for every output of the DAG; each event's extra names the file (output_uri) and the work that made it.
SWAP_OUTPUT_ASSET = Asset(name="facefusion_swap_output", uri="x-facefusion://facefusion_swap/output")


@dataclass(frozen=True)
class KeepWorkForRetry:
    """A task's ``on_failure_callback``: the failed run keeps its work for a retry or a clear from the UI, for
    ``[facefusion] keep_failed_work_hours`` (its lease becomes ``kept``: docs/protocol.md, "Failed runs").

    A callback has no templated fields: the DAG passes validate's XComs as XComArgs, resolved when the callback runs
    (in the failed task, or in the DAG processor for a task that died).

    :param work_uri: the shared work folder, from ``validate``.
    :param run_key: this run's lease key, from ``validate``.
    """

    work_uri: XComArg
    run_key: XComArg

    def __call__(self, context: Context) -> None:
        work_uri, run_key = self.work_uri.resolve(context), self.run_key.resolve(context)
        if not work_uri or not run_key:
            return  # validate failed: no lease was written
        hours = load_settings().keep_failed_work.total_seconds()
        try:
            FaceFusionStorageHook().keep_for_retry(work_uri, run_key, hours)
        except FaceFusionError as error:  # a callback must not fail: the lease then lapses after its own TTL
            logger.warning("Could not keep work %s for a retry: %s", work_uri, error)


class CleanupWorkOperator(BaseOperator):
    """Once this run's output carries its marker: release the run's lease on ``work_uri``, remove the work unless
    another run's lease is live (docs/protocol.md: whoever holds it, another Airflow or a CLI run), then record an event on
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
        now = datetime.now(UTC)
        holders = hook.release_work(self.work_uri, self.run_key)
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


def _report_run(marker: OutputMarker, context: Context, now: datetime) -> None:
    """The run's figures from its output's marker; fps counts from the run's start, queueing and reuse included."""
    tags = run_metrics.run_tags(context["ti"])
    if "total_s" in marker.timings:  # a marker from before merges recorded their time has none
        run_metrics.merge_seconds(marker.timings["total_s"], tags=tags)
    run_metrics.output_bytes(marker.size, tags=tags)
    started = context["dag_run"].start_date
    if started is not None:
        run_metrics.run_fps(marker.frame_count, (now - started).total_seconds(), tags=tags)
