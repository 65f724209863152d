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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from airflow_harness import TEST_SETTINGS, StandaloneAirflow
from s3_servers import REGION, MotoServer

pytestmark = pytest.mark.slow

INGEST = "facefusion_s3_ingest"
SWAP = "facefusion_swap_batch"
CONN_ID = "facefusion_aws"
QUEUE = "uploads"
# A schedule beside the events that must not fire in the test: unpausing runs the latest cron time since start_date
# (2025-01-01), and no 29 February has passed since.
LEAP_DAY = "0 0 29 2 *"


@dataclass
class EventStack:
    moto: MotoServer
    server: StandaloneAirflow
    queue_url: str

    def client(self, service: str) -> Any:
        return aws_client(self.moto, service)

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        body = self.server.api("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})
        return list(body["dag_runs"])

    def wait_for_runs(self, dag_id: str, count: int, timeout: float, *, finished: bool = False) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            runs = self.runs(dag_id)
            if len(runs) >= count and (not finished or all(run["state"] in ("success", "failed") for run in runs)):
                return runs
            if time.monotonic() > deadline:
                raise AssertionError(f"{dag_id}: {runs} after {timeout} s\n{self.server.log_tail(3000)}")
            time.sleep(0.5)


def aws_client(moto: MotoServer, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=moto.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name=REGION,
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EventStack]:
    moto = MotoServer()
    server: StandaloneAirflow | None = None
    try:
        s3 = moto.client()
        s3.create_bucket(Bucket="videos")
        sqs = aws_client(moto, "sqs")
        queue_url = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        s3.put_bucket_notification_configuration(
            Bucket="videos",
            NotificationConfiguration={
                "QueueConfigurations": [
                    {
                        "QueueArn": queue_arn,
                        "Events": ["s3:ObjectCreated:*"],
                        "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "incoming/"}]}},
                    }
                ]
            },
        )  # S3 sends an s3:TestEvent to the queue now: the first ingestion run sees it and starts nothing
        s3.put_object(Bucket="videos", Key="faces/face.png", Body=b"png")
        connection = {
            "conn_type": "aws",
            "login": "testing",
            "password": "testing",
            "extra": {"endpoint_url": moto.url, "region_name": REGION},
        }
        variable = {
            "schedule": LEAP_DAY,
            "trigger": {"sqs_queue_url": queue_url, "wait_time_seconds": 2},
            "input_prefix": "s3://videos/incoming/",
            "output_prefix": "s3://videos/swapped/",
            "source_uris": ["s3://videos/faces/face.png"],
        }
        extra_env = {
            f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection),
            "AIRFLOW_VAR_FACEFUSION_INGEST": json.dumps(variable),
        }
        server = StandaloneAirflow(
            tmp_path_factory.mktemp("airflow_events"),
            {**TEST_SETTINGS, "work_root": "s3://videos/work/", "aws_conn_id": CONN_ID},
            extra_env,
        )
        for name in list(server.env):
            if name.startswith(("AWS_", "FACEFUSION_")):
                del server.env[name]
        server.start()
        deadline = time.monotonic() + 120
        for dag_id in (INGEST, SWAP):
            while server.client.get(f"/api/v2/dags/{dag_id}").status_code != 200:
                assert time.monotonic() < deadline, server.api("GET", "/api/v2/importErrors")
                time.sleep(1)
        server.api("PATCH", f"/api/v2/dags/{SWAP}", json={"is_paused": True})
        server.api("PATCH", f"/api/v2/dags/{INGEST}", json={"is_paused": False})
        yield EventStack(moto, server, queue_url)
    finally:
        if server is not None:
            server.stop()
        moto.stop()


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
