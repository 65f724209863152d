"""Which runs a worker with nothing left of its own helps, and in what order: the leases of live runs say."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from committed import hold_run_lease

from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.worker.scheduler import live_works


def test_interactive_runs_come_first_then_the_oldest_and_only_recent_runs_with_a_target(tmp_path: Path) -> None:
    root = tmp_path.as_uri()
    runs = {
        "batch-old": ("/in/a.mp4", timedelta(minutes=30), 1),
        "batch-new": ("/in/b.mp4", timedelta(minutes=10), 1),
        "interactive": ("/in/c.mp4", timedelta(minutes=1), 10),
        "stale": ("/in/d.mp4", timedelta(hours=3), 1),  # failed long ago, its lease not renewed: left to its retry
        "cli": ("", timedelta(minutes=5), 0),  # no target named: nobody can help it
        "mine": ("/in/e.mp4", timedelta(0), 10),
    }
    for work, (target, age, priority) in runs.items():
        hold_run_lease(WorkLayout.under(root, work), f"run-{work}", target, age=age, priority=priority)

    found = live_works(root, besides="mine")

    assert [work.layout.work_id for work in found] == ["interactive", "batch-old", "batch-new"]
    assert [work.target_uri for work in found] == ["/in/c.mp4", "/in/a.mp4", "/in/b.mp4"]
