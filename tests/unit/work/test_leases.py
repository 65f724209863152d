"""Run leases on shared work (docs/protocol.md): a sweep removes work only when no other run's lease is live by the
one liveness rule, whoever holds it; a run that wants the work while a sweep removes it waits and holds it again,
even when both race in separate processes; a holder whose lease was swept learns it on its next renewal."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidWorkError
from facefusion_provider.work import leases, liveness
from facefusion_provider.work.access import run_held
from facefusion_provider.work.layout import WorkLayout, root_of, work_root_of
from facefusion_provider.work.records import RunHolder, RunLease, Sweep


def _lease(run: str, *, kind: str = "airflow", ttl: float = 600.0) -> RunLease:
    holder = (
        RunHolder(kind="airflow", dag_id="facefusion_swap", run_id=run)
        if kind == "airflow"
        else RunHolder(kind="cli", host="laptop", pid=4242)
    )
    return RunLease(holder=holder, ttl_seconds=ttl, output_uri=f"file:///out/{run}.mp4", created_at=datetime.now(UTC))


def _sweep(run: str) -> bytes:
    return Sweep(run_key=run, started_at=datetime.now(UTC), ttl_seconds=600).model_dump_json().encode()


def _age(uri: str, seconds: float) -> None:
    """Make the object look last written ``seconds`` ago (its holder stopped renewing)."""
    path = storage.local_path(uri)
    assert path is not None
    when = time.time() - seconds
    os.utime(path, (when, when))


@pytest.fixture
def layout(tmp_path: Path) -> WorkLayout:
    layout = WorkLayout.under(str(tmp_path), "w1")
    storage.write_bytes_atomic(layout.work_json, b"{}")
    storage.write_bytes_atomic(layout.segment_marker(0), b"{}")
    return layout


def _folder(layout: WorkLayout) -> Path:
    return Path(storage.local_path(layout.work_uri) or "")


@pytest.mark.parametrize("kind", ["airflow", "cli"])
def test_work_is_kept_while_another_runs_lease_is_live_and_removed_once_it_lapsed(
    layout: WorkLayout, kind: str
) -> None:
    """The rule does not ask who holds the lease: another Airflow's run or a CLI run count alike."""
    leases.hold(layout, "a", _lease("a"))
    leases.hold(layout, "b", _lease("b", kind=kind, ttl=600))
    leases.release(layout, "a")
    assert leases.sweep_if_unused(layout, "a") == ["b"]
    assert storage.exists(layout.work_json) and not storage.exists(layout.deleting)
    _age(layout.run_lease("b"), 601)  # b stopped renewing a TTL ago
    assert leases.sweep_if_unused(layout, "a") == []
    assert not _folder(layout).exists()


def test_a_kept_lease_holds_the_work_but_asks_for_no_work(layout: WorkLayout) -> None:
    leases.hold(layout, "failed", _lease("failed", ttl=60))
    leases.keep_for_retry(layout, "failed", ttl_seconds=7 * 24 * 3600)
    _age(layout.run_lease("failed"), 3600)  # far past the run's own TTL, well within the kept one
    (held,) = leases.run_leases(layout)
    assert held.live and held.lease.state == "kept" and not held.wants_work
    assert leases.sweep_if_unused(layout, "other") == ["failed"]


def test_an_unreadable_lease_holds_the_work_for_one_default_ttl(layout: WorkLayout) -> None:
    storage.write_bytes_atomic(layout.run_lease("old"), b'{"dag_id": "from an older version"}')
    assert leases.sweep_if_unused(layout, "other") == ["old"]
    _age(layout.run_lease("old"), 3 * 3600)
    assert leases.sweep_if_unused(layout, "other") == []


def test_a_holder_learns_on_its_next_renewal_that_its_lease_was_swept(layout: WorkLayout) -> None:
    leases.hold(layout, "paused", _lease("paused", ttl=60))
    _age(layout.run_lease("paused"), 120)  # paused past its TTL (SIGSTOP, a long GC, a frozen VM)
    assert leases.sweep_if_unused(layout, "other") == []
    with pytest.raises(leases.LeaseLostError, match="was removed"):
        leases.renew(layout, "paused")
    assert not _folder(layout).exists()  # the renewal wrote nothing back


def test_a_worker_command_that_finds_its_work_swept_with_its_lease_says_the_lease_was_lost(layout: WorkLayout) -> None:
    """A command paused past its run's TTL finds the work gone (no work.json, a segment file missing): that is the
    lease's loss, retried as a new try that holds the work again, not a broken work."""
    leases.hold(layout, "paused", _lease("paused", ttl=60))
    with pytest.raises(InvalidWorkError), run_held(layout.work_uri, "paused"):
        raise InvalidWorkError("no work.json")  # the lease is live: the work's own fault
    _age(layout.run_lease("paused"), 120)
    assert leases.sweep_if_unused(layout, "other") == []
    with pytest.raises(leases.LeaseLostError, match="was removed"), run_held(layout.work_uri, "paused"):
        raise InputMissingError("segments/00003.json does not exist")


