"""What a ``swap-span`` operator knows on every backend: the span of ``plan``'s list it works on, and how it records
the span's progress in Airflow's task state store."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.job.progress import PROGRESS_PREFIX
from facefusion_provider.operators.commands import span_worker_args

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
