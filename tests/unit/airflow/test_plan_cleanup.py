from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from recorded_stats import RecordedStats, Sent

from facefusion_provider import metric_names as names
from facefusion_provider.job import leases
from facefusion_provider.job.records import RunLease
from facefusion_provider.operators.cleanup import SWAP_OUTPUT_ASSET, CleanupJobOperator, lease_is_live
from facefusion_provider.operators.plan import PUBLISHED_SPAN, PlanSpansOperator

RUN = {"dag_id": "facefusion_swap", "run_id": "manual__1"}


def _plan_context() -> Any:
    return {"ti": SimpleNamespace(**RUN, task_id="plan", map_index=None, xcom_push=lambda **kwargs: None)}


def test_plan_returns_the_spans_with_their_labels(tmp_path: Path, write_job: Callable[..., Any]) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4", frames=40, segment_size=8)

    spans = PlanSpansOperator(task_id="plan", work_uri=job.work_uri, output_uri=job.output_uri, wave=2).execute(
        _plan_context()
    )

    assert spans[0] == {"index": 0, "first": 0, "last": 2, "start": 0, "end": 16, "label": "frames 0-15 (2 segments)"}
    assert [s["label"] for s in spans] == ["frames 0-15 (2 segments)", "frames 16-39 (3 segments)"]


