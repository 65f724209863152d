"""Smoke test of the multi-process harness: ``facefusion_swap`` on scheduler + dag-processor + API server + triggerer
over Postgres, with a pass-through conf (no processors) on tiny clips.

One cluster for the module, on Airflow's default_pool (a fresh home needs no pool). A run succeeds; two runs triggered
at once both succeed; a run survives ``kill -9`` of the scheduler (and its restart) and ``kill -9`` of a span's worker
subprocess, each with an output frame for frame equal to its input (lossless pass-through); and after ``stop`` no
process of the cluster is left. Task ids come from ``SWAP_TASKS`` only.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import SWAP_TASKS, conf, count_frames, frame_md5s, make_clip, make_image
from multiprocess_harness import AirflowCluster

pytestmark = pytest.mark.slow

SEGMENT_FRAMES = 8
CLIP_FRAMES = 3 * SEGMENT_FRAMES


@pytest.fixture(scope="module")
def cluster(airflow_cluster_factory: Callable[..., AirflowCluster], tmp_path_factory: pytest.TempPathFactory) -> Any:
    work = tmp_path_factory.mktemp("work")
    return airflow_cluster_factory({"work_root": work.as_uri()})


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("media")
    make_image(folder / "face.png")
    for seed in range(5):  # one clip per run: no run finds another's work done (a rerun may launch no worker at all)
        make_clip(folder / f"clip{seed}.mp4", CLIP_FRAMES, seed=seed)
    return folder


def _pass_through(media: Path, clip: str, output: str) -> dict[str, Any]:
    """No processors and a lossless encode: the output must show exactly the input's frames."""
    return conf(
        [media / "face.png"],
        media / clip,
        media / "out" / output,
        segment_size=SEGMENT_FRAMES,
        processors=[],
        output_video_quality=100,
    )


def _swap_states(cluster: AirflowCluster, run_id: str) -> dict[int, str | None]:
    return {
        index: state for (task, index), (state, _) in cluster.task_states(run_id).items() if task == SWAP_TASKS.swap
    }


def test_a_pass_through_run_succeeds(cluster: AirflowCluster, media: Path) -> None:
    run_id = cluster.trigger(_pass_through(media, "clip0.mp4", "clip0.mp4"))

    assert cluster.wait(run_id) == "success", cluster.task_states(run_id)
    swaps = _swap_states(cluster, run_id)
    assert swaps and set(swaps.values()) == {"success"}, swaps  # how many depends on the plan, not on this harness
    assert count_frames(media / "out" / "clip0.mp4") == CLIP_FRAMES
    would_clear = cluster.clear_task_instances(
        run_id, task_ids=[SWAP_TASKS.swap], map_indexes=[1], include_downstream=False, dry_run=True
    )
    assert [(ti["task_id"], ti["map_index"]) for ti in would_clear] == [(SWAP_TASKS.swap, 1)]


def test_two_runs_triggered_at_once_both_succeed(cluster: AirflowCluster, media: Path) -> None:
    runs = [cluster.trigger(_pass_through(media, f"clip{i}.mp4", f"together{i}.mp4")) for i in (1, 2)]

    assert [cluster.wait(run_id) for run_id in runs] == ["success", "success"]
    assert [count_frames(media / "out" / f"together{i}.mp4") for i in (1, 2)] == [CLIP_FRAMES] * 2


def _wait_for_running_swap(cluster: AirflowCluster, run_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while "running" not in _swap_states(cluster, run_id).values():
        assert time.monotonic() < deadline, cluster.task_states(run_id)
        assert cluster.run_state(run_id) in ("queued", "running"), cluster.task_states(run_id)
        time.sleep(0.2)


def test_a_run_survives_kill_9_of_the_scheduler(cluster: AirflowCluster, media: Path) -> None:
    """``kill -9`` of the scheduler's pid mid-run, then a restart as a supervisor does it: what is left of the old
    scheduler (its executor's workers, their tasks) is killed too, and the new scheduler finishes the run. (Orphaned
    workers left alive keep the killed scheduler's database session open with its row lock on the run: the new
    scheduler then skips that run forever; see ``restart_component(keep_orphans=True)``.)"""
    output = media / "out" / "killed.mp4"
    run_id = cluster.trigger(_pass_through(media, "clip3.mp4", output.name))
    _wait_for_running_swap(cluster, run_id)

    killed = cluster.kill_component("scheduler", signal.SIGKILL)
    cluster.restart_component("scheduler")

    assert cluster.components["scheduler"].process.pid != killed
    assert cluster.wait(run_id, timeout=240) == "success", cluster.task_states(run_id)
    assert frame_md5s(output) == frame_md5s(media / "clip3.mp4")


def test_a_killed_worker_subprocess_is_retried(cluster: AirflowCluster, media: Path) -> None:
    """``kill -9`` of the first span worker of the run that shows up (which span that is depends on the start order:
    a span whose segments others took launches no worker); its task's retry finishes it."""
    output = media / "out" / "worker_killed.mp4"
    target = media / "clip4.mp4"
    run_id = cluster.trigger(_pass_through(media, target.name, output.name))

    killed = cluster.kill_worker(SWAP_TASKS.swap_command, target.as_uri())
    span = int(killed.argv[killed.argv.index("--span") + 1])

    assert cluster.wait(run_id) == "success", cluster.task_states(run_id)
    assert cluster.task_states(run_id)[(SWAP_TASKS.swap, span)] == ("success", 2), killed
    assert frame_md5s(output) == frame_md5s(target)


def test_stop_leaves_no_process(cluster: AirflowCluster) -> None:
    assert cluster.processes(), "the cluster should be running"

    assert cluster.stop() == []
    assert cluster.processes() == []
