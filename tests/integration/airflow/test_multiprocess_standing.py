"""Standing workers on a real multi-process Airflow (scheduler, dag-processor, API server and triggerer as separate
processes, LocalExecutor, Postgres), ``[facefusion] span_workers = standing``, driven over REST:

- three runs triggered at once are worked by two ``facefusion-worker serve`` processes started beside Airflow; the
  swap_span tasks start no worker and wait deferred on the triggerer;
- ``kill -9`` of one standing worker in the middle of a segment: the other takes over its claims once they lapse, and
  every run ends ``success`` with its output frame for frame.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from airflow_harness import conf, frame_md5s, make_clip, make_image
from multiprocess_harness import AirflowCluster

pytestmark = pytest.mark.slow

SEGMENT_FRAMES = 4
SEGMENTS = 8
RUNS = 3
FRAME_DELAY = 0.15  # seconds per frame in the standing workers: a run's 32 frames take about 5 s, time to kill one
LEASE_SECONDS = 3  # a killed worker's claims lapse this soon (FACEFUSION_CLAIM_LEASE_SECONDS)


@pytest.fixture(scope="module")
def cluster(
    airflow_cluster_factory: Callable[..., AirflowCluster], tmp_path_factory: pytest.TempPathFactory
) -> AirflowCluster:
    settings = {"work_root": tmp_path_factory.mktemp("work").as_uri(), "span_workers": "standing"}
    return airflow_cluster_factory(settings)


def _standing_worker(cluster: AirflowCluster, log: Path) -> subprocess.Popen[bytes]:
    faults = [{"command": "swap-span", "indexes": [0], "frame_delay": FRAME_DELAY}]  # helping works as span 0
    env = {
        **cluster.env,
        "FACEFUSION_TEST_FAULTS": json.dumps(faults),
        "FACEFUSION_CLAIM_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    work_root = cluster.env["AIRFLOW__FACEFUSION__WORK_ROOT"]
    with log.open("wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", work_root],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture
def standing_workers(cluster: AirflowCluster, tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    workers = [(_standing_worker(cluster, tmp_path / f"serve-{n}.log"), tmp_path / f"serve-{n}.log") for n in (1, 2)]
    yield workers
    for process, _ in workers:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)


def _commits(log: Path) -> int:
    """Segments a standing worker has committed so far, by its log."""
    return log.read_text().count("(helping another run)") if log.exists() else 0


def test_standing_workers_finish_runs_at_once_and_survive_kill_9_of_one(
    cluster: AirflowCluster, standing_workers: list[tuple[subprocess.Popen[bytes], Path]], tmp_path: Path
) -> None:
    media = tmp_path / "media"
    make_image(media / "face.png")
    targets = [make_clip(media / f"clip-{n}.mp4", SEGMENTS * SEGMENT_FRAMES, seed=20 + n, gop=4) for n in range(RUNS)]
    outputs = [tmp_path / "out" / f"clip-{n}.mp4" for n in range(RUNS)]
    options = {"segment_size": SEGMENT_FRAMES, "processors": [], "output_video_quality": 100}  # lossless
    runs = [cluster.trigger(conf([media / "face.png"], t, o, **options)) for t, o in zip(targets, outputs, strict=True)]
    (victim, victim_log), (_, survivor_log) = standing_workers
    deadline = time.monotonic() + 180
    while _commits(victim_log) < 2:  # then it is working its next segment, claimed
        assert time.monotonic() < deadline and victim.poll() is None, victim_log.read_text()[-3000:]
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)  # mid-segment: it holds a claim it will never renew
    victim.wait()

    for run_id in runs:
        assert cluster.wait(run_id, timeout=240) == "success", cluster.task_states(run_id)
    for target, output in zip(targets, outputs, strict=True):
        assert frame_md5s(output) == frame_md5s(target)
    survivor_text = survivor_log.read_text()
    assert "took over claim generation" in survivor_text, survivor_text[-3000:]  # the victim's claims, once lapsed
    for run_id in runs:
        log = cluster.task_log(run_id, "swap_span", 1, map_index=0)
        assert "waiting, deferred" in log and "Running command" not in log  # no worker started by the task
