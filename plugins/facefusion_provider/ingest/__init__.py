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
A scan lists the whole prefix (on a schedule), or only the objects that S3 notifications name (``events``).
No Airflow, no I/O here.
"""

from __future__ import annotations

from facefusion_provider.ingest.config import (
    DEFAULT_EXTENSIONS,
    AllowedPrefixes,
    IngestConfig,
    IngestMode,
    check_allowed_config,
    describe_errors,
    parse_ingest_config,
)
from facefusion_provider.ingest.discovery import FoundJobs, Job, JobReport, Listed, ReportKind, find_jobs, job_id_of
from facefusion_provider.ingest.events import NotificationQueue, Notified, notified_files, notified_objects
from facefusion_provider.ingest.ledger import (
    JobAttempt,
    JobHistory,
    Outcome,
    OutcomeState,
    RunFailure,
    RunState,
    claim_uri,
    histories_from_listing,
    ledger_folder,
    outcome_for,
    outcome_uri,
    swap_run_id,
    unfinished_attempts,
)
from facefusion_provider.ingest.manifests import checked_job, manifest_entries
from facefusion_provider.ingest.planning import IngestPlan, Start, plan_ingest, swap_conf

__all__ = [
    "DEFAULT_EXTENSIONS",
    "AllowedPrefixes",
    "FoundJobs",
    "IngestConfig",
    "IngestMode",
    "IngestPlan",
    "Job",
    "JobAttempt",
    "JobHistory",
    "JobReport",
    "Listed",
    "NotificationQueue",
    "Notified",
    "Outcome",
    "OutcomeState",
    "ReportKind",
    "RunFailure",
    "RunState",
    "Start",
    "check_allowed_config",
    "checked_job",
    "claim_uri",
    "describe_errors",
    "find_jobs",
    "histories_from_listing",
    "job_id_of",
    "ledger_folder",
    "manifest_entries",
    "notified_files",
    "notified_objects",
    "outcome_for",
    "outcome_uri",
    "parse_ingest_config",
    "plan_ingest",
    "swap_conf",
    "swap_run_id",
    "unfinished_attempts",
]
