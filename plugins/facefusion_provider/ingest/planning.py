"""Which jobs a scan starts, retries, resumes or reports, oldest first, within the scan's bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from facefusion_provider.ingest.config import IngestConfig
from facefusion_provider.ingest.discovery import Job, JobReport
from facefusion_provider.ingest.ledger import JobAttempt, JobHistory, RunState, swap_run_id
from facefusion_provider.work.run_inputs import CONF_INPUT_FIELDS, NESTED_OPTIONS_KEY


@dataclass(frozen=True)
class Start:
    """A swap run to start. ``claim`` is new (to create exclusively first) unless ``resume`` is set."""

    claim: JobAttempt
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


def _orphaned(claim: JobAttempt, now: datetime, ingest_run: str, config: IngestConfig) -> bool:
    """No run for this claim: its own ingestion run is retrying, or that run died before it triggered anything."""
    return claim.claimed_by == ingest_run or now - claim.claimed_at >= timedelta(minutes=config.orphan_after_minutes)


def _claim(job: Job, attempt: int, *, now: datetime, ingest_run: str) -> JobAttempt:
    return JobAttempt(
        job_id=job.job_id,
        label=job.label,
        conf=job.conf,
        attempt=attempt,
        run_id=swap_run_id(job.job_id, attempt),
        claimed_at=now,
        claimed_by=ingest_run,
    )


def swap_conf(claim: JobAttempt) -> dict[str, Any]:
    """The swap DAG's conf of one attempt, flat as the trigger form sends it. The job's own conf keeps its options
    nested and the versions that only made its id: its id, and the claims already in ledgers, depend on that shape."""
    return {**{key: claim.conf[key] for key in CONF_INPUT_FIELDS}, **claim.conf.get(NESTED_OPTIONS_KEY, {})}
