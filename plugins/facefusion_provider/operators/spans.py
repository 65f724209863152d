"""What every span task does before its work, on every backend: whether there is anything to do, holding the run's
work again, and the span's progress in Airflow's task state store (the standing workers' wait:
``sensors.span_committed``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from facefusion_provider.contract import progress_in_line
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.commands import (
    WorkerCall,
    completed_work,
    fail_on_bad_input,
    span_segments,
)
from facefusion_provider.work.records import RunLease

logger = logging.getLogger(__name__)  # an operator's own log shows in its task log like this one

PROGRESS_KEY = "progress"  # the task state store key of a span's progress


def nothing_to_do(
    hook: FaceFusionStorageHook,
    call: WorkerCall,
    context: Mapping[str, Any],
    committed: frozenset[int] | None = None,
) -> str | None:
    """Why the call has nothing to do, or None; a span about to start says where it resumes. ``committed``: the work's
    committed segments when the caller has listed them already, for a call it passed through ``decided_for_this_try``
    (otherwise both happen here, once). Bad input or a broken work found here fails the task at once."""
    with fail_on_bad_input(context):
        if committed is None:
            call = decided_for_this_try(hook, call, context)
            committed = span_committed_segments(hook, call)
        reason = completed_work(hook, call, committed)
        if reason is None:
            hold_run_again(hook, call)
        if reason is None and call.span is not None:
            log_span_start(committed, call.span, context)
    return reason


def decided_for_this_try(hook: FaceFusionStorageHook, call: WorkerCall, context: Mapping[str, Any]) -> WorkerCall:
    """``call`` with validate's "output done" for the first try of prepare, plan and the spans. The merge and every
    later try (a retry, or a task cleared after the run published) ask storage again: standing workers publish a run's
    output as they commit its last segment, and a cleared task runs after the run published."""
    first_try = getattr(context.get("ti"), "try_number", 1) <= 1
    if call.output_done or (first_try and call.command != "merge"):
        return call
    return replace(call, output_done=hook.output_done(call.output_uri, call.work_id) is not None)


def span_committed_segments(hook: FaceFusionStorageHook, call: WorkerCall) -> frozenset[int]:
    """The work's committed segments, listed only where a span that may still run needs them."""
    if call.span is None or call.output_done:
        return frozenset()
    return hook.committed_segments(call.work_uri)


def hold_run_again(hook: FaceFusionStorageHook, call: WorkerCall) -> None:
    """Every task of a run holds the work again as it starts (docs/protocol.md, "Queued Airflow runs"): a run queued
    past its lease's TTL, or cleared after it failed (its lease ``kept``), holds it as an active run again."""
    if call.run_key and call.run_lease:
        hook.hold_work(call.work_uri, call.run_key, RunLease.model_validate({**call.run_lease, "state": "active"}))


def log_span_start(committed: frozenset[int], span: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    """Say where this try starts (the markers in storage are the truth) and record it as the span's progress."""
    segments = span_segments(span)
    done = [index for index in segments if index in committed]
    first_left = next((index for index in segments if index not in committed), None)
    store = _store(context)
    previous = store.get(PROGRESS_KEY) if store is not None else None
    if previous:
        logger.info("Progress recorded by the previous try: %s", json.dumps(previous, sort_keys=True))
    logger.info(
        "Span %s (%s): %d of %d segments committed; starting at segment %s",
        span["index"],
        span.get("label", ""),
        len(done),
        len(segments),
        first_left,
    )
    record_progress(context, {"segments_committed": len(done), "segments_total": len(segments)})


def record_line_progress(context: Mapping[str, Any], line: str) -> None:
    """The worker writes ``facefusion.progress {json}`` at each commit: keep the latest in the task state store."""
    progress = progress_in_line(line)
    if progress is not None:
        record_progress(context, progress)


def record_progress(context: Mapping[str, Any], progress: Mapping[str, Any]) -> None:
    store = _store(context)
    if store is not None:
        store.set(PROGRESS_KEY, {**progress, "updated_at": datetime.now(UTC).isoformat(timespec="seconds")})


def _store(context: Mapping[str, Any]) -> Any:
    """``context["task_state_store"]`` (Airflow 3.3); None where a context has none (an older Airflow, a unit test)."""
    return context.get("task_state_store")