def test_plan_makes_one_wave_of_the_configured_width(
    tmp_path: Path, write_job: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4", frames=400, segment_size=8)
    monkeypatch.setenv("AIRFLOW__FACEFUSION__SPAN_WAVE", "8")
    assert (
        len(
            PlanSpansOperator(task_id="plan", work_uri=job.work_uri, output_uri=job.output_uri).execute(_plan_context())
        )
        == 8
    )
    monkeypatch.setenv("AIRFLOW__FACEFUSION__SPAN_WAVE", "0")
    monkeypatch.setenv("AIRFLOW__FACEFUSION__MAX_ACTIVE_SPANS_PER_RUN", "3")
    assert (
        len(
            PlanSpansOperator(task_id="plan", work_uri=job.work_uri, output_uri=job.output_uri).execute(_plan_context())
        )
        == 3
    )
    monkeypatch.setenv("AIRFLOW__FACEFUSION__SPAN_WORKERS", "standing")  # the workers split it: one waiting task
    (whole,) = PlanSpansOperator(task_id="plan", work_uri=job.work_uri, output_uri=job.output_uri).execute(
        _plan_context()
    )
    assert whole["label"] == "frames 0-399 (50 segments)"


def test_plan_of_a_published_output_needs_no_work(
    tmp_path: Path, write_job: Callable[..., Any], commit_output: Callable[..., None]
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    commit_output(job)
    (tmp_path / "work" / "work0" / "job.json").unlink()  # cleanup removed the shared work
    operator = PlanSpansOperator(task_id="plan", work_uri=job.work_uri, output_uri=job.output_uri)
    assert operator.execute(_plan_context()) == [PUBLISHED_SPAN]


def test_plan_reports_the_segments_found_committed_and_those_left_to_compute(
    tmp_path: Path, write_job: Callable[..., Any], commit_segment: Callable[..., Path], stats_sent: RecordedStats
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4", frames=40, segment_size=8)
    for index in (1, 4):
        commit_segment(job, index)

    PlanSpansOperator(task_id="plan", work_uri=job.work_uri, output_uri=job.output_uri, wave=2).execute(_plan_context())

    assert stats_sent.sent == [
        Sent("incr", names.stat_name(names.SEGMENTS_REUSED), 2, RUN),
        Sent("incr", names.stat_name(names.SEGMENTS_LAUNCHED), 3, RUN),
    ]


def test_plan_without_a_prepared_work_fails_at_once(tmp_path: Path) -> None:
    operator = PlanSpansOperator(
        task_id="plan", work_uri=(tmp_path / "work" / "none").as_uri(), output_uri=(tmp_path / "o.mp4").as_uri()
    )

    with pytest.raises(AirflowFailException, match=r"no job\.json"):
        operator.execute({"ti": SimpleNamespace(xcom_push=lambda **kwargs: None)})  # type: ignore[arg-type]


class _Runs:
    """The cleanup's task instance: its run, and what the Task SDK tells it about other runs' states."""

    def __init__(self, states: dict[str, str]) -> None:
        self.states = states
        self.dag_id, self.run_id = RUN["dag_id"], RUN["run_id"]

    def get_dr_count(self, dag_id: str, run_ids: list[str]) -> int:
        return sum(run in self.states for run in run_ids)

    def get_dagrun_state(self, dag_id: str, run_id: str) -> str:
        return self.states[run_id]


def _cleanup_context(states: dict[str, str] | None = None, started: datetime | None = None) -> dict[str, Any]:
    return {
        "outlet_events": defaultdict(SimpleNamespace),
        "ti": _Runs(states or {}),
        "dag_run": SimpleNamespace(**RUN, start_date=started),
    }


def _lease(run: str, age: timedelta = timedelta()) -> RunLease:
    return RunLease(
        dag_id="facefusion_swap", run_id=run, output_uri="file:///o.mp4", created_at=datetime.now(UTC) - age
    )


def test_cleanup_removes_the_work_and_publishes_the_output(
    tmp_path: Path,
    write_job: Callable[..., Any],
    commit_segment: Callable[..., Path],
    commit_output: Callable[..., None],
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    commit_segment(job, 0)
    commit_output(job)
    leases.hold(job.layout, "mine", _lease("mine"))
    context = _cleanup_context({"mine": "running"})
    operator = CleanupJobOperator(task_id="cleanup", work_uri=job.work_uri, output_uri=job.output_uri, run_key="mine")

    operator.execute(context)  # type: ignore[arg-type]

    assert not (tmp_path / "work" / "work0").exists()
    assert (tmp_path / "out.mp4").exists()
    assert operator.outlets == [SWAP_OUTPUT_ASSET]
    extra = context["outlet_events"][SWAP_OUTPUT_ASSET].extra
    assert extra == {"output_uri": job.output_uri, "work_id": "work0", "frame_count": 40, "sha256": "1" * 64}
    operator.execute(_cleanup_context())  # type: ignore[arg-type]  # a cleared cleanup succeeds from the marker


def test_cleanup_reports_the_runs_merge_seconds_output_bytes_and_fps(
    tmp_path: Path, write_job: Callable[..., Any], commit_output: Callable[..., None], stats_sent: RecordedStats
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4", frames=40)
    commit_output(job, timings={"remux_s": 1.25, "total_s": 4.5})
    operator = CleanupJobOperator(task_id="cleanup", work_uri=job.work_uri, output_uri=job.output_uri, run_key="mine")

    operator.execute(_cleanup_context(started=datetime.now(UTC) - timedelta(seconds=20)))  # type: ignore[arg-type]

    assert stats_sent.of(names.stat_name(names.MERGE_SECONDS)) == [Sent("gauge", "facefusion.merge.seconds", 4.5, RUN)]
    assert stats_sent.of(names.stat_name(names.OUTPUT_BYTES)) == [Sent("incr", "facefusion.output.bytes", 5, RUN)]
    (fps,) = stats_sent.of(names.stat_name(names.RUN_FPS))
    assert fps.tags == RUN and 40 / 21 < fps.value <= 40 / 20  # 40 frames in the 20 s since the run started


def test_cleanup_of_an_older_marker_reports_no_merge_seconds(
    tmp_path: Path, write_job: Callable[..., Any], commit_output: Callable[..., None], stats_sent: RecordedStats
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    commit_output(job)  # no timings: written before merges recorded them
    operator = CleanupJobOperator(task_id="cleanup", work_uri=job.work_uri, output_uri=job.output_uri, run_key="mine")

    operator.execute(_cleanup_context())  # type: ignore[arg-type]

    assert [item.stat for item in stats_sent.sent] == [names.stat_name(names.OUTPUT_BYTES)]  # no start, no fps


def test_cleanup_keeps_work_that_a_live_or_recently_failed_run_holds(
    tmp_path: Path,
    write_job: Callable[..., Any],
    commit_segment: Callable[..., Path],
    commit_output: Callable[..., None],
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    marker = commit_segment(job, 0)
    commit_output(job)
    for run in ("mine", "other"):
        leases.hold(job.layout, run, _lease(run))
    operator = CleanupJobOperator(task_id="cleanup", work_uri=job.work_uri, output_uri=job.output_uri, run_key="mine")

    operator.execute(_cleanup_context({"mine": "running", "other": "running"}))  # type: ignore[arg-type]
    assert marker.exists() and set(leases.leases(job.layout)) == {"other"}  # only this run's lease went
    operator.execute(_cleanup_context({"other": "failed"}))  # type: ignore[arg-type]  # a clear may resume it
    assert marker.exists()
    operator.execute(_cleanup_context({"other": "success"}))  # type: ignore[arg-type]
    assert not marker.exists()


def test_cleanup_keeps_the_work_when_the_output_is_not_this_works(
    tmp_path: Path,
    write_job: Callable[..., Any],
    commit_segment: Callable[..., Path],
    commit_output: Callable[..., None],
) -> None:
    job = write_job(tmp_path, tmp_path / "out.mp4")
    marker = commit_segment(job, 0)
    commit_output(job, work_id="other")
    operator = CleanupJobOperator(task_id="cleanup", work_uri=job.work_uri, output_uri=job.output_uri, run_key="mine")

    with pytest.raises(AirflowException, match="carries no marker of work work0"):
        operator.execute(_cleanup_context())  # type: ignore[arg-type]
    assert marker.exists()


def test_which_leases_keep_the_work() -> None:
    now, keep = datetime.now(UTC), timedelta(hours=168)
    assert lease_is_live(_lease("r"), "running", now, keep) and lease_is_live(_lease("r"), "queued", now, keep)
    assert lease_is_live(_lease("r", timedelta(hours=1)), "failed", now, keep)
    assert not lease_is_live(_lease("r", timedelta(hours=200)), "failed", now, keep)
    assert not lease_is_live(_lease("r"), "success", now, keep) and not lease_is_live(_lease("r"), None, now, keep)
