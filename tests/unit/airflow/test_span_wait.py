"""With standing workers the span task is a visible, deferred wait: it starts no worker, defers on the span's
trigger with validate's run key, and succeeds once the span is committed (or fails saying what to start)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from fresh_loop import run_async

from facefusion_provider import storage
from facefusion_provider.operators.plan import span_list
from facefusion_provider.sensors.standing_workers import SpanCommittedSensor
from facefusion_provider.triggers.span_committed import SpanCommittedTrigger
from facefusion_provider.work.claims import retire_commit


def _events(trigger: SpanCommittedTrigger) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    async def collect() -> None:
        async for event in trigger.run():
            events.append(event.payload)

    run_async(asyncio.wait_for(collect(), timeout=30))
    return events


def test_a_standing_span_task_defers_starts_no_worker_and_succeeds_once_committed(
    tmp_path: Path,
    fake_worker: Callable[[], list[dict[str, Any]]],
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Path],
) -> None:
    work = write_work(tmp_path / "root", tmp_path / "out.mp4")
    span = span_list(work.spec, 2)[0]
    operator = SpanCommittedSensor(
        task_id="swap_span",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        target_uri="file:///in.mp4",
        run_key="facefusion_swap--r1",
        span=span,
    )
    ti = SimpleNamespace(try_number=1, dag_id="facefusion_swap", run_id="r1", task_id="swap_span", map_index=0)
    context: Any = {"ti": ti}

    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, SpanCommittedTrigger) and (trigger.first, trigger.last) == (span["first"], span["last"])
    assert trigger.run_key == "facefusion_swap--r1"  # validate's key, renewed while waiting
    assert deferred.value.method_name == "execute_complete"

    for index in range(span["first"], span["last"]):
        commit_segment(work, index)
    (event,) = _events(trigger)
    operator.execute_complete(context, event)  # succeeds
    with pytest.raises(AirflowException, match="no standing worker"):
        operator.execute_complete(context, {"status": "no_standing_worker", "message": "no standing worker ..."})
    assert fake_worker() == []  # no process was started for the span


def test_a_committed_span_or_an_output_validate_found_done_does_not_wait(
    tmp_path: Path, write_work: Callable[..., Any]
) -> None:
    work = write_work(tmp_path / "root", tmp_path / "out.mp4")
    operator = SpanCommittedSensor(
        task_id="swap_span",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        output_done=True,
        target_uri="file:///in.mp4",
        run_key="facefusion_swap--r1",
        span=span_list(work.spec, 2)[0],
    )
    ti = SimpleNamespace(try_number=1, dag_id="facefusion_swap", run_id="r1", task_id="swap_span", map_index=0)

    operator.execute({"ti": ti})  # returns: no deferral


def test_a_span_whose_commit_a_merge_retired_waits_for_the_segments_next_commit(
    tmp_path: Path, write_work: Callable[..., Any], commit_segment: Callable[..., Path]
) -> None:
    """A merge that found a committed segment damaged retired its commit: its first marker is still there, but the
    span is not committed until the segment's next incarnation is."""
    work = write_work(tmp_path / "root", tmp_path / "out.mp4", frames=16, segment_size=8)
    first_marker = [commit_segment(work, index) for index in range(2)][1]
    retire_commit(work.layout, 1, 0, "its checksum differs from its marker's")
    trigger = SpanCommittedTrigger(work.work_uri, 0, 2, poll_seconds=0.05)
    events: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []

    async def commit_again_later() -> None:
        async def collect() -> None:
            async for event in trigger.run():
                events.append(event.payload)

        collecting = asyncio.ensure_future(collect())
        await asyncio.sleep(0.5)  # ten polls
        waiting.extend(events)
        next_marker = json.loads(first_marker.read_text()) | {"incarnation": 1}
        storage.write_bytes_atomic(work.layout.segment_marker(1, 1), json.dumps(next_marker).encode())
        await asyncio.wait_for(collecting, timeout=10)

    run_async(commit_again_later())
    assert waiting == []
    assert [event["status"] for event in events] == ["committed"]
