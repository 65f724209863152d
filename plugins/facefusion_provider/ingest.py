"""Batch ingestion of new videos under a prefix: which videos to start, which to retry, what to report. Pure logic.

The ledger (``{ledger_prefix}videos/{video_id}/``) holds one claim per attempt (``attempt-001.json``), created
exclusively, and one outcome per finished attempt whose state is in its name (``attempt-001.success.json`` or
``attempt-001.failed.json``), so one listing tells the state of every video. A video is its URI and version (the S3
ETag): a changed upload under the same key is a new video. Each attempt starts the swap run ``swap_run_id(video_id,
attempt)``, so even a repeated trigger of one attempt cannot start a second run. No Airflow, no I/O here.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from facefusion_provider.exceptions import InvalidOptionError

DEFAULT_EXTENSIONS = (".mp4", ".mov", ".m4v", ".mkv")
LEDGER_FOLDER = "videos"
SWAP_RUN_PREFIX = "ingest__"

RunState = Literal["queued", "running", "success", "failed", "missing"]
"""The state of an attempt's swap run in Airflow; ``missing`` when no run with its id exists (not triggered yet)."""

FINISHED_RUN_STATES: frozenset[str] = frozenset({"success", "failed"})


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IngestConfig(_Record):
    """The ingestion DAG's Params, checked."""

    input_prefix: str = Field(description="Prefix whose new videos are ingested, e.g. s3://bucket/incoming/.")
    output_prefix: str = Field(description="Outputs go here, at the input's path relative to input_prefix.")
    ledger_prefix: str = Field(description="Where the claims and outcomes live (one object per attempt).")
    source_uris: list[str] = Field(min_length=1, description="The fixed source face image(s).")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of every swap run.")
    extensions: list[str] = Field(default=list(DEFAULT_EXTENSIONS), min_length=1)
    min_size_bytes: int = Field(default=1, ge=0)
    max_size_bytes: int = Field(default=20 * 1024**3, ge=1)
    max_videos_per_run: int = Field(default=10, ge=1, le=1024)
    max_attempts: int = Field(default=3, ge=1, le=100)
    orphan_after_minutes: float = Field(default=30.0, ge=0)

    @field_validator("input_prefix", "output_prefix", "ledger_prefix")
    @classmethod
    def _folder(cls, value: str) -> str:
        if "://" not in value or value.split("://", 1)[1].strip("/") == "":
            raise ValueError(f"expected a URI with a bucket or folder, such as s3://bucket/prefix/, got {value!r}")
        return value.rstrip("/") + "/"

    @field_validator("extensions")
    @classmethod
    def _dotted_lowercase(cls, value: list[str]) -> list[str]:
        return sorted({ext.lower() if ext.startswith(".") else "." + ext.lower() for ext in value})

    @model_validator(mode="after")
    def _separate_prefixes(self) -> IngestConfig:
        if self.max_size_bytes < self.min_size_bytes:
            raise ValueError(f"max_size_bytes ({self.max_size_bytes}) is below min_size_bytes ({self.min_size_bytes})")
        if self.output_prefix == self.input_prefix:
            raise ValueError("output_prefix must differ from input_prefix: every output would overwrite its input")
        return self

    def excluded_prefixes(self) -> tuple[str, ...]:
        """Our own outputs and ledger (allowed under the input prefix): never videos to ingest."""
        return (self.output_prefix, self.ledger_prefix)


def parse_ingest_config(values: Mapping[str, Any]) -> IngestConfig:
    """Check the Params; a problem is an ``InvalidOptionError`` naming the param."""
    from pydantic import ValidationError

    try:
        return IngestConfig.model_validate(dict(values))
    except ValidationError as error:
        problems = [
            f"{'.'.join(str(part) for part in item['loc']) or 'params'}: {item['msg']} (got {item.get('input')!r})"
            for item in error.errors()
        ]
        raise InvalidOptionError("invalid ingestion params: " + "; ".join(problems)) from None


class Listed(_Record):
    """A file found under the input prefix."""

    uri: str
    version: str
    size: int
    modified: float


class Claim(_Record):
    """``attempt-NNN.json``: this attempt of this video belongs to the ingestion run that created the object."""

    video_id: str
    target_uri: str
    version: str
    size: int
    attempt: int = Field(ge=1)
    run_id: str
    output_uri: str
    claimed_at: datetime
    claimed_by: str  # the ingestion DAG run that created the claim


OutcomeState = Literal["success", "failed"]


