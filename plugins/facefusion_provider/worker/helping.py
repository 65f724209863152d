"""Which other runs a span worker may help once its own run has nothing left to claim.

A pod that exits when its own span is done leaves its GPU idle until the next task's pod has started and loaded its
models (about 14 s); in a batch of many short runs that is a quarter of the pool's time. So a worker may go on to the
free segments of other live runs under the same work root, through the same claims and markers, for at most
``FACEFUSION_HELP_OTHER_RUNS_SECONDS`` (its own run's merge waits for it that long at most). A run is live for this
while it holds a lease naming its target, written (or renewed: the trigger of a run waiting for standing workers
renews it) within ``RECENT_RUNS``: a failed run's work is left to its retry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from facefusion_provider import storage
from facefusion_provider.job import leases
from facefusion_provider.job.layout import WORK_FOLDER, WorkLayout
from facefusion_provider.job.leases import HELP_SECONDS_VARIABLE
from facefusion_provider.job.records import RunLease
from facefusion_provider.options import Options

RECENT_RUNS = timedelta(hours=1)


@dataclass(frozen=True)
class LiveWork:
    """Another run's work folder, the target its oldest live run reads, when that run started, and the highest
    priority of its live runs."""

    layout: WorkLayout
    target_uri: str
    started_at: datetime
    priority: int = 0


def help_seconds() -> float:
    """How long a worker helps other runs after its own span (0: it exits at once, the default)."""
    raw = os.environ.get(HELP_SECONDS_VARIABLE, "").strip()
    try:
        seconds = float(raw) if raw else 0.0
    except ValueError:
        raise ValueError(f"{HELP_SECONDS_VARIABLE}: expected seconds, got {raw!r}") from None
    return max(seconds, 0.0)


def live_works(
    work_root: str, *, besides: str, now: datetime, seen: dict[str, RunLease] | None = None
) -> list[LiveWork]:
    """Works under ``work_root`` that a recent run holds a lease on, highest priority first, then oldest run first;
    not ``besides``. One listing of
    the work folders, then one of each work's leases; a lease is read only when its version is new to ``seen``
    (a cache by URI and version, kept by the caller)."""
    seen = {} if seen is None else seen
    found = []
    for folder in storage.list_folders(storage.join(work_root, WORK_FOLDER)):
        layout = WorkLayout(folder)
        if layout.work_id == besides:
            continue
        recent = []
        for item in storage.list_files(layout.runs_dir):
            key = f"{item.uri}@{item.version}"
            if key not in seen:
                seen[key] = leases.read_lease(item.uri)
            lease = seen[key]
            renewed = datetime.fromtimestamp(item.modified, UTC)  # a waiting standing-mode run renews its lease
            if lease.target_uri and now - max(lease.created_at, renewed) < RECENT_RUNS:
                recent.append(lease)
        if recent:
            first = min(recent, key=lambda lease: lease.created_at)
            priority = max(lease.priority for lease in recent)
            found.append(LiveWork(layout, first.target_uri, first.created_at, priority))
    return sorted(found, key=lambda work: (-work.priority, work.started_at))


def same_models(one: Options, other: Options) -> bool:
    """Whether a worker loaded for ``one`` has every model ``other`` needs: helping then loads nothing."""

    def models(options: Options) -> tuple[object, ...]:
        return (
            tuple(options.processors),
            options.face_detector_model,
            options.face_landmarker_model,
            options.face_swapper_model,
            options.face_enhancer_model,
            tuple(options.execution_providers),
            options.execution_thread_count,
        )

    return models(one) == models(other)
