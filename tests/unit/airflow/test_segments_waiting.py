"""The gauge KEDA scales the standing workers on (``airflow.facefusion.segments.waiting``, deploy/chart): a standing
run's span wait sets it to the run's uncommitted segments as it defers and while it waits, and to 0 once they are
committed or the wait ends any other way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.base import TriggerEvent
from fresh_loop import run_async
from recorded_stats import RecordedStats

from facefusion_provider import metric_names
from facefusion_provider.operators.plan import span_list
from facefusion_provider.sensors.standing_workers import SpanCommittedSensor
from facefusion_provider.triggers.span_committed import SpanCommittedTrigger

WAITING = metric_names.stat_name(metric_names.SEGMENTS_WAITING)
RUN = {"dag_id": "facefusion_swap", "run_id": "manual__r1"}


def waiting_values(stats_sent: RecordedStats) -> list[float]:
    sent = stats_sent.of(WAITING)
    assert all(item.kind == "gauge" and item.tags == RUN for item in sent)
    return [item.value for item in sent]


def deferred_span_wait(tmp_path: Path, write_work: Callable[..., Any], committed: Callable[[Any], object]) -> Any:
    """A standing run's span task executed once: the trigger it defers on, the work and its context."""
    work = write_work(tmp_path / "root", tmp_path / "out.mp4")
    span = span_list(work.spec, 1)[0]
    committed(work)
    operator = SpanCommittedSensor(
        task_id="swap_span",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        target_uri="file:///in.mp4",
        run_key="facefusion_swap--r1",
        span=span,
    )
    context: Any = {"ti": SimpleNamespace(try_number=1, task_id="swap_span", map_index=0, **RUN)}
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)
    return SimpleNamespace(operator=operator, trigger=deferred.value.trigger, work=work, span=span, context=context)


def test_the_wait_reports_the_runs_waiting_segments_then_zero_once_committed(
    tmp_path: Path,
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Path],
    stats_sent: RecordedStats,
) -> None:
    wait = deferred_span_wait(tmp_path, write_work, lambda work: commit_segment(work, 0))
    total = wait.span["last"] - wait.span["first"]
    assert total >= 3, "the test needs a span of several segments"
    # As it defers: every segment but the one already committed waits for a standing worker.
    assert waiting_values(stats_sent) == [total - 1]

    trigger: SpanCommittedTrigger = wait.trigger
    assert trigger.serialize()[1] | RUN == trigger.serialize()[1]  # the triggerer knows whose figure it sets
    trigger.poll_seconds = 0.05

    async def commit_the_rest_while_waiting() -> dict[str, Any]:
        events = cast("AsyncGenerator[TriggerEvent, None]", trigger.run())
        first_event = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.3)  # the trigger has counted what waits
        for index in range(wait.span["first"] + 1, wait.span["last"]):
            commit_segment(wait.work, index)
        event = await asyncio.wait_for(first_event, timeout=20)
        await events.aclose()  # what the triggerer does once it has the event
        return dict(event.payload)

    event = run_async(commit_the_rest_while_waiting())
    assert event["status"] == "committed"
    values = waiting_values(stats_sent)
    assert values[:2] == [total - 1, total - 1]  # the operator's, then the trigger's own count
    assert values[-1] == 0

    wait.operator.execute_complete(wait.context, event)
    assert waiting_values(stats_sent)[-1] == 0


def test_a_wait_cancelled_before_its_segments_are_committed_leaves_nothing_waiting(
    tmp_path: Path, write_work: Callable[..., Any], stats_sent: RecordedStats
) -> None:
    wait = deferred_span_wait(tmp_path, write_work, lambda work: None)
    total = wait.span["last"] - wait.span["first"]
    trigger: SpanCommittedTrigger = wait.trigger
    trigger.poll_seconds = 0.05

    async def cancel_while_waiting() -> None:
        task = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.sleep(0.3)
        task.cancel()  # the run was marked failed, or its task cleared: the triggerer cancels the trigger
        with pytest.raises(asyncio.CancelledError):
            await task

    run_async(cancel_while_waiting())
    # Left at its count, the gauge would keep KEDA's workers (and their GPUs) up for a run nobody waits for.
    assert waiting_values(stats_sent) == [total, total, 0]
