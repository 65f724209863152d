"""Event-driven ingestion: SQS messages carrying S3 notifications become jobs through the scan's own ledger, on a
moto S3 server. A duplicate or replayed message, or a later scheduled scan, starts nothing more; S3's test event and
objects outside the input prefix or the allow-lists start nothing and the latter are reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import quote_plus

import pytest
from airflow.sdk import Asset, AssetOrTimeSchedule, Context, CronTriggerTimetable
from test_ingest_operator import FakeTaskInstance

from facefusion_provider import ingest
from facefusion_provider.operators.ingest import (
    NOTIFICATIONS_ASSET,
    ScanForNewJobsOperator,
    ingest_params,
    ingest_timetable,
    notification_messages,
    notification_queue,
)

BUCKET = "videos"
INPUT = f"s3://{BUCKET}/incoming/"
OUTPUT = f"s3://{BUCKET}/swapped/"


def message(
    *keys: str, bucket: str = BUCKET, event: str = "ObjectCreated:Put", message_id: str = "m1"
) -> dict[str, Any]:
    """An SQS message as the SqsSensorTrigger hands it over, its body an S3 notification (keys URL-encoded)."""
    records = [
        {
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "eventName": event,
            "s3": {"bucket": {"name": bucket}, "object": {"key": quote_plus(key), "size": 5}},
        }
        for key in keys
    ]
    return {"MessageId": message_id, "ReceiptHandle": "r", "Body": json.dumps({"Records": records})}


TEST_EVENT = {
    "MessageId": "t0",
    "Body": json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": BUCKET, "RequestId": "x"}),
}


def asset_run(*messages: dict[str, Any]) -> dict[str, Any]:
    """The context bits of an ingestion run that the notifications' Asset started (the watcher's event payload)."""
    event = SimpleNamespace(extra={"from_trigger": True, "payload": {"status": "success", "message_batch": messages}})
    return {"triggering_asset_events": {object(): [event]}}


def test_messages_name_the_created_objects_once_with_their_keys_decoded() -> None:
    sns_wrapped = {
        "MessageId": "m3",
        "Body": json.dumps({"Type": "Notification", "Message": message("incoming/b.mp4")["Body"]}),
    }
    notified = ingest.notified_objects(
        [
            TEST_EVENT,
            message("incoming/my clip (1).mp4", "incoming/a.mp4"),
            message("incoming/a.mp4", message_id="m2"),  # the same upload notified twice
            message("incoming/old.mp4", event="ObjectRemoved:Delete"),
            sns_wrapped,
            {"MessageId": "m4", "Body": "hello"},
        ]
    )

    assert notified.uris == [f"{INPUT}my clip (1).mp4", f"{INPUT}a.mp4", f"{INPUT}b.mp4"]
    assert notified.test_events == 1
    assert [(r.label, r.kind) for r in notified.reports] == [("message m4", "ignored")]


def test_objects_outside_the_input_prefix_are_reported_and_our_own_outputs_skipped() -> None:
    config = ingest.parse_ingest_config(
        {
            "input_prefix": INPUT,
            "output_prefix": OUTPUT,
            "ledger_prefix": OUTPUT + "ledger/",
            "source_uris": ["s3://f/a.jpg"],
        }
    )
    listed = {
        f"{INPUT}a.mp4": ingest.Listed(uri=f"{INPUT}a.mp4", version="e1", size=5, modified=1.0),
    }
    files, reports = ingest.notified_files(
        [f"{INPUT}a.mp4", f"{INPUT}gone.mp4", f"{OUTPUT}a.mp4", "s3://elsewhere/x.mp4"],
        config,
        ingest.AllowedPrefixes(inputs=(INPUT,)),
        stat=listed.get,
        list_files=lambda prefix: [],
    )

    assert [item.uri for item in files] == [f"{INPUT}a.mp4"]
    assert [(r.label, r.kind) for r in reports] == [("s3://elsewhere/x.mp4", "outside")]


@pytest.fixture
def bucket(s3: Any) -> Iterator[Any]:
    """The ``videos`` bucket on moto, with the fixed face; emptied after the test (the server lives per module)."""
    s3.put_object(Bucket=BUCKET, Key="faces/face.jpg", Body=b"jpeg")
    yield s3
    for item in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        s3.delete_object(Bucket=BUCKET, Key=item["Key"])


def scan(context: dict[str, Any], ti: FakeTaskInstance, **overrides: Any) -> list[dict[str, Any]]:
    form = ingest_params({})
    values: dict[str, Any] = {name: param.value if param.has_value else None for name, param in form.items()}
    values.update(
        {
            "input_prefix": INPUT,
            "output_prefix": OUTPUT,
            "source_uris": [f"s3://{BUCKET}/faces/face.jpg"],
            "processors": [],
        }
    )
    values.update(overrides)
    operator = ScanForNewJobsOperator(task_id="scan", **values)
    return operator.execute(cast("Context", {**context, "ti": ti}))


def test_a_notified_upload_starts_once_and_a_replayed_message_or_a_later_scan_starts_nothing(bucket: Any) -> None:
    bucket.put_object(Bucket=BUCKET, Key="incoming/new clip.mp4", Body=b"video")
    bucket.put_object(Bucket=BUCKET, Key="incoming/earlier.mp4", Body=b"older")  # its message was lost

    ti = FakeTaskInstance({})
    triggers = scan(asset_run(TEST_EVENT, message("incoming/new clip.mp4")), ti)

    # Only the notified object, not the whole prefix.
    assert [t["conf"]["target_uri"] for t in triggers] == [f"{INPUT}new clip.mp4"]
    assert triggers[0]["conf"]["output_uri"] == f"{OUTPUT}new clip.mp4"
    started = {t["trigger_run_id"]: "running" for t in triggers}

    # The same notification again (SQS delivers at least once), while the run goes and after it succeeded.
    for state in ("running", "success"):
        replay = FakeTaskInstance({run_id: state for run_id in started}, run_id=f"asset_triggered__{state}")
        assert scan(asset_run(message("incoming/new clip.mp4", message_id="m9")), replay) == []
        assert [job["kind"] for job in replay.xcom["report"]["jobs"]] == ["in_flight" if state == "running" else "done"]

    # The scheduled scan catches the object whose message was lost, and only that one.
    scheduled = FakeTaskInstance(dict.fromkeys(started, "success"), run_id="scheduled__1")
    assert [t["conf"]["target_uri"] for t in scan({}, scheduled)] == [f"{INPUT}earlier.mp4"]


def test_a_notification_outside_the_input_prefix_or_the_allow_list_is_reported_never_run(
    bucket: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__FACEFUSION__ALLOWED_INPUT_PREFIXES", f"{INPUT},s3://{BUCKET}/faces/")
    bucket.put_object(Bucket=BUCKET, Key="private/secret.mp4", Body=b"video")
    bucket.put_object(Bucket=BUCKET, Key="incoming/ok.mp4", Body=b"video")

    ti = FakeTaskInstance({})
    triggers = scan(asset_run(message("private/secret.mp4", "incoming/ok.mp4")), ti)

    assert [t["conf"]["target_uri"] for t in triggers] == [f"{INPUT}ok.mp4"]
    outside = [job for job in ti.xcom["report"]["jobs"] if job["kind"] == "outside"]
    assert [job["label"] for job in outside] == [f"s3://{BUCKET}/private/secret.mp4"]
    assert "input_prefix" in outside[0]["detail"]


def test_only_a_run_started_by_notifications_scans_what_they_name() -> None:
    assert notification_messages({}) is None  # scheduled or manual: the whole prefix
    manual_asset_event = {"triggering_asset_events": {object(): [SimpleNamespace(extra={"note": "by hand"})]}}
    assert notification_messages(manual_asset_event) is None
    assert notification_messages(asset_run(TEST_EVENT)) == [TEST_EVENT]


def test_the_variables_trigger_schedules_the_dag_on_the_queue_beside_its_cron() -> None:
    queue_url = "https://sqs.eu-west-1.amazonaws.com/123456789012/uploads"
    settings = {"schedule": "0 * * * *", "trigger": {"sqs_queue_url": queue_url}, "input_prefix": INPUT}

    schedule = ingest_timetable(settings)

    assert isinstance(schedule, AssetOrTimeSchedule)
    assert isinstance(schedule.timetable, CronTriggerTimetable) and schedule.timetable.expression == "0 * * * *"
    asset = schedule.asset_condition
    assert isinstance(asset, Asset) and asset.name == NOTIFICATIONS_ASSET
    (watcher,) = asset.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath.endswith("SqsSensorTrigger") and kwargs["sqs_queue"] == queue_url
    assert kwargs["wait_time_seconds"] == 20  # long polls: one request per 20 s while nothing arrives
    assert ingest_timetable({"schedule": "none", "trigger": {"sqs_queue_url": queue_url}}) == asset
    assert ingest_timetable({"schedule": "0 * * * *"}) == "0 * * * *"
    with pytest.raises(ValueError, match=r"facefusion_ingest\.trigger: sqs_queue_url"):
        notification_queue({"trigger": {"sqs_queue_url": "uploads"}})
