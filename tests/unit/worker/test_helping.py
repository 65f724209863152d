"""Which runs a worker with nothing left of its own helps, and in what order: the leases of live runs say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from committed import run_lease

from facefusion_provider.job import leases
from facefusion_provider.job.layout import WorkLayout
from facefusion_provider.worker.helping import live_works


def test_interactive_runs_come_first_then_the_oldest_and_only_recent_runs_with_a_target(tmp_path: Path) -> None:
    root = tmp_path.as_uri()
    runs = {
        "batch-old": run_lease("/in/a.mp4", age=timedelta(minutes=30)),
        "batch-new": run_lease("/in/b.mp4", age=timedelta(minutes=10)),
        "interactive": run_lease("/in/c.mp4", age=timedelta(minutes=1)).model_copy(update={"priority": 10}),
        "stale": run_lease("/in/d.mp4", age=timedelta(hours=3)),  # failed long ago: left to its retry
        "cli": run_lease("", age=timedelta(minutes=5)),  # no target named: nobody can help it
        "mine": run_lease("/in/e.mp4"),
    }
    for work, lease in runs.items():
        leases.hold(WorkLayout.under(root, work), f"run-{work}", lease)

    found = live_works(root, besides="mine", now=datetime.now(UTC))

    assert [work.layout.work_id for work in found] == ["interactive", "batch-old", "batch-new"]
    assert [work.target_uri for work in found] == ["/in/c.mp4", "/in/a.mp4", "/in/b.mp4"]
