"""What the files under the input prefix make, by mode: new videos x fixed faces, new faces x fixed targets, or the
lines of manifests. A job is what it swaps (its conf), so the same conf found twice is one job."""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.ingest.config import ANYWHERE, AllowedPrefixes, IngestConfig, IngestRecord
from facefusion_provider.ingest.manifests import checked_job, manifest_entries


class Listed(IngestRecord):
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
    "outside",  # a notified object outside input_prefix or the input allow-list: never run
    "ignored",  # a queue message that is no S3 event notification
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
    allowed: AllowedPrefixes = ANYWHERE,
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
                conf = checked_job(entry, config.options, allowed)
            except InvalidOptionError as error:
                reports.append(JobReport(label, "invalid", detail=str(error)))
                continue
            merged = {**conf, "options": {**config.options, **conf["options"]}}
            jobs.append(_job(label, merged, manifest.modified))
    return FoundJobs(jobs, reports)
