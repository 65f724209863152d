"""``[facefusion] span_workers = standing``: a swap_span task starts no worker and waits, deferred, until standing
workers have committed its span; with no standing worker alive it fails, saying what to start."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout
from committed import hold_run_lease
from fresh_loop import run_async

from facefusion_provider import storage
from facefusion_provider.exceptions import ModelMissingError
from facefusion_provider.sensors.standing_workers import SpanCommittedSensor
from facefusion_provider.triggers.span_committed import SpanCommittedTrigger
from facefusion_provider.work import leases
from facefusion_provider.work.layout import RootLayout, WorkLayout, work_root_of
from facefusion_provider.work.leases import standing_worker_lease
from facefusion_provider.work.records import StandingWorker
from facefusion_provider.worker.scheduler import live_works

FAST = {"poll_seconds": 0.05, "no_worker_seconds": 0.5}


def _events(trigger: SpanCommittedTrigger, *, for_seconds: float | None = None) -> list[dict[str, Any]]:
    """What the trigger fires; with ``for_seconds``, what it fired by then (it is cancelled, as the triggerer may)."""
    events: list[dict[str, Any]] = []

    async def collect() -> None:
        async for event in trigger.run():
            events.append(event.payload)

    try:
        run_async(asyncio.wait_for(collect(), timeout=for_seconds or 30))
    except TimeoutError:
        if for_seconds is None:
            raise
    return events


def _standing_worker() -> StandingWorker:
    return StandingWorker(
        name="gpu-node-1", host="gpu-node-1", pid=1, started_at=datetime(2026, 12, 3, tzinfo=UTC), ttl_seconds=240
    )


def test_the_trigger_fires_once_every_segment_of_the_span_is_committed(
    tmp_path: Path, write_work: Callable[..., Any], commit_segment: Callable[..., Path]
) -> None:
    work = write_work(tmp_path / "root", tmp_path / "out.mp4")  # 5 segments
    root = work_root_of(work.layout)

    def commit_later() -> None:
        for index in (1, 2):
            time.sleep(0.2)
            commit_segment(work, index)

    with standing_worker_lease(
        RootLayout(root), _standing_worker()
    ):  # a standing worker is alive: the wait may be long
        writer = threading.Thread(target=commit_later)
        writer.start()
        events = _events(SpanCommittedTrigger(work.work_uri, 1, 3, **FAST))
        writer.join()
    assert events == [{"status": "committed", "segments": 2}]


def test_with_no_standing_worker_alive_the_trigger_says_what_to_start(
    tmp_path: Path, write_work: Callable[..., Any]
) -> None:
    work = write_work(tmp_path / "root", tmp_path / "out.mp4")
    (event,) = _events(SpanCommittedTrigger(work.work_uri, 0, 5, **FAST))
    assert event["status"] == "no_standing_worker" and event["left"] == 5
    assert "facefusion-worker serve --work-root" in event["message"] and "span_workers = task" in event["message"]


def test_the_trigger_serializes_to_what_it_was_made_of() -> None:
    trigger = SpanCommittedTrigger("s3://work/work/w1", 4, 8, poll_seconds=1.0, no_worker_seconds=60.0)
    path, kwargs = trigger.serialize()
    assert path == "facefusion_provider.triggers.span_committed.SpanCommittedTrigger"
    assert SpanCommittedTrigger(**kwargs).serialize() == (path, kwargs)


def test_a_waiting_run_renews_its_lease_so_standing_workers_keep_taking_it(
    tmp_path: Path, write_work: Callable[..., Any]
) -> None:
    work = write_work(tmp_path / "root", tmp_path / "out.mp4")
    layout = WorkLayout(work.work_uri)
    queued_long = hold_run_lease(layout, "waiting-run", "/in/target.mp4", age=timedelta(hours=2))  # still waiting
    lease_file = Path(storage.local_path(layout.run_lease("waiting-run")) or "")
    assert live_works(work_root_of(layout), besides="") == []  # looks abandoned

    trigger = SpanCommittedTrigger(work.work_uri, 0, 5, **FAST, run_key="waiting-run", renew_seconds=0.1)
    with standing_worker_lease(RootLayout(work_root_of(layout)), _standing_worker()):
        assert _events(trigger, for_seconds=0.5) == []  # a worker is alive: it waits, renewing the lease

    (found,) = live_works(work_root_of(layout), besides="")
    assert found.layout.work_id == layout.work_id and lease_file.read_bytes() == queued_long.model_dump_json().encode()


def test_a_wait_past_its_timeout_fails_naming_the_setting_and_is_not_retried(
    tmp_path: Path, write_work: Callable[..., Any]
) -> None:
    work = write_work(tmp_path / "root", tmp_path / "out.mp4")
    with standing_worker_lease(RootLayout(work_root_of(work.layout)), _standing_worker()):  # alive, but not working it
        (event,) = _events(SpanCommittedTrigger(work.work_uri, 0, 5, **FAST, timeout_seconds=0.3))
    assert event["status"] == "timeout" and event["left"] == 5 and "span_wait_hours" in event["message"]
    sensor = SpanCommittedSensor(
        task_id="swap_span", work_uri=work.work_uri, output_uri="", target_uri="", run_key="", span={}, timeout=1.0
    )
    with pytest.raises(AirflowSensorTimeout, match="span_wait_hours"):
        sensor.execute_complete({}, event)


def test_a_sensor_that_does_not_defer_pokes_until_committed_and_fails_on_a_refusal(
    tmp_path: Path, write_work: Callable[..., Any], commit_segment: Callable[..., Path]
) -> None:
    work = write_work(tmp_path / "root", tmp_path / "out.mp4")
    span = {"index": 0, "first": 0, "last": 2}
    sensor = SpanCommittedSensor(
        task_id="swap_span",
        work_uri=work.work_uri,
        output_uri="",
        target_uri="",
        run_key="",
        span=span,
        deferrable=False,
    )
    assert sensor.timeout == 12 * 3600  # [facefusion] span_wait_hours by default
    root = RootLayout(work_root_of(work.layout))
    with standing_worker_lease(root, _standing_worker()):
        assert sensor.poke({}) is False
        leases.record_refusal(work.layout, "gpu-node-1", ModelMissingError("inswapper_128.onnx: not in /models"))
        with pytest.raises(AirflowFailException, match=r"\(gpu-node-1\) gave up .*inswapper_128\.onnx.*model_missing"):
            sensor.poke({})
        leases.withdraw_refusal(work.layout, "gpu-node-1")
        for index in (0, 1):
            commit_segment(work, index)
        assert sensor.poke({"ti": SimpleNamespace(dag_id="d", run_id="r")}) is True
