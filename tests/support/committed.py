"""Work folders as the DAG makes them, for tests on any store: the content-addressed work URI of some inputs, a work
with every segment committed, the file a segment's marker names, and a run's lease."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from facefusion_provider import storage, worker
from facefusion_provider.options import Options
from facefusion_provider.work import leases
from facefusion_provider.work.ids import work_id
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.records import RunHolder, RunLease, SegmentMarker, WorkSpec


def work_uri_for(work_root: str, sources: Sequence[str], target: str, **options: Any) -> str:
    """The work folder that ``validate`` would name for these inputs and options."""
    ids = [storage.content_id(storage.normalize_uri(source)) for source in sources]
    work = work_id(storage.content_id(storage.normalize_uri(target)), ids, Options(**options))
    return WorkLayout.under(work_root, work).work_uri


def committed_work(work_root: str, target: str, sources: Sequence[str] = (), **options: Any) -> tuple[str, WorkSpec]:
    """A prepared work with every segment committed (by one worker): ``(work_uri, work spec)``."""
    work_uri = work_uri_for(work_root, sources, target, **options)
    spec = worker.prepare(work_uri, list(sources), target, **options)
    worker.swap_span(work_uri, target, 0, len(spec.segments))
    return work_uri, spec


def segment_file_uri(work_uri: str, index: int) -> str:
    """The committed file of segment ``index`` (its marker names it)."""
    layout = WorkLayout(work_uri)
    marker = SegmentMarker.model_validate_json(storage.read_bytes(layout.segment_marker(index)))
    return layout.segment_file(marker.file)


def hold_run_lease(
    layout: WorkLayout,
    run_key: str,
    target: str,
    *,
    age: timedelta = timedelta(0),
    priority: int = 0,
    output_uri: str = "file:///out.mp4",
    options: dict[str, Any] | None = None,
    ttl: float = 3600.0,
    state: Literal["active", "kept"] = "active",
) -> RunLease:
    """The lease ``validate`` writes for a run from Airflow over ``target`` and to ``output_uri``, written ``age``
    ago (a local file's modification time too: nothing renewed it since)."""
    started = datetime.now(UTC) - age
    lease = RunLease(
        holder=RunHolder(kind="airflow", dag_id="facefusion_swap", run_id=run_key),
        ttl_seconds=ttl,
        state=state,
        output_uri=output_uri,
        created_at=started,
        target_uri=target,
        priority=priority,
        options=None if options is None else Options(**options).model_dump(mode="json"),
    )
    leases.hold(layout, run_key, lease)
    path = storage.local_path(layout.run_lease(run_key))
    if path is not None:
        os.utime(path, (started.timestamp(), started.timestamp()))
    return lease
