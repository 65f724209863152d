"""Batch ingestion from a prefix: which swap jobs its files make, which to start, retry or report. Pure logic.

Three modes name what a new file means:

- ``videos`` (new videos x fixed faces): each new video under the prefix is swapped with ``source_uris``; its output
  keeps the video's path below the prefix.
- ``faces`` (new faces x fixed targets, the content factory): each new image directly under the prefix, or each
  folder of images of one person, is one identity, swapped into every video of ``target_uris``; outputs are named
  after the identity (``alice.mp4``), and after the target too when there are several (``alice/intro.mp4``).
- ``manifests``: each JSON Lines (``.jsonl``) or CSV file under the prefix lists jobs, one per line, each checked by
  the same rules as a conf; a bad line is reported by its line number and the others still start.

A job is what it swaps (its conf), so each starts at most once however it reappears (a re-uploaded manifest, a copy of
a face). The ledger (``{ledger_prefix}jobs/{job_id}/``) holds one claim per attempt (``attempt-001.json``), created
exclusively, and one outcome per finished attempt whose state is in its name (``.success``, ``.failed``, or
``.rejected`` for bad input, which is never retried), so one listing tells the state of every job. Each attempt starts
the swap run ``swap_run_id(job_id, attempt)``, so even a repeated trigger of one attempt cannot start a second run.
No Airflow, no I/O here.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.job.inputs import CONF_FIELDS, check_output_format, check_sources, run_uris
from facefusion_provider.options import parse_options
from facefusion_provider.storage.uris import check_allowed

IngestMode = Literal["videos", "faces", "manifests"]
VIDEO_EXTENSIONS = (".mp4", ".mov", ".m4v", ".mkv")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
MANIFEST_EXTENSIONS = (".jsonl", ".csv")
DEFAULT_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "videos": VIDEO_EXTENSIONS,
    "faces": IMAGE_EXTENSIONS,
    "manifests": MANIFEST_EXTENSIONS,
}
LEDGER_FOLDER = "jobs"
SWAP_RUN_PREFIX = "ingest__"
CSV_SOURCE_SEPARATOR = ";"  # several source images in one CSV cell
JOB_KEYS = frozenset({"source_uris", "target_uri", "output_uri", "options"})

RunState = Literal["queued", "running", "success", "failed", "missing"]
"""The state of an attempt's swap run in Airflow; ``missing`` when no run with its id exists (not triggered yet)."""

