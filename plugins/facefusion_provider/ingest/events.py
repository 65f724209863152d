"""Event-driven ingestion: S3 ``ObjectCreated`` notifications, delivered to SQS (directly or through SNS), name the
objects a scan looks at instead of listing the whole input prefix. The jobs they make go through the same ledger as
the scheduled scan's, so a duplicate or replayed message, or a scan that lists the same object later, starts nothing.
No Airflow, no I/O here: the operator passes ``stat`` and ``list_files``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

from pydantic import Field, field_validator

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.ingest.config import AllowedPrefixes, IngestConfig, IngestRecord
from facefusion_provider.ingest.discovery import JobReport, Listed
from facefusion_provider.storage.uris import check_allowed

OBJECT_CREATED = "ObjectCreated:"
TEST_EVENT = "s3:TestEvent"  # S3 sends one when a notification configuration is saved


class NotificationQueue(IngestRecord):
    """The ``trigger`` object of the ``facefusion_ingest`` Variable: the SQS queue that receives the input bucket's
    ``s3:ObjectCreated:*`` notifications."""

    sqs_queue_url: str = Field(description="The queue's URL, e.g. https://sqs.eu-west-1.amazonaws.com/123/uploads.")
    aws_conn_id: str | None = Field(default=None, description="Default: the [facefusion] aws_conn_id setting.")
    region_name: str | None = None
    wait_time_seconds: int = Field(default=20, ge=0, le=20, description="SQS long poll: one request per 20 s idle.")
    max_messages: int = Field(default=10, ge=1, le=10)

    @field_validator("sqs_queue_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError(
                f"expected the queue's URL (https://sqs.<region>.amazonaws.com/<account>/<name>), got {value!r}"
            )
        return value


@dataclass(frozen=True)
class Notified:
    """What a batch of messages says: the created objects (each once, in order) and the messages that named none."""

    uris: list[str] = field(default_factory=list)
    test_events: int = 0
    reports: list[JobReport] = field(default_factory=list)  # messages that are no S3 notification


def notified_objects(messages: Iterable[Mapping[str, Any]]) -> Notified:
    """The objects created according to SQS messages (``Body`` an S3 event, or an SNS notification carrying one); keys
    arrive URL-encoded (a space as ``+``). Removals and other events are not jobs."""
    uris: dict[str, None] = {}
    test_events = 0
    reports = []
    for message in messages:
        label = f"message {message.get('MessageId', '?')}"
        event = _s3_event(message.get("Body"))
        if event is None:
            reports.append(JobReport(label, "ignored", detail="not an S3 event notification"))
            continue
        if event.get("Event") == TEST_EVENT:
            test_events += 1
            continue
        for record in event.get("Records") or []:
            if not str(record.get("eventName", "")).startswith(OBJECT_CREATED):
                continue
            try:
                bucket, key = record["s3"]["bucket"]["name"], record["s3"]["object"]["key"]
            except (KeyError, TypeError):
                reports.append(JobReport(label, "ignored", detail="an ObjectCreated record without bucket and key"))
                continue
            uris.setdefault(f"s3://{bucket}/{unquote_plus(str(key))}")
    return Notified(list(uris), test_events, reports)


def _s3_event(body: Any) -> dict[str, Any] | None:
    try:
        event = json.loads(body) if isinstance(body, str) else None
        if isinstance(event, dict) and event.get("Type") == "Notification" and isinstance(event.get("Message"), str):
            event = json.loads(event["Message"])  # S3 -> SNS -> SQS without raw message delivery
    except json.JSONDecodeError:
        return None
    if isinstance(event, dict) and ("Records" in event or event.get("Event") == TEST_EVENT):
        return event
    return None


def notified_files(
    uris: Sequence[str],
    config: IngestConfig,
    allowed: AllowedPrefixes,
    *,
    stat: Callable[[str], Listed | None],
    list_files: Callable[[str], Sequence[Listed]],
) -> tuple[list[Listed], list[JobReport]]:
    """The files a scan of ``uris`` sees, as the full scan would list them, and reports of the objects it must not run.

    An object outside ``input_prefix`` or the input allow-list is reported and never run; our own outputs and ledger
    (notified when the bucket's notification has no prefix filter) are skipped quietly. In ``faces`` mode an image in
    a folder brings its whole folder (one identity); an object gone since its message makes nothing."""
    listed: dict[str, Listed] = {}
    reports = []
    folders_listed: set[str] = set()
    for uri in uris:
        if any(uri.startswith(prefix) for prefix in config.excluded_prefixes()):
            continue
        if not uri.startswith(config.input_prefix):
            reports.append(JobReport(uri, "outside", detail=f"not under input_prefix {config.input_prefix}"))
            continue
        try:
            check_allowed(uri, allowed.inputs, field="notified object", kind="input")
        except InvalidOptionError as error:
            reports.append(JobReport(uri, "outside", detail=str(error)))
            continue
        folder, _, name = uri[len(config.input_prefix) :].partition("/")
        if config.mode == "faces" and name:
            if folder not in folders_listed:
                folders_listed.add(folder)
                listed.update((item.uri, item) for item in list_files(f"{config.input_prefix}{folder}/"))
            continue
        found = stat(uri)
        if found is not None:
            listed[found.uri] = found
    return sorted(listed.values(), key=lambda item: item.uri), reports
