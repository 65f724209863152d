"""The ledger's schema (``{ledger_prefix}jobs/{job_id}/``): one record per attempt, created exclusively, and one outcome
per finished attempt whose state is in its name, so one listing tells the state of every job."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from facefusion_provider.ingest.config import IngestRecord

LEDGER_FOLDER = "jobs"
SWAP_RUN_PREFIX = "ingest__"
RunState = Literal["queued", "running", "success", "failed", "missing"]
"""The state of an attempt's swap run in Airflow; ``missing`` when no run with its id exists (not triggered yet)."""

FINISHED_RUN_STATES: frozenset[str] = frozenset({"success", "failed"})
BAD_INPUT_FAILURE_CLASSES = frozenset({"invalid_input", "invalid_option", "input_missing", "invalid_media", "no_face"})
"""Failures of the job itself, which no later attempt mends; models missing, storage denied or a broken work are the
deployment's, mended by whoever runs it."""


class JobAttempt(IngestRecord):
    """``attempt-NNN.json``: this attempt of this job belongs to the ingestion run that created the object."""

    job_id: str
    label: str
    conf: dict[str, Any]
    attempt: int = Field(ge=1)
    run_id: str
    claimed_at: datetime
    claimed_by: str  # the ingestion DAG run that created the attempt


OutcomeState = Literal["success", "failed", "rejected"]


class Outcome(IngestRecord):
    """``attempt-NNN.<state>.json``: how the attempt's swap run ended (``rejected``: on bad input, not retried)."""

    job_id: str
    attempt: int = Field(ge=1)
    run_id: str
    state: OutcomeState
    recorded_at: datetime
    detail: str = ""


@dataclass
class JobHistory:
    """What the ledger's listing says about one job, plus the content of its latest attempt while that is unfinished."""

    attempts: set[int] = field(default_factory=set)
    outcomes: dict[int, OutcomeState] = field(default_factory=dict)
    pending: JobAttempt | None = None  # loaded only for an unfinished latest attempt (its run must be looked up)

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
