"""Run leases for tests (docs/protocol.md): a lease of either holder kind, and an object aged as if its holder had
stopped renewing it."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from facefusion_provider import storage
from facefusion_provider.work.records import RunHolder, RunLease


def run_lease(
    run: str, *, kind: str = "airflow", ttl: float = 600.0, output_uri: str = "file:///o.mp4", **fields: object
) -> RunLease:
    holder = (
        RunHolder(kind="airflow", dag_id="facefusion_swap", run_id=run)
        if kind == "airflow"
        else RunHolder(kind="cli", host="laptop", pid=4242)
    )
    return RunLease.model_validate(
        {
            "holder": holder.model_dump(),
            "ttl_seconds": ttl,
            "output_uri": output_uri,
            "created_at": datetime.now(UTC),
            **fields,
        }
    )


def age(uri: str, seconds: float) -> None:
    """Make the local object at ``uri`` look last written ``seconds`` ago (its holder stopped renewing it)."""
    path = storage.local_path(uri)
    assert path is not None, uri
    when = time.time() - seconds
    os.utime(path, (when, when))
