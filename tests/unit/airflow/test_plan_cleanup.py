from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from held import age, run_lease
from recorded_stats import RecordedStats, Sent

from facefusion_provider import metric_names as names
from facefusion_provider.operators.cleanup import SWAP_OUTPUT_ASSET, CleanupWorkOperator, KeepWorkForRetry
from facefusion_provider.operators.plan import PUBLISHED_SPAN, PlanSpansOperator
from facefusion_provider.work import leases

RUN = {"dag_id": "facefusion_swap", "run_id": "manual__1"}


def _plan_context() -> Any:
    return {"ti": SimpleNamespace(**RUN, task_id="plan", map_index=None, xcom_push=lambda **kwargs: None)}


def test_plan_returns_the_spans_with_their_labels(tmp_path: Path, write_work: Callable[..., Any]) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4", frames=40, segment_size=8)

    spans = PlanSpansOperator(task_id="plan", work_uri=work.work_uri, wave=2).execute(_plan_context())

    assert spans[0] == {"index": 0, "first": 0, "last": 2, "start": 0, "end": 16, "label": "frames 0-15 (2 segments)"}
    assert [s["label"] for s in spans] == ["frames 0-15 (2 segments)", "frames 16-39 (3 segments)"]


def test_plan_makes_one_wave_of_the_configured_width(
    tmp_path: Path, write_work: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4", frames=400, segment_size=8)
    monkeypatch.setenv("AIRFLOW__FACEFUSION__SPAN_WAVE", "8")
    assert len(PlanSpansOperator(task_id="plan", work_uri=work.work_uri).execute(_plan_context())) == 8
    monkeypatch.setenv("AIRFLOW__FACEFUSION__SPAN_WAVE", "0")
    monkeypatch.setenv("AIRFLOW__FACEFUSION__MAX_ACTIVE_SPANS_PER_RUN", "3")
    assert len(PlanSpansOperator(task_id="plan", work_uri=work.work_uri).execute(_plan_context())) == 3
    # With standing workers the DAG gives plan a wave of one (the workers split it: one waiting task).
    (whole,) = PlanSpansOperator(task_id="plan", work_uri=work.work_uri, wave=1).execute(_plan_context())
    assert whole["label"] == "frames 0-399 (50 segments)"


def test_plan_of_an_output_validate_found_done_needs_no_work(tmp_path: Path, write_work: Callable[..., Any]) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    (tmp_path / "work" / "work0" / "work.json").unlink()  # cleanup removed the shared work
    operator = PlanSpansOperator(task_id="plan", work_uri=work.work_uri, output_done=True)
    assert operator.execute(_plan_context()) == [PUBLISHED_SPAN]


def test_plan_reports_the_segments_found_committed_and_those_left_to_compute(
    tmp_path: Path, write_work: Callable[..., Any], commit_segment: Callable[..., Path], stats_sent: RecordedStats
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4", frames=40, segment_size=8)
    for index in (1, 4):
        commit_segment(work, index)

    PlanSpansOperator(task_id="plan", work_uri=work.work_uri, wave=2).execute(_plan_context())

    assert stats_sent.sent == [
        Sent("incr", names.stat_name(names.SEGMENTS_REUSED), 2, RUN),
        Sent("incr", names.stat_name(names.SEGMENTS_LAUNCHED), 3, RUN),
    ]


def test_plan_without_a_prepared_work_fails_at_once(tmp_path: Path) -> None:
    operator = PlanSpansOperator(task_id="plan", work_uri=(tmp_path / "work" / "none").as_uri())

    with pytest.raises(AirflowFailException, match=r"no work\.json"):
        operator.execute({"ti": SimpleNamespace(xcom_push=lambda **kwargs: None)})  # type: ignore[arg-type]


def _cleanup_context(started: datetime | None = None) -> dict[str, Any]:
    return {
        "outlet_events": defaultdict(SimpleNamespace),
        "ti": SimpleNamespace(**RUN),
        "dag_run": SimpleNamespace(**RUN, start_date=started),
    }


def test_cleanup_removes_the_work_and_publishes_the_output(
    tmp_path: Path,
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Path],
    commit_output: Callable[..., None],
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    commit_segment(work, 0)
    commit_output(work)
    leases.hold(work.layout, "mine", run_lease("mine"))
    context = _cleanup_context()
    operator = CleanupWorkOperator(
        task_id="cleanup", work_uri=work.work_uri, output_uri=work.output_uri, run_key="mine"
    )

    operator.execute(context)  # type: ignore[arg-type]

    assert not (tmp_path / "work" / "work0").exists()
    assert (tmp_path / "out.mp4").exists()
    assert operator.outlets == [SWAP_OUTPUT_ASSET]
    extra = context["outlet_events"][SWAP_OUTPUT_ASSET].extra
    assert extra == {"output_uri": work.output_uri, "work_id": "work0", "frame_count": 40, "sha256": "1" * 64}
    operator.execute(_cleanup_context())  # type: ignore[arg-type]  # a cleared cleanup succeeds from the marker


def test_cleanup_reports_the_runs_merge_seconds_output_bytes_and_fps(
    tmp_path: Path, write_work: Callable[..., Any], commit_output: Callable[..., None], stats_sent: RecordedStats
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4", frames=40)
    commit_output(work, timings={"remux_s": 1.25, "total_s": 4.5})
    operator = CleanupWorkOperator(
        task_id="cleanup", work_uri=work.work_uri, output_uri=work.output_uri, run_key="mine"
    )

    operator.execute(_cleanup_context(started=datetime.now(UTC) - timedelta(seconds=20)))  # type: ignore[arg-type]

    assert stats_sent.of(names.stat_name(names.MERGE_SECONDS)) == [Sent("gauge", "facefusion.merge.seconds", 4.5, RUN)]
    assert stats_sent.of(names.stat_name(names.OUTPUT_BYTES)) == [Sent("incr", "facefusion.output.bytes", 5, RUN)]
    (fps,) = stats_sent.of(names.stat_name(names.RUN_FPS))
    assert fps.tags == RUN and 40 / 21 < fps.value <= 40 / 20  # 40 frames in the 20 s since the run started


def test_cleanup_of_an_older_marker_reports_no_merge_seconds(
    tmp_path: Path, write_work: Callable[..., Any], commit_output: Callable[..., None], stats_sent: RecordedStats
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    commit_output(work)  # no timings: written before merges recorded them
    operator = CleanupWorkOperator(
        task_id="cleanup", work_uri=work.work_uri, output_uri=work.output_uri, run_key="mine"
    )

    operator.execute(_cleanup_context())  # type: ignore[arg-type]

    assert [item.stat for item in stats_sent.sent] == [names.stat_name(names.OUTPUT_BYTES)]  # no start, no fps


@pytest.mark.parametrize("kind", ["airflow", "cli"])
def test_cleanup_keeps_work_that_a_live_or_failed_run_holds_whoever_holds_it(
    tmp_path: Path,
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Path],
    commit_output: Callable[..., None],
    kind: str,
) -> None:
    """No lookup in this Airflow's database: another Airflow's run or a CLI run is judged by its lease alone."""
    work = write_work(tmp_path, tmp_path / "out.mp4")
    marker = commit_segment(work, 0)
    commit_output(work)
    leases.hold(work.layout, "mine", run_lease("mine"))
    leases.hold(work.layout, "other", run_lease("other", kind=kind, ttl=600))
    operator = CleanupWorkOperator(
        task_id="cleanup", work_uri=work.work_uri, output_uri=work.output_uri, run_key="mine"
    )

    operator.execute(_cleanup_context())  # type: ignore[arg-type]
    assert marker.exists() and [held.key for held in leases.run_leases(work.layout)] == ["other"]
    leases.keep_for_retry(work.layout, "other", ttl_seconds=168 * 3600)  # it failed: a clear may resume it
    age(work.layout.run_lease("other"), 3 * 3600)
    operator.execute(_cleanup_context())  # type: ignore[arg-type]
    assert marker.exists()
    age(work.layout.run_lease("other"), 169 * 3600)  # nobody cleared it within keep_failed_work_hours
    operator.execute(_cleanup_context())  # type: ignore[arg-type]
    assert not marker.exists()


def test_cleanup_keeps_the_work_when_the_output_is_not_this_works(
    tmp_path: Path,
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Path],
    commit_output: Callable[..., None],
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    marker = commit_segment(work, 0)
    commit_output(work, work_id="other")
    operator = CleanupWorkOperator(
        task_id="cleanup", work_uri=work.work_uri, output_uri=work.output_uri, run_key="mine"
    )

    with pytest.raises(AirflowException, match="carries no marker of work work0"):
        operator.execute(_cleanup_context())  # type: ignore[arg-type]
    assert marker.exists()


def _validated(xcoms: dict[str, Any]) -> tuple[Any, Any]:
    """validate's ``work_uri`` and ``run_key`` as the swap DAG passes them, and a task context whose XComs are
    ``xcoms`` (validate's keys; empty when validate failed)."""
    with DAG("kept", schedule=None):
        ticket = BaseOperator(task_id="validate", multiple_outputs=True).output

    def xcom_pull(*, task_ids: str, key: str, default: Any, **_: Any) -> Any:
        return xcoms.get(key, default) if task_ids == "validate" else default

    callback = KeepWorkForRetry(work_uri=ticket["work_uri"], run_key=ticket["run_key"])
    return callback, {"ti": SimpleNamespace(xcom_pull=xcom_pull)}


def test_a_failed_task_keeps_its_runs_work_for_a_clear(tmp_path: Path, write_work: Callable[..., Any]) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    leases.hold(work.layout, "mine", run_lease("mine", ttl=600))
    keep, context = _validated({"work_uri": work.work_uri, "run_key": "mine"})

    keep(context)

    (held,) = leases.run_leases(work.layout)
    assert (held.key, held.lease.state, held.lease.ttl_seconds) == ("mine", "kept", 168 * 3600)
    age(work.layout.run_lease("mine"), 3 * 3600)  # far past the run's own TTL: still held for a clear
    assert [held.key for held in leases.run_leases(work.layout) if held.live] == ["mine"]


def test_a_run_whose_validate_failed_has_no_work_to_keep(tmp_path: Path) -> None:
    keep, context = _validated({})

    keep(context)  # no lease was written: nothing to keep, and the callback does not fail
