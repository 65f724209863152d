"""Event-driven ingestion on a real Airflow (``airflow standalone``: scheduler, triggerer, executor, API) with S3 and
SQS on one moto server: the bucket notifies the queue of every upload under ``incoming/``, and the Variable's
``trigger`` makes ``facefusion_s3_ingest`` an Asset-scheduled DAG whose watcher (common-messaging's
``MessageQueueTrigger`` on SQS) runs on the triggerer.

An upload starts exactly one swap run within seconds, with no scheduled scan (the cron is on 29 February); the same
object notified again (re-uploaded with the same bytes, and its message replayed) starts an ingestion run that starts
nothing. The swap DAG stays paused: the test is about who starts runs, not the swap itself."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ingest_stack import INGEST, SWAP, EventStack, event_stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EventStack]:
    with event_stack(tmp_path_factory.mktemp("airflow_events")) as started:
        yield started


def report(stack: EventStack, run_id: str) -> dict[str, Any]:
    path = f"/api/v2/dags/{INGEST}/dagRuns/{run_id}/taskInstances/scan/xcomEntries/report"
    return dict(stack.server.api("GET", path, params={"deserialize": True, "stringify": False})["value"])


def test_an_upload_starts_one_swap_run_within_seconds_and_a_second_notification_starts_nothing(
    stack: EventStack, tmp_path: Path
) -> None:
    s3, sqs = stack.client("s3"), stack.client("sqs")
    # The watcher consumes S3's test event first: a run that starts nothing.
    (first,) = stack.wait_for_runs(INGEST, 1, 90, finished=True)
    assert first["run_type"] == "asset_triggered" and first["state"] == "success"
    assert report(stack, first["dag_run_id"])["jobs"] == []

    uploaded = time.monotonic()
    s3.put_object(Bucket="videos", Key="incoming/new clip.mp4", Body=b"video bytes")
    (swap,) = stack.wait_for_runs(SWAP, 1, 90)
    latency = time.monotonic() - uploaded
    print(f"upload to swap run: {latency:.1f} s")
    assert swap["conf"]["target_uri"] == "s3://videos/incoming/new clip.mp4"  # the key arrived URL-encoded
    assert swap["conf"]["output_uri"] == "s3://videos/swapped/new clip.mp4"
    assert latency < 60

    # The same object notified again: re-uploaded with the same bytes, and that message delivered twice.
    s3.put_object(Bucket="videos", Key="incoming/new clip.mp4", Body=b"video bytes")
    runs = stack.wait_for_runs(INGEST, 3, 90, finished=True)
    replayed = sqs.send_message(QueueUrl=stack.queue_url, MessageBody=_object_created("incoming/new+clip.mp4"))
    assert replayed["MessageId"]
    time.sleep(1)
    runs = stack.wait_for_runs(INGEST, len(runs) + 1, 90, finished=True)

    assert len(stack.runs(SWAP)) == 1
    assert {run["run_type"] for run in runs} == {"asset_triggered"}  # no scheduled scan in between
    assert all(run["state"] == "success" for run in runs)
    later = sorted(runs, key=lambda run: run["run_after"])[2:]
    for run in later:
        jobs = report(stack, run["dag_run_id"])["jobs"]
        assert [(job["label"], job["kind"]) for job in jobs] == [("s3://videos/incoming/new clip.mp4", "in_flight")]


def _object_created(key: str) -> str:
    return json.dumps(
        {
            "Records": [
                {
                    "eventVersion": "2.1",
                    "eventSource": "aws:s3",
                    "eventName": "ObjectCreated:Put",
                    "s3": {"bucket": {"name": "videos"}, "object": {"key": key}},
                }
            ]
        }
    )
