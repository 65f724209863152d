"""Run leases on shared work: cleanup removes work only when no live run holds a lease, and a run that wants the work
while a cleanup removes it waits and holds it again, even when both race in separate processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from facefusion_provider import storage
from facefusion_provider.job import leases
from facefusion_provider.job.layout import WorkLayout
from facefusion_provider.job.records import Deleting, RunLease


def _lease(run: str) -> RunLease:
    return RunLease(
        dag_id="facefusion_swap", run_id=run, output_uri=f"file:///out/{run}.mp4", created_at=datetime.now(UTC)
    )


@pytest.fixture
def layout(tmp_path: Path) -> WorkLayout:
    layout = WorkLayout.under(str(tmp_path), "w1")
    storage.write_bytes_atomic(layout.job_json, b"{}")
    storage.write_bytes_atomic(layout.segment_marker(0), b"{}")
    return layout


def _folder(layout: WorkLayout) -> Path:
    return Path(storage.local_path(layout.work_uri) or "")


def test_work_is_kept_while_another_live_run_holds_it_and_removed_after(layout: WorkLayout) -> None:
    leases.hold(layout, "a", _lease("a"))
    leases.hold(layout, "b", _lease("b"))
    leases.release(layout, "a")
    assert leases.remove_if_unused(layout, "a", is_live=lambda lease: True) == ["b"]
    assert storage.exists(layout.job_json) and not storage.exists(layout.deleting)
    assert leases.remove_if_unused(layout, "a", is_live=lambda lease: lease.run_id != "b") == []  # b has finished
    assert not _folder(layout).exists()


def test_a_run_waits_for_a_removal_in_progress_then_holds_the_work(layout: WorkLayout) -> None:
    started = datetime.now(UTC)
    storage.write_bytes_atomic(layout.deleting, Deleting(run_key="x", started_at=started).model_dump_json().encode())
    with pytest.raises(Exception, match="still being removed by run x"):
        leases.hold(layout, "a", _lease("a"), wait=1.5)
    stale = Deleting(run_key="x", started_at=started - leases.STALE_DELETION - timedelta(seconds=1))
    storage.write_bytes_atomic(layout.deleting, stale.model_dump_json().encode())
    leases.hold(layout, "a", _lease("a"), wait=1.5)  # a marker that old belongs to a cleanup that died
    assert not storage.exists(layout.deleting) and set(leases.leases(layout)) == {"a"}


def test_a_cleanup_that_finds_another_deciding_waits_and_decides_again(layout: WorkLayout) -> None:
    """Two runs' cleanups at once: a's looked while b still held its lease and keeps the work; b, finding a's deletion
    marker, must not give up (nobody would remove the work), but decide again once a is done."""
    leases.hold(layout, "b", _lease("b"))
    storage.write_bytes_atomic(
        layout.deleting, Deleting(run_key="a", started_at=datetime.now(UTC)).model_dump_json().encode()
    )
    leases.release(layout, "b")
    finished = threading.Timer(0.5, storage.delete, [layout.deleting])  # a ends: the work kept for b's lease
    finished.start()
    try:
        assert leases.remove_if_unused(layout, "b", is_live=lambda lease: True) == []
    finally:
        finished.join()
    assert not _folder(layout).exists()
    storage.write_bytes_atomic(layout.job_json, b"{}")
    storage.write_bytes_atomic(
        layout.deleting, Deleting(run_key="a", started_at=datetime.now(UTC)).model_dump_json().encode()
    )
    assert leases.remove_if_unused(layout, "b", is_live=lambda lease: True, wait=0.2) == [
        "a"
    ]  # a never ends: left to it
    assert storage.exists(layout.job_json)


RACE = textwrap.dedent(
    """
    import sys, time
    from datetime import UTC, datetime
    from facefusion_provider import storage
    from facefusion_provider.job import leases
    from facefusion_provider.job.layout import WorkLayout
    from facefusion_provider.job.records import RunLease

    layout, role, rounds = WorkLayout(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    listed = leases.leases
    def slow_listing(layout):  # a slow store: the cleanup's look at the leases and its deletion lie 20 ms apart
        found = listed(layout)
        time.sleep(0.02)
        return found
    leases.leases = slow_listing
    for round in range(rounds):
        if role == "cleanup":
            storage.write_bytes_atomic(layout.segment_marker(0), b"{}")
            leases.remove_if_unused(layout, "cleanup", is_live=lambda lease: True)
            continue
        key = f"run-{round}"
        leases.hold(layout, key, RunLease(dag_id="d", run_id=key, output_uri="file:///o.mp4", created_at=datetime.now(UTC)))
        mine = storage.join(layout.work_uri, f"mine-{round}")
        storage.write_bytes_atomic(mine, b"x")
        time.sleep(0.01)
        if not storage.exists(mine) or not storage.exists(layout.run_lease(key)):
            print(f"round {round}: the work was removed while this run held it", flush=True)
            sys.exit(1)
        storage.delete(mine)
        leases.release(layout, key)
    print("ok", flush=True)
    """
)


def test_cleanup_and_a_new_run_racing_in_two_processes_never_remove_held_work(layout: WorkLayout) -> None:
    processes = [
        subprocess.Popen([sys.executable, "-c", RACE, layout.work_uri, role, rounds], stdout=subprocess.PIPE, text=True)
        for role, rounds in (("cleanup", "150"), ("run", "100"))
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