FINISHED_RUN_STATES: frozenset[str] = frozenset({"success", "failed"})
BAD_INPUT_FAILURE_CLASSES = frozenset({"invalid_input", "invalid_option", "input_missing", "invalid_media", "no_face"})
"""Failures of the job itself, which no later attempt mends; models missing, storage denied or a broken work are the
deployment's, mended by whoever runs it."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IngestConfig(_Record):
    """The ingestion DAG's Params, checked."""

    mode: IngestMode = Field(default="videos", description="What a new file under input_prefix means.")
    input_prefix: str = Field(description="Prefix whose new files are ingested, e.g. s3://bucket/incoming/.")
    output_prefix: str = Field(description="Where the outputs go.")
    ledger_prefix: str = Field(description="Where the claims and outcomes live (one object per attempt).")
    source_uris: list[str] = Field(default_factory=list, description="videos mode: the fixed source face image(s).")
    target_uris: list[str] = Field(default_factory=list, description="faces mode: the standard target video(s).")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of every swap run.")
    extensions: list[str] | None = Field(default=None, min_length=1)
    min_size_bytes: int = Field(default=1, ge=0)
    max_size_bytes: int = Field(default=20 * 1024**3, ge=1)
    max_runs_per_scan: int = Field(default=10, ge=1, le=1024)
    max_attempts: int = Field(default=3, ge=1, le=100)
    orphan_after_minutes: float = Field(default=30.0, ge=0)
    settle_minutes: float = Field(default=2.0, ge=0)

    @field_validator("input_prefix", "output_prefix", "ledger_prefix")
    @classmethod
    def _folder(cls, value: str) -> str:
        if "://" not in value or value.split("://", 1)[1].strip("/") == "":
            raise ValueError(f"expected a URI with a bucket or folder, such as s3://bucket/prefix/, got {value!r}")
        return value.rstrip("/") + "/"

    @field_validator("extensions")
    @classmethod
    def _dotted_lowercase(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        return sorted({ext.lower() if ext.startswith(".") else "." + ext.lower() for ext in value})

    @model_validator(mode="after")
    def _consistent(self) -> IngestConfig:
        if self.max_size_bytes < self.min_size_bytes:
            raise ValueError(f"max_size_bytes ({self.max_size_bytes}) is below min_size_bytes ({self.min_size_bytes})")
        if self.output_prefix == self.input_prefix:
            raise ValueError("output_prefix must differ from input_prefix: every output would overwrite its input")
        if self.mode == "videos" and not self.source_uris:
            raise ValueError("source_uris: the videos mode needs the source face image(s) to swap in")
        if self.mode == "faces" and not self.target_uris:
            raise ValueError("target_uris: the faces mode needs the target video(s) to swap each face into")
        return self

    @property
    def file_extensions(self) -> tuple[str, ...]:
        return tuple(self.extensions) if self.extensions else DEFAULT_EXTENSIONS[self.mode]

    def excluded_prefixes(self) -> tuple[str, ...]:
        """Our own outputs and ledger (allowed under the input prefix): never inputs to ingest."""
        return (self.output_prefix, self.ledger_prefix)


@dataclass(frozen=True)
class AllowedPrefixes:
    """The deployment's allow-lists (``[facefusion] allowed_input_prefixes`` and ``allowed_output_prefixes``); an
    empty list allows anywhere."""

    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


def check_allowed_config(config: IngestConfig, allowed: AllowedPrefixes) -> None:
    """Every prefix and fixed input of ``config`` lies inside the allow-lists, so no run the scan starts fails on them."""
    for field_name, uri, prefixes, kind in (
        ("input_prefix", config.input_prefix, allowed.inputs, "input"),
        ("output_prefix", config.output_prefix, allowed.outputs, "output"),
        ("ledger_prefix", config.ledger_prefix, allowed.outputs, "output"),
        *((f"source_uris[{i}]", uri, allowed.inputs, "input") for i, uri in enumerate(config.source_uris)),
        *((f"target_uris[{i}]", uri, allowed.inputs, "input") for i, uri in enumerate(config.target_uris)),
    ):
        check_allowed(uri, prefixes, field=field_name, kind=kind)


def parse_ingest_config(values: Mapping[str, Any]) -> IngestConfig:
    """Check the Params; a problem is an ``InvalidOptionError`` naming the param."""
    try:
        return IngestConfig.model_validate(dict(values))
    except ValidationError as error:
        raise InvalidOptionError("invalid ingestion params: " + describe_errors(error)) from None


def describe_errors(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'params'}: {item['msg']}".replace("Value error, ", "")
        for item in error.errors()
    )


class Listed(_Record):
    """A file found under the input prefix."""

    uri: str
    version: str
    size: int
    modified: float


@dataclass(frozen=True)
class Job:
    """One swap run's worth of work, found under the input prefix: its conf, and how a person names it."""

    job_id: str
    label: str  # the video, "alice x intro.mp4", or "jobs.jsonl line 3"
    conf: dict[str, Any]
    modified: float  # when its newest input appeared: older jobs start first


ReportKind = Literal[
    "start",  # first attempt claimed now
    "retry",  # a failed job, next attempt claimed now
    "resume",  # claimed before but never triggered: trigger again (same run id)
    "in_flight",  # its swap run is queued or running
    "done",
    "given_up",  # failed max_attempts times
    "rejected",  # its swap run failed on bad input: never retried
    "deferred",  # over this scan's bound: a later scan takes it
    "settling",  # an identity folder still receiving images
    "too_small",
    "too_large",
    "invalid",  # a manifest line that is not a valid job
]


@dataclass(frozen=True)
class JobReport:
    label: str
    kind: ReportKind
    attempt: int = 0
    run_id: str | None = None
    detail: str = ""
    job_id: str = ""  # empty for files that make no job

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "kind": self.kind,
            "attempt": self.attempt,
            "run_id": self.run_id,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class FoundJobs:
    jobs: list[Job]
    reports: list[JobReport]  # files that make no job: out of bounds, settling, invalid lines


