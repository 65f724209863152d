"""Standing workers on a real multi-process Airflow (scheduler, dag-processor, API server and triggerer as separate
processes, LocalExecutor, Postgres), ``[facefusion] span_workers = standing``, driven over REST, with the work and the
outputs on S3 (moto's server) that the cluster reaches only through an Airflow AWS connection: the span tasks'
trigger reads the segment markers from the triggerer with it.

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
from dataclasses import dataclass
from pathlib import Path

import pytest
from airflow_harness import conf, frame_md5s, make_clip, make_image
from faults import fault_env
from multiprocess_harness import AirflowCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))  # the S3 servers of tests/integration/s3
from s3_servers import REGION, MotoServer

pytestmark = pytest.mark.slow

SEGMENT_FRAMES = 4
SEGMENTS = 8
RUNS = 3
FRAME_DELAY = 0.15  # seconds per frame in the standing workers: a run's 32 frames take about 5 s, time to kill one
LEASE_SECONDS = 3  # a killed worker's claims lapse this soon (FACEFUSION_CLAIM_LEASE_SECONDS)
CONN_ID = "facefusion_s3"
WORK_ROOT = "s3://work/standing"


@dataclass(frozen=True)
class S3Cluster:
    cluster: AirflowCluster
    moto: MotoServer


@pytest.fixture(scope="module")
def s3_cluster(airflow_cluster_factory: Callable[..., AirflowCluster]) -> Iterator[S3Cluster]:
    moto = MotoServer()
    try:
        for bucket in ("videos", "work"):
            moto.client().create_bucket(Bucket=bucket)
        connection = {
            "conn_type": "aws",
            "login": "testing",
            "password": "testing",
            "extra": {"endpoint_url": moto.url, "region_name": REGION},
        }
        settings = {"work_root": WORK_ROOT, "aws_conn_id": CONN_ID, "span_workers": "standing"}
        env = {f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection)}
        yield S3Cluster(airflow_cluster_factory(settings, env, drop_env=("AWS_", "FACEFUSION_")), moto)
    finally:
        moto.stop()


def _standing_worker(s3: S3Cluster, log: Path) -> subprocess.Popen[bytes]:
    """``facefusion-worker serve`` as a standing worker's pod runs it: the storage secret's variables, no Airflow."""
    faults = [{"command": "swap-span", "indexes": [0], "frame_delay": FRAME_DELAY}]  # helping works as span 0
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("AWS_", "FACEFUSION_"))},
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "FACEFUSION_S3_ENDPOINT_URL": s3.moto.url,
        **fault_env(faults),
        "FACEFUSION_CLAIM_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    with log.open("wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", WORK_ROOT],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture
def standing_workers(s3_cluster: S3Cluster, tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    workers = [(_standing_worker(s3_cluster, tmp_path / f"serve-{n}.log"), tmp_path / f"serve-{n}.log") for n in (1, 2)]
    yield workers
    for process, _ in workers:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)


def _commits(log: Path) -> int:
    """Segments a standing worker has committed so far, by its log."""
    return log.read_text().count("(helping another run)") if log.exists() else 0


def test_standing_workers_finish_runs_at_once_and_survive_kill_9_of_one(
    s3_cluster: S3Cluster, standing_workers: list[tuple[subprocess.Popen[bytes], Path]], tmp_path: Path
) -> None:
    cluster, client = s3_cluster.cluster, s3_cluster.moto.client()
    media = tmp_path / "media"
    make_image(media / "face.png")
    client.upload_file(str(media / "face.png"), "videos", "in/face.png")
    clips = [make_clip(media / f"clip-{n}.mp4", SEGMENTS * SEGMENT_FRAMES, seed=20 + n, gop=4) for n in range(RUNS)]
    for clip in clips:
        client.upload_file(str(clip), "videos", f"in/{clip.name}")
    options = {"segment_size": SEGMENT_FRAMES, "processors": [], "output_video_quality": 100}  # lossless
    runs = [
        cluster.trigger(
            conf(["s3://videos/in/face.png"], f"s3://videos/in/{clip.name}", f"s3://videos/out/{clip.name}", **options)
        )
        for clip in clips
    ]
    (victim, victim_log), (_, survivor_log) = standing_workers
    deadline = time.monotonic() + 180
    while _commits(victim_log) < 2:  # then it is working its next segment, claimed
        assert time.monotonic() < deadline and victim.poll() is None, victim_log.read_text()[-3000:]
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)  # mid-segment: it holds a claim it will never renew
    victim.wait()

    for run_id in runs:
        assert cluster.wait(run_id, timeout=240) == "success", cluster.task_states(run_id)
    for clip in clips:
        client.download_file("videos", f"out/{clip.name}", str(tmp_path / clip.name))
        assert frame_md5s(tmp_path / clip.name) == frame_md5s(clip)
    survivor_text = survivor_log.read_text()
    assert "took over claim generation" in survivor_text, survivor_text[-3000:]  # the victim's claims, once lapsed
    served = survivor_text + victim_log.read_text()
    # A standing worker prepared works from the leases before their prepare tasks (one at least: a busy machine may
    # start a prepare task first, which is as good), and the one that committed each work's last segment merged its
    # output at once: each merge task found its output written.
    assert "before its prepare task" in served, served[-3000:]
    for run_id, clip in zip(runs, clips, strict=True):
        assert f"merged s3://videos/out/{clip.name}" in served, served[-3000:]
        merge_log = cluster.task_log(run_id, "merge", 1)
        assert "already holds the output" in merge_log, merge_log[-3000:]
    for run_id in runs:
        # The latest try: on a loaded machine the scheduler may queue a span wait again, with a new try number.
        state, tries = cluster.task_states(run_id)[("swap_span", 0)]
        assert state == "success", cluster.task_states(run_id)
        log = cluster.task_log(run_id, "swap_span", tries, map_index=0)
        # It waited deferred, or (a busy machine starting it late) found its span committed: never a worker of its own.
        assert "waiting, deferred" in log or "Nothing to do" in log, log[-3000:]
        assert "Running command" not in log, log[-3000:]
