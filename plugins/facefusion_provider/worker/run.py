"""``run``: the whole work in one process (prepare, every segment in one pass, merge), the baseline the DAG is measured
against. It holds a lease on the shared work like a DAG run does, and removes the work afterwards unless another run
holds one too, or ``keep_work`` is set."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from facefusion_provider.contract import worker_settings
from facefusion_provider.options import Options
from facefusion_provider.work import leases, liveness
from facefusion_provider.work.access import checked_uris, default_work_root, resolve_options
from facefusion_provider.work.ids import work_id
from facefusion_provider.work.layout import WorkLayout, output_done, preview_uri_of
from facefusion_provider.work.records import RunHolder, RunLease
from facefusion_provider.work.run_inputs import CLI_FIELDS, check_output_format, check_sources
from facefusion_provider.worker.healing import merge_work
from facefusion_provider.worker.prepare import content_ids, prepare_work
from facefusion_provider.worker.span import FrameProcessors, work_segments


@dataclass(frozen=True)
class RunResult:
    output_uri: str
    preview_uri: str
    frame_count: int
    segment_count: int
    timings: dict[str, float]
    work_id: str
    skipped: bool = False  # the output already existed for the same inputs and options


def run(
    source_paths: Sequence[str],
    target_path: str,
    output_path: str,
    work_root: str | None = None,
    *,
    keep_work: bool = False,
    models_dir: str | None = None,
    options: Options | None = None,
    **option_values: Any,
) -> RunResult:
    """The whole work in this process; the work folder is removed afterwards (unless another run uses it)."""
    began = time.perf_counter()
    resolved = resolve_options(options, option_values)
    uris = checked_uris(source_paths, target_path, output_path)
    assert uris.output_uri is not None
    check_sources(uris.source_uris, resolved, CLI_FIELDS)
    check_output_format(uris.output_uri, resolved, CLI_FIELDS, uris.target_uri)
    target_id, source_ids = content_ids(uris)
    work = work_id(target_id, source_ids, resolved)
    done = output_done(work, uris.output_uri)
    if done is not None:
        total = {"total_s": round(time.perf_counter() - began, 3)}
        return RunResult(uris.output_uri, preview_uri_of(uris.output_uri), done.frame_count, 0, total, work, True)
    layout = WorkLayout.under(work_root or default_work_root(), work)
    run_key = f"cli-{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    lease = RunLease(
        holder=RunHolder(kind="cli", host=socket.gethostname(), pid=os.getpid()),
        ttl_seconds=worker_settings().run_lease_seconds or liveness.CLI_RUN_TTL_SECONDS,
        output_uri=uris.output_uri,
        created_at=datetime.now(UTC),
        target_uri=uris.target_uri,
        source_uris=uris.source_uris,
        options=resolved.model_dump(mode="json"),
    )
    try:
        with leases.holding(layout, run_key, lease) as held:
            spec = prepare_work(layout, uris, resolved, models_dir)
            prepared = time.perf_counter()
            every = range(len(spec.segments))
            processors = FrameProcessors(spec, models_dir, work_root or default_work_root())
            work_segments(spec, layout, uris.target_uri, every, processors, owner=run_key, guard=held.check)
            swapped = time.perf_counter()
            held.check()
            merged = merge_work(
                spec, layout, uris.target_uri, uris.output_uri, models_dir=models_dir, owner=run_key, guard=held.check
            )
    finally:
        leases.release(layout, run_key)
    if not keep_work:
        leases.sweep_if_unused(layout, run_key)  # kept while another run's lease is live, whoever holds it
    finished = time.perf_counter()
    timings = {
        "prepare_s": prepared - began,
        "swap_s": swapped - prepared,
        "merge_s": merged.timings.get("total_s", 0.0),
        "total_s": finished - began,
    }
    rounded = {name: round(value, 3) for name, value in timings.items()}
    return RunResult(merged.output_uri, merged.preview_uri, merged.frame_count, len(spec.segments), rounded, work)
