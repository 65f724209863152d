"""``plan``: the spans of a prepared work, the input of the mapped ``swap_span`` tasks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from facefusion_provider.hooks import run_metrics
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.commands import fail_on_bad_input
from facefusion_provider.settings import load_settings
from facefusion_provider.work.records import WorkSpec
from facefusion_provider.work.span_plan import plan_spans


def span_list(spec: WorkSpec, wave: int) -> list[dict[str, Any]]:
    """One dict per span: ``{"index": 2, "first": 64, "last": 96, "start": 16384, "end": 24576,
    "label": "frames 16384-24575 (32 segments)"}``."""
    return [{**span.model_dump(), "label": span.label} for span in plan_spans(spec.segments, wave)]


# The one span of a run whose output is published already (a repeat, or a clear after cleanup removed the work).
PUBLISHED_SPAN: dict[str, Any] = {"index": 0, "first": 0, "last": 0, "start": 0, "end": 0, "label": "output published"}


class PlanSpansOperator(BaseOperator):
    """Read ``work.json`` (written by ``prepare``) and return its spans: ``[facefusion] span_wave`` of them (default
    ``max_active_spans_per_run``; the DAG gives one with ``span_workers = standing``), each a run of consecutive
    segments. When validate found this run's output done there is nothing to plan (the work may be gone): one span
    that has nothing to do. Reports how many segments this run finds committed already (reused) and how many it has to
    compute (launched).

    :param work_uri: the shared work folder, from ``validate``.
    :param output_done: whether ``validate`` found this run's output done already.
    :param wave: spans per run; default from the settings.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, "work_uri", "output_done")

    def __init__(self, *, work_uri: str, output_done: bool = False, wave: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.work_uri = work_uri
        self.output_done = output_done
        self.wave = wave

    def execute(self, context: Context) -> list[dict[str, Any]]:
        settings = load_settings()
        wave = self.wave or settings.span_wave or settings.max_active_spans_per_run
        hook = FaceFusionStorageHook()
        if self.output_done:
            self.log.info("Validate found this work's output done: nothing to plan")
            return [PUBLISHED_SPAN]
        with fail_on_bad_input(context):
            spec = hook.read_work(self.work_uri)
        spans = span_list(spec, wave)
        committed = hook.committed_segments(self.work_uri)
        reused = sum(segment.index in committed for segment in spec.segments)
        self.log.info(
            "Work %s: %d frames in %d segments (%d committed already), %d spans",
            spec.work_id,
            spec.frame_end - spec.frame_start,
            len(spec.segments),
            reused,
            len(spans),
        )
        run_metrics.segments(
            reused=reused, launched=len(spec.segments) - reused, tags=run_metrics.run_tags(context["ti"])
        )
        return spans
