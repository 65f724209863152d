"""A span worker whose last segments another live worker holds ends as soon as that worker commits them (a HEAD of
their markers between its full looks), not at its next full look; with nothing committed it looks at every claim
again after ``WAIT_SECONDS``, so a claim that lapsed meanwhile is found."""

from __future__ import annotations

import math

import pytest
from committed import work_uri_for

from facefusion_provider import storage, worker
from facefusion_provider.work import liveness
from facefusion_provider.work.claims import SegmentClaims, scan_work
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.worker import span

from .conftest import MakeVideo

SEGMENT = 8
OPTIONS = {"processors": [], "segment_size": SEGMENT}


class WaitClock(liveness.Clock):
    """Real time, except that sleeps only add to ``slept`` (and to ``monotonic``); once ``slept`` reaches
    ``commit_after`` the other worker's commit of ``marker`` lands."""

    def __init__(self, marker: str, commit_after: float) -> None:
        self.marker, self.commit_after, self.slept = marker, commit_after, 0.0

    def monotonic(self) -> float:
        return super().monotonic() + self.slept

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        if self.slept >= self.commit_after and not storage.exists(self.marker):
            storage.write_bytes_exclusive(self.marker, b"{}")  # the listing and the HEAD read its name only


@pytest.mark.parametrize("commit_after", [0.3, 2.5 * span.WAIT_SECONDS])
def test_a_span_ends_right_after_the_worker_holding_its_last_segment_commits_it(
    make_video: MakeVideo, work_root: str, monkeypatch: pytest.MonkeyPatch, commit_after: float
) -> None:
    target = make_video(frames=2 * SEGMENT)
    work_uri = work_uri_for(work_root, [], target, **OPTIONS)
    worker.prepare(work_uri, [], target, **OPTIONS)
    layout = WorkLayout(work_uri)
    other = SegmentClaims(layout, owner="the other span's worker")
    assert other.take(1, scan_work(layout))  # it took our span's tail and is working it
    clock = WaitClock(layout.segment_marker(1), commit_after)
    monkeypatch.setattr(liveness, "clock", clock)
    looks = []
    monkeypatch.setattr(span, "scan_work", lambda layout: looks.append(1) or scan_work(layout))

    result = worker.swap_span(work_uri, target, 0, 2)

    assert result.committed == 1 and scan_work(layout).committed == {0, 1}
    assert commit_after <= clock.slept <= commit_after + span.MARKER_LOOK_SECONDS + 1e-9
    # Its looks before and after its own segment, then one full look each WAIT_SECONDS it waited, never one a HEAD.
    assert len(looks) == 3 + math.ceil(commit_after / span.WAIT_SECONDS)
