"""Claims on segments between real processes: one winner per segment, renewed leases held, a killed holder's lease
taken over, a retry of the same task taking over its previous try's claims at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from facefusion_provider import storage
from facefusion_provider.exceptions import StorageDeniedError
from facefusion_provider.work import claims as claims_module
from facefusion_provider.work.claims import SegmentClaims, check_conditional_writes, longest_free_run, scan_work
from facefusion_provider.work.layout import WorkLayout

HOLDER = textwrap.dedent(
    """
    import sys, time
    from facefusion_provider.work.claims import SegmentClaims, scan_work
    from facefusion_provider.work.layout import WorkLayout

    layout = WorkLayout(sys.argv[1])
    claims = SegmentClaims(layout, owner=sys.argv[2], lease=float(sys.argv[3]))
    took = claims.take(int(sys.argv[4]), scan_work(layout))
    print("took" if took else "lost", flush=True)
    with claims.renewing():
        time.sleep(60)
    """
)


def _holder(layout: WorkLayout, index: int, *, owner: str, lease: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, layout.work_uri, owner, str(lease), str(index)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "took"
    return process


@pytest.fixture
def layout(tmp_path: Path) -> WorkLayout:
    return WorkLayout.under(str(tmp_path), "work")


def test_of_many_processes_racing_for_a_segment_exactly_one_gets_it(layout: WorkLayout) -> None:
    script = textwrap.dedent(
        """
        import sys
        from facefusion_provider.work.claims import SegmentClaims, scan_work
        from facefusion_provider.work.layout import WorkLayout
        layout = WorkLayout(sys.argv[1])
        state = scan_work(layout)
        print(SegmentClaims(layout).take(0, state))
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, layout.work_uri], stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    answers = [process.communicate(timeout=60)[0].strip() for process in processes]
    assert sorted(answers) == ["False"] * 5 + ["True"]
    assert [path.name for path in Path(storage.local_path(layout.claims_dir) or "").iterdir()] == ["00000.0001.json"]


def test_a_renewed_lease_holds_and_a_killed_holders_lease_is_taken_over(layout: WorkLayout) -> None:
    lease = 1.5
    holder = _holder(layout, 3, owner="pod-a", lease=lease)
    try:
        mine = SegmentClaims(layout, owner="pod-b", lease=lease)
        time.sleep(lease * 2)  # longer than a lease: only the holder's renewals keep it
        assert not mine.is_free(3, scan_work(layout))
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        deadline = time.monotonic() + lease * 4
        while not mine.is_free(3, scan_work(layout)):
            assert time.monotonic() < deadline, "the dead holder's lease never lapsed"
            time.sleep(0.2)
        assert mine.take(3, scan_work(layout))
        assert scan_work(layout).claims[3].generation == 2
        assert not SegmentClaims(layout, owner="pod-c", lease=lease).take(3, scan_work(layout))  # ours is fresh
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_new_try_of_the_same_task_takes_over_its_previous_try_at_once(layout: WorkLayout) -> None:
    holder = _holder(layout, 5, owner="dag/run/swap_span/2", lease=60)
    try:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        retry = SegmentClaims(layout, owner="dag/run/swap_span/2", lease=60)
        other = SegmentClaims(layout, owner="dag/run/swap_span/3", lease=60)
        state = scan_work(layout)
        assert not other.is_free(5, state)  # another task must wait for the lease
        assert retry.is_free(5, state) and retry.take(5, state)
    finally:
        if holder.poll() is None:
            holder.kill()


def test_committed_segments_are_never_free(layout: WorkLayout) -> None:
    storage.write_bytes_atomic(layout.segment_marker(1), b"{}")
    claims = SegmentClaims(layout, lease=60)
    state = scan_work(layout)
    assert state.committed == frozenset({1})
    assert not claims.is_free(1, state) and claims.is_free(2, state)


def test_a_store_that_ignores_exclusive_creates_is_refused(layout: WorkLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    check_conditional_writes(layout)  # the local disk honours them
    monkeypatch.setattr(claims_module, "_CHECKED_ROOTS", set())  # checked once a process: another process
    monkeypatch.setattr(storage, "write_bytes_exclusive", lambda uri, data: True)
    with pytest.raises(StorageDeniedError, match="ignores conditional writes"):
        check_conditional_writes(layout)


def test_a_probe_swept_between_its_two_writes_is_not_taken_for_a_store_without_exclusive_creates(
    layout: WorkLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process paused between the probe's two writes while a sweep removed the probe sees both writes succeed once;
    a second probe tells it from a store that ignores exclusive creates."""
    create, writes = storage.write_bytes_exclusive, []

    def swept_once(uri: str, data: bytes) -> bool:
        writes.append(uri)
        if len(writes) == 2:
            storage.delete(uri)  # the sweep, between the first probe's two writes
        return create(uri, data)

    monkeypatch.setattr(storage, "write_bytes_exclusive", swept_once)
    check_conditional_writes(layout)
    assert len(writes) == 4 and writes[0] != writes[2]  # a second probe, whose second write failed as it must


def test_longest_free_run_is_the_busiest_spans_tail() -> None:
    free = {2, 3, 4, 7, 8, 9, 10, 11, 14}
    assert longest_free_run(range(16), free.__contains__) == [7, 8, 9, 10, 11]
    assert longest_free_run(range(4), lambda index: False) == []


def test_a_claim_is_judged_by_the_ttl_its_holder_wrote_not_the_readers(tmp_path: Path) -> None:
    """A worker configured with a 5 s claim TTL beside one with 60 s: the 60 s worker's claim is live for 60 s."""
    layout = WorkLayout(str(tmp_path / "work" / "w1"))
    patient, hasty = SegmentClaims(layout, lease=60.0), SegmentClaims(layout, lease=5.0)
    assert patient.take(0, scan_work(layout))
    claim_file = Path(storage.local_path(layout.claim("00000", 1)) or "")

    def written_ago(seconds: float) -> None:
        stamp = time.time() - seconds
        os.utime(claim_file, (stamp, stamp))

    written_ago(30)  # lapsed by the hasty worker's own 5 s, live by the 60 s its holder wrote
    assert not hasty.is_free(0, scan_work(layout)) and not hasty.take(0, scan_work(layout))
    written_ago(61)
    assert hasty.take(0, scan_work(layout))
    # And the other way round: the hasty worker's claim (generation 2, 5 s) lapses at 5 s for a 60 s reader too.
    reader = SegmentClaims(layout, lease=60.0)
    assert not reader.is_free(0, scan_work(layout))
    stamp = time.time() - 6
    os.utime(Path(storage.local_path(layout.claim("00000", 2)) or ""), (stamp, stamp))
    assert reader.is_free(0, scan_work(layout))
