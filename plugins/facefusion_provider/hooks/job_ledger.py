"""The ingestion DAG's reads and writes: the files under the input prefix and the ledger of claims and outcomes."""

from __future__ import annotations

import json
from collections.abc import Iterable

from pydantic import ValidationError

from facefusion_provider import ingest, storage
from facefusion_provider.exceptions import InputMissingError
from facefusion_provider.hooks.storage import FaceFusionStorageHook


class IngestLedgerHook(FaceFusionStorageHook):
    """Lists videos and keeps the ledger on any fsspec store; ``s3://`` uses the AWS connection (``aws_conn_id``).

    A claim is created with an exclusive write (S3 ``If-None-Match: *``), so of two ingestion runs that reach the same
    job at the same time exactly one gets it.
    """

    hook_name = "FaceFusion ingestion ledger"

    def list_files(self, input_prefix: str) -> list[ingest.Listed]:
        """Every file under ``input_prefix`` with its version (ETag), size and modification time."""
        with self.storage_access(input_prefix):
            found = storage.list_files(input_prefix)
        return [ingest.Listed(uri=o.uri, version=o.version, size=o.size, modified=o.modified) for o in found]

    def stat_file(self, uri: str) -> ingest.Listed | None:
        """One file as ``list_files`` lists it (one HEAD), or None when it is gone."""
        with self.storage_access(uri):
            found = storage.stat(uri)
        if found is None:
            return None
        return ingest.Listed(uri=found.uri, version=found.version, size=found.size, modified=found.modified)

    def read(self, uri: str) -> bytes:
        """A manifest's bytes."""
        with self.storage_access(uri):
            return storage.read_bytes(uri)

    def load(self, ledger_prefix: str) -> dict[str, ingest.JobHistory]:
        """Every job's attempts and outcomes from one listing, plus the claims of unfinished attempts."""
        with self.storage_access(ledger_prefix):
            names = [o.uri for o in storage.list_files(ingest.ledger_folder(ledger_prefix))]
        histories = ingest.histories_from_listing(names)
        for job, attempt in ingest.unfinished_attempts(histories):
            histories[job].pending = self.read_claim(ledger_prefix, job, attempt)
        return histories

    def read_claim(self, ledger_prefix: str, job: str, attempt: int) -> ingest.JobAttempt | None:
        uri = ingest.claim_uri(ledger_prefix, job, attempt)
        try:
            with self.storage_access(uri):
                return ingest.JobAttempt.model_validate_json(storage.read_bytes(uri))
        except (InputMissingError, ValidationError, ValueError):
            self.log.warning("Unreadable claim %s: its job stays in flight until an outcome is recorded", uri)
            return None

    def claim(self, ledger_prefix: str, claim: ingest.JobAttempt) -> bool:
        """Create the claim of this attempt; False when another run created it first (that run owns the attempt).

        A conditional PUT whose answer was lost is retried and then finds its own object: reading it back tells a
        claim this run made from one another run made.
        """
        uri = ingest.claim_uri(ledger_prefix, claim.job_id, claim.attempt)
        with self.storage_access(uri):
            if storage.write_bytes_exclusive(uri, _json(claim)):
                return True
        return self.read_claim(ledger_prefix, claim.job_id, claim.attempt) == claim

    def record_outcomes(self, ledger_prefix: str, outcomes: Iterable[ingest.Outcome]) -> list[ingest.Outcome]:
        """Record how attempts ended; returns those this call recorded (an overlapping run may have been first)."""
        recorded = []
        for outcome in outcomes:
            uri = ingest.outcome_uri(ledger_prefix, outcome.job_id, outcome.attempt, outcome.state)
            with self.storage_access(uri):
                if storage.write_bytes_exclusive(uri, _json(outcome)):
                    recorded.append(outcome)
        return recorded


def _json(record: ingest.JobAttempt | ingest.Outcome) -> bytes:
    return json.dumps(record.model_dump(mode="json"), indent=2, sort_keys=True).encode()