class Outcome(_Record):
    """``attempt-NNN.<state>.json``: how the attempt's swap run ended."""

    video_id: str
    attempt: int = Field(ge=1)
    run_id: str
    state: OutcomeState
    recorded_at: datetime


@dataclass
class VideoHistory:
    """What the ledger's listing says about one video, plus the content of its latest claim while that is unfinished."""

    attempts: set[int] = field(default_factory=set)
    outcomes: dict[int, OutcomeState] = field(default_factory=dict)
    pending: Claim | None = None  # loaded only for an unfinished latest attempt (its run must be looked up)

    @property
    def latest_attempt(self) -> int:
        return max(self.attempts, default=0)

    @property
    def unfinished(self) -> bool:
        return self.latest_attempt > 0 and self.latest_attempt not in self.outcomes


def video_id(uri: str, version: str) -> str:
    return hashlib.sha256(f"{uri}\n{version}".encode()).hexdigest()[:24]


def swap_run_id(video: str, attempt: int) -> str:
    """The swap run of one attempt: deterministic, so Airflow itself refuses a second run for it."""
    return f"{SWAP_RUN_PREFIX}{video}__{attempt}"


_LEDGER_NAME = re.compile(r"/([0-9a-f]{24})/attempt-([0-9]{3,})(?:\.(success|failed))?\.json$")


def ledger_folder(ledger_prefix: str) -> str:
    return f"{ledger_prefix}{LEDGER_FOLDER}/"


def claim_uri(ledger_prefix: str, video: str, attempt: int) -> str:
    return f"{ledger_folder(ledger_prefix)}{video}/attempt-{attempt:03d}.json"


def outcome_uri(ledger_prefix: str, video: str, attempt: int, state: OutcomeState) -> str:
    return f"{ledger_folder(ledger_prefix)}{video}/attempt-{attempt:03d}.{state}.json"


def output_uri_for(input_uri: str, config: IngestConfig) -> str:
    """The output keeps the input's path below the input prefix (subfolders included) and its name."""
    return config.output_prefix + input_uri[len(config.input_prefix) :]


def histories_from_listing(uris: Iterable[str]) -> dict[str, VideoHistory]:
    """Each video's attempts and outcomes from the names of the ledger's objects (other names are ignored)."""
    histories: dict[str, VideoHistory] = {}
    for uri in uris:
        match = _LEDGER_NAME.search(uri)
        if match is None:
            continue
        vid, attempt, state = match.group(1), int(match.group(2)), match.group(3)
        history = histories.setdefault(vid, VideoHistory())
        history.attempts.add(attempt)
        if state:
            history.outcomes[attempt] = "success" if state == "success" else "failed"
    return histories


def unfinished_attempts(histories: Mapping[str, VideoHistory]) -> list[tuple[str, int]]:
    """``(video_id, attempt)`` of every latest attempt without an outcome: its claim is read and its run looked up."""
    return sorted((vid, history.latest_attempt) for vid, history in histories.items() if history.unfinished)


def outcome_for(video: str, attempt: int, state: RunState, now: datetime) -> Outcome | None:
    """An outcome to record when the attempt's swap run has finished, else None."""
    if state not in FINISHED_RUN_STATES:
        return None
    return Outcome(
        video_id=video,
        attempt=attempt,
        run_id=swap_run_id(video, attempt),
        state="success" if state == "success" else "failed",
        recorded_at=now,
    )


ReportKind = Literal[
    "start",  # first attempt claimed now
    "retry",  # a failed video, next attempt claimed now
    "resume",  # claimed before but never triggered: trigger again (same run id)
    "in_flight",  # its swap run is queued or running
    "done",
    "given_up",  # failed max_attempts times
    "deferred",  # over this run's bound: a later run takes it
    "too_small",
    "too_large",
]


@dataclass(frozen=True)
class VideoReport:
    uri: str
    version: str
    kind: ReportKind
    attempt: int = 0
    run_id: str | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "version": self.version,
            "kind": self.kind,
            "attempt": self.attempt,
            "run_id": self.run_id,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Start:
    """A swap run to start. ``claim`` is new (to create exclusively first) unless ``resume`` is set."""

    claim: Claim
    resume: bool = False


@dataclass(frozen=True)
class IngestPlan:
    starts: list[Start]
    reports: list[VideoReport]


def is_candidate(item: Listed, config: IngestConfig) -> bool:
    """A video file under the input prefix with an allowed extension, outside our own outputs and ledger."""
    if item.uri.endswith("/") or not item.uri.startswith(config.input_prefix):
        return False
    if any(item.uri.startswith(prefix) for prefix in config.excluded_prefixes()):
        return False
    return posixpath.splitext(item.uri)[1].lower() in config.extensions


