"""What a ``swap-span`` operator knows on every backend: the span of ``plan``'s list it works on, how it records the
span's progress in Airflow's task state store, and (``[facefusion] span_workers = standing``) how it waits for the
standing workers instead of starting one."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.job.ids import run_key
from facefusion_provider.job.progress import PROGRESS_PREFIX
from facefusion_provider.operators.commands import completed_work, fail_on_bad_input, span_worker_args
from facefusion_provider.settings import load_settings
from facefusion_provider.triggers.spans import SpanCommittedTrigger

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger

logger = logging.getLogger(__name__)  # an operator's own log shows in its task log like this one

PROGRESS_KEY = "progress"  # the task state store key of a span's progress


class SwapSpanMixin:
    """The span of a mapped ``swap_span`` task, ``{"index": 2, "first": 64, "last": 96, "start": 16384,
    "end": 24576, "label": "frames 16384-24575 (32 segments)"}``, and this run's ``target_uri``.

    Listed before the backend's worker operator, so its ``span`` and ``worker_arguments`` replace the worker
    operator's; each operator keeps its own ``__init__`` (Airflow applies ``default_args`` only to an ``__init__`` a
    class defines).
    """

    span: dict[str, Any]
    target_uri: str
    work_uri: str
    output_uri: str

    if TYPE_CHECKING:

        def defer(
            self,
            *,
            trigger: BaseTrigger,
            method_name: str,
            kwargs: dict[str, Any] | None = None,
            timeout: timedelta | float | None = None,
        ) -> NoReturn: ...

    def execute(self, context: Context) -> Any:
        """With standing workers, wait (deferred: no pool slot, no process) until the span is committed; else the
        backend's operator starts a worker for the span."""
        if load_settings().span_workers != "standing":
            return super().execute(context)  # type: ignore[misc]
        hook = FaceFusionStorageHook()
        with fail_on_bad_input(context):
            reason = completed_work(hook, "swap-span", self.work_uri, self.output_uri, self.span)
            if not reason:
                self.before_launch(hook, self.work_uri, context)
        if reason:
            logger.info("Nothing to do: %s", reason)
            return None
        logger.info("Standing workers work this span ([facefusion] span_workers = standing): waiting, deferred")
        first, last = int(self.span["first"]), int(self.span["last"])
        key = run_key(context["ti"].dag_id, context["ti"].run_id)  # the lease validate wrote, renewed while waiting
        trigger = SpanCommittedTrigger(self.work_uri, first, last, run_key=key)
        self.defer(trigger=trigger, method_name="span_committed")

    def span_committed(self, context: Context, event: Mapping[str, Any]) -> None:
        if event.get("status") != "committed":
            raise AirflowException(str(event.get("message") or event))  # retried: the workers may be starting
        segments = int(event["segments"])
        logger.info("Span %s: all %d segments committed by the standing workers", self.span["index"], segments)
        self.record_progress(context, {"segments_committed": segments, "segments_total": segments})

    def worker_arguments(self) -> list[str]:
        return span_worker_args(self.target_uri, self.span)

    def before_launch(self, hook: FaceFusionStorageHook, work_uri: str, context: Mapping[str, Any]) -> None:
        """Say where this try starts (the markers in storage are the truth) and record it as the span's progress."""
        segments = range(int(self.span["first"]), int(self.span["last"]))
        committed = hook.committed_segments(work_uri)
        done = [index for index in segments if index in committed]
        first_left = next((index for index in segments if index not in committed), None)
        previous = _store(context).get(PROGRESS_KEY) if _store(context) is not None else None
        if previous:
            logger.info("Progress recorded by the previous try: %s", json.dumps(previous, sort_keys=True))
        logger.info(
            "Span %s (%s): %d of %d segments committed; starting at segment %s",
            self.span["index"],
            self.span.get("label", ""),
            len(done),
            len(segments),
            first_left,
        )
        self.record_progress(context, {"segments_committed": len(done), "segments_total": len(segments)})

    def on_worker_line(self, context: Mapping[str, Any], line: str) -> None:
        """The worker writes ``facefusion.progress {json}`` at each commit: keep the latest in the task state store."""
        position = line.find(PROGRESS_PREFIX)
        if position < 0:
            return
        try:
            progress = json.loads(line[position + len(PROGRESS_PREFIX) :])
        except ValueError:
            return
        if isinstance(progress, dict):
            self.record_progress(context, progress)

    def record_progress(self, context: Mapping[str, Any], progress: Mapping[str, Any]) -> None:
        store = _store(context)
        if store is not None:
            store.set(PROGRESS_KEY, {**progress, "updated_at": datetime.now(UTC).isoformat(timespec="seconds")})


def _store(context: Mapping[str, Any]) -> Any:
    """``context["task_state_store"]`` (Airflow 3.3); None where a context has none (an older Airflow, a unit test)."""
    return context.get("task_state_store")
