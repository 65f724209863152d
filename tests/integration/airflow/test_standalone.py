"""The DAG under ``airflow standalone`` in a fresh home (no pool or other setup), driven over REST: retries, clearing
a failed span, reuse of committed work by later runs, repeat runs, clears after cleanup, and bad conf.

One server for the whole module. Its test-only fault switch makes spans 1 and 2 fail once (retryable) and span 3 fail
for good on its first try, in every run; clips of 24 frames (3 spans) and 32 frames (4 spans), one 8-frame segment a
span, choose which faults a run meets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow_harness import TEST_SETTINGS, StandaloneAirflow, conf, count_frames, make_clip, make_image
from faults import fault_env

from facefusion_provider import storage
from facefusion_provider.work.layout import WorkLayout

pytestmark = pytest.mark.slow

FAULTS = [
    # Span 0 is slow, so it cannot take span 1's only segment (helping) before span 1's first try has started.
    {"command": "swap-span", "indexes": [0], "frame_delay": 0.4},
    {"command": "swap-span", "indexes": [1, 2], "tries": [1], "retryable": True},
    {"command": "swap-span", "indexes": [3], "tries": [1], "retryable": False},
]


@pytest.fixture(scope="module")
def server(standalone_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> StandaloneAirflow:
    work = tmp_path_factory.mktemp("work")
    settings = {**TEST_SETTINGS, "work_root": work.as_uri(), "span_wave": "8"}
    server: StandaloneAirflow = standalone_factory(settings, fault_env(FAULTS))
    return server


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("media")
    make_image(folder / "face.png")
    make_clip(folder / "three_spans.mp4", 24, seed=1)
    make_clip(folder / "four_spans.mp4", 32, seed=2)
    return folder


def _spans(server: StandaloneAirflow, run_id: str) -> dict[int, tuple[str | None, int]]:
    return {index: value for (task, index), value in server.task_states(run_id).items() if task == "swap_span"}


def _launched(server: StandaloneAirflow, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1) -> bool:
    """Whether the task started a worker process (rather than finding its work done)."""
    log = server.task_log(run_id, task_id, try_number, map_index)
    assert ("Running command" in log) != ("Nothing to do, no worker started" in log), log[-2000:]
    return "Running command" in log


def test_spans_failing_once_are_retried_and_the_output_is_published_on_a_fresh_airflow(
    server: StandaloneAirflow, media: Path
) -> None:
    output = media / "out" / "three_spans.mp4"
    run_id = server.trigger(
        conf([media / "face.png"], media / "three_spans.mp4", output, segment_size=8, processors=[])
    )

    assert server.wait(run_id) == "success", server.task_states(run_id)

    assert _spans(server, run_id) == {0: ("success", 1), 1: ("success", 2), 2: ("success", 2)}
    assert "injected transient failure (swap-span span 1 try 1)" in server.task_log(run_id, "swap_span", 1, 1)
    labels = {ti["map_index"]: ti["rendered_map_index"] for ti in server.task_instances(run_id) if ti["map_index"] >= 0}
    assert labels == {0: "frames 0-7 (1 segment)", 1: "frames 8-15 (1 segment)", 2: "frames 16-23 (1 segment)"}
    assert count_frames(output) == 24
    events = server.api("GET", "/api/v2/assets/events", params={"limit": 100})["asset_events"]
    assert any(event["extra"].get("output_uri") == output.as_uri() for event in events)
    assert not storage.exists(WorkLayout(server.xcom(run_id, "validate", "work_uri")).work_json)  # cleanup removed it


def test_a_failed_span_is_cleared_alone_and_new_runs_reuse_committed_work(
    server: StandaloneAirflow, media: Path
) -> None:
    first_output, second_output = media / "out" / "four_spans.mp4", media / "out" / "four_spans_again.mp4"
    first_conf = conf([media / "face.png"], media / "four_spans.mp4", first_output, segment_size=8, processors=[])
    second_conf = {**first_conf, "output_uri": str(second_output)}

    # Span 3 fails for good on its first try: no retry, its message in its log, merge never starts. (Its segment may
    # still be committed, by a span that finished early and took it: helping.)
    failed_run = server.trigger(first_conf)
    assert server.wait(failed_run) == "failed"
    assert _spans(server, failed_run)[3] == ("failed", 1)
    span_log = server.task_log(failed_run, "swap_span", 1, 3)
    assert "invalid_media" in span_log and "injected permanent failure (swap-span span 3 try 1)" in span_log
    assert server.task_states(failed_run)[("merge", -1)][0] == "upstream_failed"

    # A new run over the same input and options (written elsewhere) shares the work: a span whose segment is committed
    # starts no worker, and committed segments are never rewritten.
    work_uri = server.xcom(failed_run, "validate", "work_uri")
    layout = WorkLayout(work_uri)
    segments = Path(storage.local_path(layout.segments_dir) or "")
    committed = {int(path.name[:5]) for path in segments.glob("?????.json")}
    stamps = {path.name: path.stat().st_mtime_ns for path in segments.glob("*.mp4")}
    assert committed >= {0, 1, 2}
    second_run = server.trigger(second_conf)
    if server.wait(second_run) == "failed":  # span 3's segment was not committed yet: its first try fails here too
        assert 3 not in committed
        server.clear_failed(second_run)
        assert server.wait(second_run) == "success", server.task_states(second_run)
    assert server.xcom(second_run, "validate", "work_uri") == work_uri
    assert [_launched(server, second_run, "swap_span", 1, i) for i in sorted(committed)] == [False] * len(committed)
    assert {name: (segments / name).stat().st_mtime_ns for name in stamps} == stamps
    assert count_frames(second_output) == 32

    # Clearing only the failed task of the first run reruns span 3 alone (try 2); the others keep their tries.
    before = _spans(server, failed_run)
    server.clear_failed(failed_run)
    assert server.wait(failed_run) == "success", server.task_states(failed_run)
    assert _spans(server, failed_run) == {**before, 3: ("success", 2)}
    assert count_frames(first_output) == 32
    assert not storage.exists(layout.work_json)  # both runs are done: the last cleanup removed the shared work

    # A run after the successful one (and its cleanup) finds the output carrying its work id and does no work at all.
    repeat_run = server.trigger(second_conf)
    assert server.wait(repeat_run) == "success", server.task_states(repeat_run)
    assert set(_spans(server, repeat_run)) == {0}  # nothing to plan: one span with nothing to do
    assert not _launched(server, repeat_run, "prepare") and not _launched(server, repeat_run, "swap_span", 1, 0)
    assert not _launched(server, repeat_run, "merge")


def test_clearing_a_span_of_a_finished_run_keeps_it_a_success(server: StandaloneAirflow, media: Path) -> None:
    make_clip(media / "cleared.mp4", 16, seed=3)
    output = media / "out" / "cleared.mp4"
    run_id = server.trigger(conf([media / "face.png"], media / "cleared.mp4", output, segment_size=8, processors=[]))
    assert server.wait(run_id) == "success"
    work_uri = server.xcom(run_id, "validate", "work_uri")
    assert not storage.exists(WorkLayout(work_uri).work_json)  # cleanup removed the shared work

    server.api(
        "POST",
        "/api/v2/dags/facefusion_swap/clearTaskInstances",
        json={
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": [["swap_span", 0]],
            "include_downstream": True,
            "reset_dag_runs": True,
            "only_failed": False,
        },
    )
    assert server.wait(run_id) == "success", server.task_states(run_id)
    assert not _launched(server, run_id, "swap_span", 2, 0)  # the output's marker: nothing to redo
    assert count_frames(output) == 16


def test_bad_conf_is_rejected_naming_the_field(server: StandaloneAirflow, media: Path) -> None:
    good = conf([media / "face.png"], media / "three_spans.mp4", media / "out" / "bad.mp4", processors=[])

    response = server.client.post(
        "/api/v2/dags/facefusion_swap/dagRuns", json={"logical_date": None, "conf": {**good, "face_swapper_blend": 150}}
    )
    assert response.status_code == 400
    assert "face_swapper_blend" in response.text.splitlines()[0]

    # What a schema cannot know (the file is missing) fails in validate, before any worker starts, without retries.
    run_id = server.trigger({**good, "target_uri": str(media / "missing.mp4")})
    assert server.wait(run_id) == "failed"
    states = server.task_states(run_id)
    assert states[("validate", -1)] == ("failed", 1)
    assert states[("prepare", -1)][0] == "upstream_failed"
    assert "Target video (target_uri): " in server.task_log(run_id, "validate", 1)  # its form title and key