def plan_ingest(
    listed: Sequence[Listed],
    histories: Mapping[str, VideoHistory],
    run_states: Mapping[str, RunState],
    config: IngestConfig,
    *,
    now: datetime,
    ingest_run: str,
) -> IngestPlan:
    """Decide, oldest upload first, what to start in this ingestion run (at most ``max_videos_per_run``).

    ``run_states`` maps the run id of every unfinished claim to its swap run's state. A claim whose run does not exist
    is resumed when this same ingestion run made it (a retried task) or when it is older than ``orphan_after_minutes``
    (its ingestion run died between claim and trigger); the deterministic run id keeps a resume from starting twice.
    """
    starts: list[Start] = []
    reports: list[VideoReport] = []
    for item in sorted((i for i in listed if is_candidate(i, config)), key=lambda i: (i.modified, i.uri)):
        if item.size < config.min_size_bytes or item.size > config.max_size_bytes:
            kind: ReportKind = "too_small" if item.size < config.min_size_bytes else "too_large"
            limits = f"{config.min_size_bytes}..{config.max_size_bytes} bytes"
            reports.append(VideoReport(item.uri, item.version, kind, detail=f"{item.size} bytes; allowed {limits}"))
            continue
        vid = video_id(item.uri, item.version)
        history = histories.get(vid, VideoHistory())
        latest = history.latest_attempt
        run_id = swap_run_id(vid, latest)
        state = run_states.get(run_id, "missing")
        start: Start | None = None
        if latest == 0:
            start = Start(_claim(item, vid, 1, config, now=now, ingest_run=ingest_run))
            report = VideoReport(item.uri, item.version, "start", 1, start.claim.run_id)
        elif history.outcomes.get(latest) == "success":
            report = VideoReport(item.uri, item.version, "done", latest, run_id)
        elif history.outcomes.get(latest) == "failed" and latest < config.max_attempts:
            start = Start(_claim(item, vid, latest + 1, config, now=now, ingest_run=ingest_run))
            detail = f"attempt {latest} of {config.max_attempts} failed in run {run_id}"
            report = VideoReport(item.uri, item.version, "retry", latest + 1, start.claim.run_id, detail)
        elif history.outcomes.get(latest) == "failed":
            detail = f"failed {latest} of {config.max_attempts} attempts; last run {run_id}"
            report = VideoReport(item.uri, item.version, "given_up", latest, run_id, detail)
        elif (
            (claim := history.pending) is not None and state == "missing" and _orphaned(claim, now, ingest_run, config)
        ):
            start = Start(claim, resume=True)
            report = VideoReport(item.uri, item.version, "resume", latest, run_id, "claimed, never started")
        else:
            report = VideoReport(item.uri, item.version, "in_flight", latest, run_id, f"run {state}")
        if start is not None and len(starts) >= config.max_videos_per_run:
            report = VideoReport(item.uri, item.version, "deferred", detail="over max_videos_per_run")
            start = None
        if start is not None:
            starts.append(start)
        reports.append(report)
    return IngestPlan(starts=starts, reports=reports)


def _orphaned(claim: Claim, now: datetime, ingest_run: str, config: IngestConfig) -> bool:
    """No run for this claim: its own ingestion run is retrying, or that run died before it triggered anything."""
    return claim.claimed_by == ingest_run or now - claim.claimed_at >= timedelta(minutes=config.orphan_after_minutes)


def _claim(item: Listed, vid: str, attempt: int, config: IngestConfig, *, now: datetime, ingest_run: str) -> Claim:
    return Claim(
        video_id=vid,
        target_uri=item.uri,
        version=item.version,
        size=item.size,
        attempt=attempt,
        run_id=swap_run_id(vid, attempt),
        output_uri=output_uri_for(item.uri, config),
        claimed_at=now,
        claimed_by=ingest_run,
    )


def failed_reports(reports: Iterable[VideoReport]) -> list[VideoReport]:
    """The videos whose latest attempt failed: retried now, to be retried later, or given up."""
    return [report for report in reports if report.kind in ("retry", "given_up")]


def swap_conf(claim: Claim, config: IngestConfig) -> dict[str, Any]:
    """The ``facefusion_swap`` conf of one attempt: the fixed source face and options, this video, its output."""
    return {
        "source_uris": list(config.source_uris),
        "target_uri": claim.target_uri,
        "output_uri": claim.output_uri,
        "options": dict(config.options),
    }
