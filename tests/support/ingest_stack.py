"""Event-driven ingestion's stack on one machine: a moto server (S3 and SQS) whose bucket ``videos`` notifies the queue
``uploads`` of every upload under ``incoming/``, and ``airflow standalone`` whose ``facefusion_ingest`` Variable
watches that queue (``MessageQueueTrigger`` on the triggerer) beside a schedule. Shared by
tests/integration/s3/test_s3_ingest_events.py and bench/bench_ingest_latency.py."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

_INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
for _folder in ("airflow", "s3"):  # the standalone harness and the moto server live beside their tests
    if str(_INTEGRATION / _folder) not in sys.path:
        sys.path.insert(0, str(_INTEGRATION / _folder))

from airflow_harness import TEST_SETTINGS, StandaloneAirflow  # noqa: E402
from s3_servers import REGION, MotoServer  # noqa: E402

INGEST = "facefusion_s3_ingest"
SWAP = "facefusion_swap_batch"
CONN_ID = "facefusion_aws"
QUEUE = "uploads"
BUCKET = "videos"
INPUT_PREFIX = "incoming/"
FACE_KEY = "faces/face.png"
# A schedule beside the events that must not fire: unpausing runs the latest cron time since start_date (2025-01-01),
# and no 29 February has passed since.
LEAP_DAY = "0 0 29 2 *"


@dataclass
class EventStack:
    moto: MotoServer
    server: StandaloneAirflow
    queue_url: str
    queue_arn: str

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

    def notify_uploads(self, on: bool = True) -> None:
        """The bucket's notification of uploads under ``incoming/`` to the queue, on or off (S3 then sends nothing)."""
        queues = [
            {
                "QueueArn": self.queue_arn,
                "Events": ["s3:ObjectCreated:*"],
                "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": INPUT_PREFIX}]}},
            }
        ]
        self.client("s3").put_bucket_notification_configuration(
            Bucket=BUCKET, NotificationConfiguration={"QueueConfigurations": queues if on else []}
        )


def aws_client(moto: MotoServer, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=moto.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name=REGION,
    )


@contextmanager
def event_stack(
    home: Path,
    *,
    variable: Mapping[str, Any] | None = None,
    face: bytes = b"png",
    swap_paused: bool = True,
    settings: Mapping[str, str] | None = None,
) -> Iterator[EventStack]:
    """The stack, started; ``variable`` adds to (or overrides) the ``facefusion_ingest`` Variable, ``settings`` to the
    ``[facefusion]`` settings. The ingestion DAG is unpaused; the swap DAG only with ``swap_paused=False``. S3 sends an
    ``s3:TestEvent`` to the queue when the notification is set: the first ingestion run sees it and starts nothing."""
    moto = MotoServer()
    server: StandaloneAirflow | None = None
    try:
        moto.client().create_bucket(Bucket=BUCKET)
        sqs = aws_client(moto, "sqs")
        queue_url = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        moto.client().put_object(Bucket=BUCKET, Key=FACE_KEY, Body=face)
        connection = {
            "conn_type": "aws",
            "login": "testing",
            "password": "testing",
            "extra": {"endpoint_url": moto.url, "region_name": REGION},
        }
        ingest = {
            "schedule": LEAP_DAY,
            "trigger": {"sqs_queue_url": queue_url, "wait_time_seconds": 2},
            "input_prefix": f"s3://{BUCKET}/{INPUT_PREFIX}",
            "output_prefix": f"s3://{BUCKET}/swapped/",
            "source_uris": [f"s3://{BUCKET}/{FACE_KEY}"],
            **(variable or {}),
        }
        extra_env = {
            f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection),
            "AIRFLOW_VAR_FACEFUSION_INGEST": json.dumps(ingest),
        }
        server = StandaloneAirflow(
            home,
            {**TEST_SETTINGS, "work_root": f"s3://{BUCKET}/work/", "aws_conn_id": CONN_ID, **(settings or {})},
            extra_env,
        )
        for name in list(server.env):
            if name.startswith(("AWS_", "FACEFUSION_")):  # the connection is the only way to S3
                del server.env[name]
        stack = EventStack(moto, server, queue_url, queue_arn)
        stack.notify_uploads()
        server.start()
        deadline = time.monotonic() + 120
        for dag_id in (INGEST, SWAP):
            while server.client.get(f"/api/v2/dags/{dag_id}").status_code != 200:
                assert time.monotonic() < deadline, server.api("GET", "/api/v2/importErrors")
                time.sleep(1)
        server.api("PATCH", f"/api/v2/dags/{SWAP}", json={"is_paused": swap_paused})
        server.api("PATCH", f"/api/v2/dags/{INGEST}", json={"is_paused": False})
        yield stack
    finally:
        if server is not None:
            server.stop()
        moto.stop()