def job_id_of(conf: Mapping[str, Any]) -> str:
    """A job is what it swaps: the same conf found twice is one job."""
    return hashlib.sha256(json.dumps(conf, sort_keys=True).encode()).hexdigest()[:24]


def find_jobs(
    listed: Sequence[Listed],
    config: IngestConfig,
    *,
    now: float,
    read: Callable[[str], bytes],
    allowed: AllowedPrefixes = AllowedPrefixes(),
) -> FoundJobs:
    """The jobs the files under the input prefix make, by ``config.mode`` (``read`` fetches a manifest); jobs that
    would write one output are reported, none started."""
    candidates, reports = [], []
    for item in listed:
        if not is_candidate(item, config):
            continue
        if item.size < config.min_size_bytes or item.size > config.max_size_bytes:
            kind: ReportKind = "too_small" if item.size < config.min_size_bytes else "too_large"
            limits = f"{config.min_size_bytes}..{config.max_size_bytes} bytes"
            reports.append(JobReport(item.uri, kind, detail=f"{item.size} bytes; allowed {limits}"))
            continue
        candidates.append(item)
    if config.mode == "videos":
        found = FoundJobs([_video_job(item, config) for item in candidates], [])
    elif config.mode == "faces":
        found = _face_jobs(candidates, config, now)
    else:
        found = _manifest_jobs(candidates, config, read, allowed)
    jobs, collisions = _one_job_per_output(found.jobs)
    return FoundJobs(jobs, reports + found.reports + collisions)


def _one_job_per_output(jobs: Sequence[Job]) -> tuple[list[Job], list[JobReport]]:
    """Jobs that would write one output (two faces named alike, two manifest lines) are all reported and none starts:
    which of them should win is the user's to say."""
    distinct: dict[str, Job] = {}
    for job in jobs:
        distinct.setdefault(job.job_id, job)  # the same job found twice is one job
    by_output: dict[str, list[Job]] = {}
    for job in distinct.values():
        by_output.setdefault(str(job.conf["output_uri"]), []).append(job)
    kept = [job for job in distinct.values() if len(by_output[str(job.conf["output_uri"])]) == 1]
    reports = [
        JobReport(
            job.label,
            "invalid",
            detail=f"output_uri {output} is also the output of {', '.join(o.label for o in same if o is not job)}; "
            "give each job its own output",
        )
        for output, same in by_output.items()
        if len(same) > 1
        for job in same
    ]
    return kept, reports


def is_candidate(item: Listed, config: IngestConfig) -> bool:
    """A file under the input prefix with an allowed extension, outside our own outputs and ledger."""
    if item.uri.endswith("/") or not item.uri.startswith(config.input_prefix):
        return False
    if any(item.uri.startswith(prefix) for prefix in config.excluded_prefixes()):
        return False
    return posixpath.splitext(item.uri)[1].lower() in config.file_extensions


def _job(label: str, conf: dict[str, Any], modified: float) -> Job:
    return Job(job_id_of(conf), label, conf, modified)


def _swap_conf(sources: Sequence[str], target: str, output: str, config: IngestConfig) -> dict[str, Any]:
    return {"source_uris": list(sources), "target_uri": target, "output_uri": output, "options": dict(config.options)}


def _video_job(item: Listed, config: IngestConfig) -> Job:
    """The output keeps the input's path below the input prefix (subfolders included) and its name."""
    output = config.output_prefix + item.uri[len(config.input_prefix) :]
    conf = _swap_conf(config.source_uris, item.uri, output, config)
    return _job(item.uri, {**conf, "version": item.version}, item.modified)