def test_a_run_waits_for_a_sweep_in_progress_then_holds_the_work(layout: WorkLayout) -> None:
    storage.write_bytes_atomic(layout.deleting, _sweep("x"))
    with pytest.raises(Exception, match="still being removed by run x"):
        leases.hold(layout, "a", _lease("a"), wait=1.5)
    _age(layout.deleting, 601)  # a sweep marker past its TTL belongs to a cleanup that died
    leases.hold(layout, "a", _lease("a"), wait=1.5)
    assert not storage.exists(layout.deleting) and [held.key for held in leases.run_leases(layout)] == ["a"]


def test_a_sweep_that_finds_another_deciding_waits_and_decides_again(layout: WorkLayout) -> None:
    """Two runs' cleanups at once: a's looked while b still held its lease and keeps the work; b, finding a's sweep
    marker, must not give up (nobody would remove the work), but decide again once a is done."""
    leases.hold(layout, "b", _lease("b"))
    storage.write_bytes_atomic(layout.deleting, _sweep("a"))
    leases.release(layout, "b")
    finished = threading.Timer(0.5, storage.delete, [layout.deleting])  # a ends: the work kept for b's lease
    finished.start()
    try:
        assert leases.sweep_if_unused(layout, "b") == []
    finally:
        finished.join()
    assert not _folder(layout).exists()
    storage.write_bytes_atomic(layout.work_json, b"{}")
    storage.write_bytes_atomic(layout.deleting, _sweep("a"))
    assert leases.sweep_if_unused(layout, "b", wait=0.2) == ["a"]  # a never ends: left to it
    assert storage.exists(layout.work_json)


RACE = textwrap.dedent(
    """
    import sys, time
    from datetime import UTC, datetime
    from facefusion_provider import storage
    from facefusion_provider.exceptions import InputMissingError, InvalidWorkError
    from facefusion_provider.work import leases
    from facefusion_provider.work.access import run_held
    from facefusion_provider.work.layout import WorkLayout
    from facefusion_provider.work.records import RunHolder, RunLease

    layout, role, rounds = WorkLayout(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    listed = leases.run_leases
    def slow_listing(layout):  # a slow store: the sweep's look at the leases and its deletion lie 20 ms apart
        found = listed(layout)
        time.sleep(0.02)
        return found
    leases.run_leases = slow_listing
    for round in range(rounds):
        if role == "cleanup":
            storage.write_bytes_atomic(layout.segment_marker(0), b"{}")
            leases.sweep_if_unused(layout, "cleanup")
            continue
        key = f"run-{round}"
        holder = RunHolder(kind="airflow", dag_id="d", run_id=key)
        lease = RunLease(holder=holder, ttl_seconds=600, output_uri="file:///o.mp4", created_at=datetime.now(UTC))
        leases.hold(layout, key, lease)
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
        subprocess.Popen(
            [sys.executable, "-c", RACE, layout.work_uri, role, rounds],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # a traceback in the failure's message, beside the round that saw the loss
            text=True,
        )
        for role, rounds in (("cleanup", "150"), ("run", "100"))
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs


class _PausedOnce(liveness.Clock):
    """A host 15 minutes behind, paused 40 s during its first probe's write (read back as its clock's jump)."""

    def __init__(self) -> None:
        self.reads = 0

    def now(self) -> float:
        self.reads += 1
        return time.time() - 900 + (40 if self.reads == 2 else 0)


def test_a_clock_probe_slowed_by_a_pause_is_measured_again(layout: WorkLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pause between reading the clock and the probe's write would put the offset half the pause off, for five
    minutes of lease judgements: such a probe is measured again."""
    paused = _PausedOnce()
    monkeypatch.setattr(liveness, "clock", paused)
    offset = liveness.measure_offset(work_root_of(layout))
    assert abs(offset - 900) < 2, offset
    assert paused.reads == 4  # two probes


def test_a_lapsed_lease_renewed_is_announced_to_idle_standing_workers(layout: WorkLayout) -> None:
    """Idle standing workers list the works only when the change signal changes: a run whose lease lapsed (its task
    paused) and is renewed again, unswept, would otherwise wait for ever for them."""
    signal = root_of(layout).signal
    leases.hold(layout, "run", _lease("run", ttl=60))
    announced = storage.stat(signal)
    leases.renew(layout, "run")  # live: nothing new for anyone
    assert storage.stat(signal) == announced
    _age(layout.run_lease("run"), 120)
    leases.renew(layout, "run")
    assert storage.stat(signal) != announced