def _face_jobs(images: Sequence[Listed], config: IngestConfig, now: float) -> FoundJobs:
    """One identity per image directly under the prefix, one per folder of images; each swapped into every target.
    Named by the image's stem or the folder (``alice.jpg`` and ``alice/`` both make ``alice``: their outputs clash)."""
    identities: dict[tuple[str, bool], list[Listed]] = {}
    for image in images:
        relative = image.uri[len(config.input_prefix) :]
        folder, _, name = relative.partition("/")
        key = (folder, True) if name else (relative, False)
        identities.setdefault(key, []).append(image)
    jobs, reports = [], []
    for (found_as, is_folder), found in sorted(identities.items()):
        identity = found_as if is_folder else posixpath.splitext(found_as)[0]
        newest = max(image.modified for image in found)
        if is_folder and now - newest < config.settle_minutes * 60:
            reports.append(JobReport(identity, "settling", detail=f"images still arriving ({len(found)} so far)"))
            continue
        sources = sorted(image.uri for image in found)
        versions = {image.uri: image.version for image in found}
        for target in config.target_uris:
            stem, extension = posixpath.splitext(posixpath.basename(target.rstrip("/")))
            name = f"{identity}/{stem}{extension}" if len(config.target_uris) > 1 else f"{identity}{extension}"
            conf = _swap_conf(sources, target, config.output_prefix + name, config)
            label = f"{identity} x {posixpath.basename(target)}"
            jobs.append(_job(label, {**conf, "versions": versions}, newest))
    return FoundJobs(jobs, reports)


def _manifest_jobs(
    manifests: Sequence[Listed], config: IngestConfig, read: Callable[[str], bytes], allowed: AllowedPrefixes
) -> FoundJobs:
    jobs, reports = [], []
    for manifest in manifests:
        name = posixpath.basename(manifest.uri)
        for line, entry in manifest_entries(manifest.uri, read(manifest.uri)):
            label = f"{name} line {line}"
            try:
                conf = checked_job(entry, allowed)
            except InvalidOptionError as error:
                reports.append(JobReport(label, "invalid", detail=str(error)))
                continue
            merged = {**conf, "options": {**config.options, **conf["options"]}}
            jobs.append(_job(label, merged, manifest.modified))
    return FoundJobs(jobs, reports)


def manifest_entries(uri: str, data: bytes) -> list[tuple[int, Any]]:
    """``(line number, job)`` of each non-empty line; a line that does not parse is its error message instead."""
    text = data.decode("utf-8", errors="replace")
    if uri.lower().endswith(".csv"):
        return _csv_entries(text)
    entries: list[tuple[int, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((number, json.loads(line)))
        except ValueError as error:
            entries.append((number, f"not a JSON object: {error}"))
    return entries


def _csv_entries(text: str) -> list[tuple[int, Any]]:
    """A header row (source_uris, target_uri, output_uri, optional options), then one job a row; several source
    images are separated by ';' and options is a JSON object."""
    reader = csv.DictReader(io.StringIO(text))
    entries: list[tuple[int, Any]] = []
    for row in reader:
        number = reader.line_num
        if not any((value or "").strip() for value in row.values()):
            continue
        entry: dict[str, Any] = {key: (value or "").strip() for key, value in row.items() if key is not None}
        if None in row:
            entries.append((number, "more cells than the header names"))
            continue
        entry["source_uris"] = [
            s.strip() for s in entry.get("source_uris", "").split(CSV_SOURCE_SEPARATOR) if s.strip()
        ]
        try:
            entry["options"] = json.loads(entry["options"]) if entry.get("options") else {}
        except ValueError as error:
            entries.append((number, f"options: not a JSON object: {error}"))
            continue
        entries.append((number, entry))
    return entries


def checked_job(entry: Any, allowed: AllowedPrefixes = AllowedPrefixes()) -> dict[str, Any]:
    """A manifest's job checked by a conf's rules (options, URIs, output format), normalised; or an
    ``InvalidOptionError`` naming the field. Whether the files exist is checked by the swap run's ``validate``."""
    if isinstance(entry, str):
        raise InvalidOptionError(entry)
    if not isinstance(entry, dict):
        raise InvalidOptionError(f"expected an object with {', '.join(sorted(JOB_KEYS))}, got {entry!r}")
    if unknown := sorted(set(entry) - JOB_KEYS):
        raise InvalidOptionError(f"{unknown[0]}: unknown key; allowed: {', '.join(sorted(JOB_KEYS))}")
    options = entry.get("options") or {}
    if not isinstance(options, dict):
        raise InvalidOptionError(f"options: expected an object of option names and values, got {options!r}")
    parsed = parse_options(options, where="options")
    sources = entry.get("source_uris")
    if not isinstance(sources, list):
        raise InvalidOptionError(f"source_uris: expected a list of paths or URIs, got {sources!r}")
    uris = run_uris(
        sources,
        entry.get("target_uri") or "",
        entry.get("output_uri") or "",
        fields=CONF_FIELDS,
        relative=False,
        allowed_inputs=allowed.inputs,
        allowed_outputs=allowed.outputs,
    )
    assert uris.output_uri is not None
    check_sources(uris.source_uris, parsed, CONF_FIELDS)
    check_output_format(uris.output_uri, parsed, CONF_FIELDS)
    return {
        "source_uris": uris.source_uris,
        "target_uri": uris.target_uri,
        "output_uri": uris.output_uri,
        "options": {k: v for k, v in options.items()},
    }


# --- the ledger ------------------------------------------------------------------------------------------------


class Claim(_Record):
    """``attempt-NNN.json``: this attempt of this job belongs to the ingestion run that created the object."""

    job_id: str
    label: str
    conf: dict[str, Any]
    attempt: int = Field(ge=1)
    run_id: str
    claimed_at: datetime
    claimed_by: str  # the ingestion DAG run that created the claim


OutcomeState = Literal["success", "failed", "rejected"]


class Outcome(_Record):
    """``attempt-NNN.<state>.json``: how the attempt's swap run ended (``rejected``: on bad input, not retried)."""

    job_id: str
    attempt: int = Field(ge=1)
    run_id: str
    state: OutcomeState
    recorded_at: datetime
    detail: str = ""


@dataclass
class JobHistory:
    """What the ledger's listing says about one job, plus the content of its latest claim while that is unfinished."""

    attempts: set[int] = field(default_factory=set)
    outcomes: dict[int, OutcomeState] = field(default_factory=dict)
    pending: Claim | None = None  # loaded only for an unfinished latest attempt (its run must be looked up)

    @property
    def latest_attempt(self) -> int:
        return max(self.attempts, default=0)

    @property
    def unfinished(self) -> bool:
        return self.latest_attempt > 0 and self.latest_attempt not in self.outcomes


def swap_run_id(job: str, attempt: int) -> str:
    """The swap run of one attempt: deterministic, so Airflow itself refuses a second run for it."""
    return f"{SWAP_RUN_PREFIX}{job}__{attempt}"


_LEDGER_NAME = re.compile(r"/([0-9a-f]{24})/attempt-([0-9]{3,})(?:\.(success|failed|rejected))?\.json$")


def ledger_folder(ledger_prefix: str) -> str:
    return f"{ledger_prefix}{LEDGER_FOLDER}/"


def claim_uri(ledger_prefix: str, job: str, attempt: int) -> str:
    return f"{ledger_folder(ledger_prefix)}{job}/attempt-{attempt:03d}.json"


def outcome_uri(ledger_prefix: str, job: str, attempt: int, state: OutcomeState) -> str:
    return f"{ledger_folder(ledger_prefix)}{job}/attempt-{attempt:03d}.{state}.json"


def histories_from_listing(uris: Iterable[str]) -> dict[str, JobHistory]:
    """Each job's attempts and outcomes from the names of the ledger's objects (other names are ignored)."""
    histories: dict[str, JobHistory] = {}
    for uri in uris:
        match = _LEDGER_NAME.search(uri)
        if match is None:
            continue
        job, attempt, state = match.group(1), int(match.group(2)), match.group(3)
        history = histories.setdefault(job, JobHistory())
        history.attempts.add(attempt)
        if state:
            history.outcomes[attempt] = state  # type: ignore[assignment]  # the pattern admits only OutcomeState
    return histories


def unfinished_attempts(histories: Mapping[str, JobHistory]) -> list[tuple[str, int]]:
    """``(job_id, attempt)`` of every latest attempt without an outcome: its claim is read and its run looked up."""
    return sorted((job, history.latest_attempt) for job, history in histories.items() if history.unfinished)


@dataclass(frozen=True)
class RunFailure:
    """What ended a swap run without retries: the error's class (``FaceFusionError.failure_class``) and message."""

    failure_class: str
    message: str

    @property
    def is_bad_input(self) -> bool:
        return self.failure_class in BAD_INPUT_FAILURE_CLASSES


def outcome_for(
    job: str, attempt: int, state: RunState, now: datetime, *, failure: RunFailure | None = None
) -> Outcome | None:
    """An outcome to record when the attempt's swap run has finished, else None. A run that failed on bad input is
    ``rejected`` (never retried); one that failed on the deployment (models, storage access) is ``failed``, so a later
    scan retries it once that is mended."""
    if state not in FINISHED_RUN_STATES:
        return None
    outcome: OutcomeState = (
        "success" if state == "success" else "rejected" if failure is not None and failure.is_bad_input else "failed"
    )
    return Outcome(
        job_id=job,
        attempt=attempt,
        run_id=swap_run_id(job, attempt),
        state=outcome,
        recorded_at=now,
        detail=failure.message if failure is not None and state != "success" else "",
    )


@dataclass(frozen=True)
class Start:
    """A swap run to start. ``claim`` is new (to create exclusively first) unless ``resume`` is set."""

    claim: Claim
    resume: bool = False


@dataclass(frozen=True)
class IngestPlan:
    starts: list[Start]
    reports: list[JobReport]


def plan_ingest(
    jobs: Sequence[Job],
    histories: Mapping[str, JobHistory],
    run_states: Mapping[str, RunState],
    config: IngestConfig,
    *,
    now: datetime,
    ingest_run: str,
) -> IngestPlan:
    """Decide, oldest first, what to start in this scan (at most ``max_runs_per_scan``).

    ``run_states`` maps the run id of every unfinished claim to its swap run's state. A claim whose run does not exist
    is resumed when this same ingestion run made it (a retried task) or when it is older than ``orphan_after_minutes``
    (its ingestion run died between claim and trigger); the deterministic run id keeps a resume from starting twice.
    """
    starts: list[Start] = []
    reports: list[JobReport] = []
    for job in sorted(jobs, key=lambda j: (j.modified, j.label)):
        history = histories.get(job.job_id, JobHistory())
        latest = history.latest_attempt
        run_id = swap_run_id(job.job_id, latest)
        state = run_states.get(run_id, "missing")
        outcome = history.outcomes.get(latest)
        start: Start | None = None
        if latest == 0:
            start = Start(_claim(job, 1, now=now, ingest_run=ingest_run))
            report = JobReport(job.label, "start", 1, start.claim.run_id)
        elif outcome == "success":
            report = JobReport(job.label, "done", latest, run_id)
        elif outcome == "rejected":
            report = JobReport(job.label, "rejected", latest, run_id, "bad input: its run failed for good")
        elif outcome == "failed" and latest < config.max_attempts:
            start = Start(_claim(job, latest + 1, now=now, ingest_run=ingest_run))
            detail = f"attempt {latest} of {config.max_attempts} failed in run {run_id}"
            report = JobReport(job.label, "retry", latest + 1, start.claim.run_id, detail)
        elif outcome == "failed":
            detail = f"failed {latest} of {config.max_attempts} attempts; last run {run_id}"
            report = JobReport(job.label, "given_up", latest, run_id, detail)
        elif (
            (claim := history.pending) is not None and state == "missing" and _orphaned(claim, now, ingest_run, config)
        ):
            start = Start(claim, resume=True)
            report = JobReport(job.label, "resume", latest, run_id, "claimed, never started")
        else:
            report = JobReport(job.label, "in_flight", latest, run_id, f"run {state}")
        if start is not None and len(starts) >= config.max_runs_per_scan:
            report = JobReport(job.label, "deferred", detail="over max_runs_per_scan")
            start = None
        if start is not None:
            starts.append(start)
        reports.append(replace(report, job_id=job.job_id))
    return IngestPlan(starts=starts, reports=reports)


def _orphaned(claim: Claim, now: datetime, ingest_run: str, config: IngestConfig) -> bool:
    """No run for this claim: its own ingestion run is retrying, or that run died before it triggered anything."""
    return claim.claimed_by == ingest_run or now - claim.claimed_at >= timedelta(minutes=config.orphan_after_minutes)


def _claim(job: Job, attempt: int, *, now: datetime, ingest_run: str) -> Claim:
    return Claim(
        job_id=job.job_id,
        label=job.label,
        conf=job.conf,
        attempt=attempt,
        run_id=swap_run_id(job.job_id, attempt),
        claimed_at=now,
        claimed_by=ingest_run,
    )


def swap_conf(claim: Claim) -> dict[str, Any]:
    """The swap DAG's conf of one attempt (the job's conf without the versions that only made its id)."""
    return {key: value for key, value in claim.conf.items() if key in JOB_KEYS}
