"""A real Prometheus (Debian's package, 2.42: no OTLP receiver, so its remote-write receiver) answers PromQL with the
exact frame total a worker pushed through the worker's remote-write exporter, under the catalogue's Prometheus names:
a simulated frame loop's, and a real ``facefusion-worker run`` swapping a face in a short clip."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import av
import pytest
from demo_clip import short_demo_clip
from otlp_receiver import child_environment
from system_binaries import require_binary
from test_worker_export import TASK_ENVIRONMENT, WORKER

from facefusion_provider import metric_names as names

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    """A private Prometheus with its remote-write receiver on a free loopback port; yields its base URL (a skip without
    Debian's prometheus package, here and in every module that uses this fixture)."""
    program = require_binary("prometheus", package="prometheus")
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    address = f"127.0.0.1:{free_port()}"
    command = [
        program,
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address={address}",
        "--web.enable-remote-write-receiver",
    ]
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://{address}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"prometheus did not start: {(tmp_path / 'prometheus.log').read_text()}")
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def count_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def query(base: str, promql: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(
        f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=10
    ) as reply:
        answer = json.load(reply)
    assert answer["status"] == "success", answer
    result: list[dict[str, object]] = answer["data"]["result"]
    return result


def test_prometheus_answers_with_the_exact_frame_total(prometheus: str) -> None:
    env = child_environment(FACEFUSION_METRICS_REMOTE_WRITE_URL=f"{prometheus}/api/v1/write", **TASK_ENVIRONMENT)
    worker = subprocess.run(
        [sys.executable, str(WORKER), "50", "10"], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert worker.returncode == 0, worker.stderr
    assert "remote write" not in worker.stderr  # no failed push

    run = 'run_id="manual__2026-01-02T03:04:05+00:00"'
    (frames,) = query(prometheus, f'sum({names.FRAMES.prometheus}{{stage="encode", {run}}})')
    assert frames["value"][1] == "50"  # type: ignore[index]
    (series,) = query(prometheus, f'{names.FRAMES.prometheus}{{stage="decode"}}')
    labels = dict(series["metric"])  # type: ignore[call-overload]
    # The SDK gives each process a service.instance.id: a retry's counters are a new series, not a reset.
    assert len(labels.pop("instance")) == 36
    assert labels == {
        "__name__": "facefusion_worker_frames_total",
        "job": "facefusion-worker",
        "stage": "decode",
        "dag_id": "facefusion_swap",
        "run_id": "manual__2026-01-02T03:04:05+00:00",
        "task_id": "swap_span",
        "map_index": "3",
        "try_number": "2",
        "work_id": "work-0123",
        "node": "gpu-node-7",
        "gpu": "GPU-8c1f6c6e-1d6e-4a55-9b8f-3a2d2c1b0a99",
    }
    (remaining,) = query(prometheus, names.FRAMES_REMAINING.prometheus)
    assert remaining["value"][1] == "0"  # type: ignore[index]
    (faces,) = query(prometheus, f'sum by (kind) ({names.FACES.prometheus}{{kind="detected"}})')
    assert faces["value"][1] == "100"  # type: ignore[index]
    present = {entry["metric"]["__name__"] for entry in query(prometheus, '{__name__=~"facefusion_.+"}')}  # type: ignore[index]
    assert present == {spec.prometheus for spec in names.WORKER_METRICS}


def test_prometheus_answers_with_a_real_worker_runs_frame_total(prometheus: str, tmp_path: Path) -> None:
    source, target = short_demo_clip(tmp_path, 24)
    frames = count_frames(target)
    env = child_environment(FACEFUSION_METRICS_REMOTE_WRITE_URL=f"{prometheus}/api/v1/write")
    command = ["run", "--source", source, "--target", str(target), "--output", str(tmp_path / "out.mp4")]
    worker = subprocess.run(
        [sys.executable, "-m", "facefusion_provider.worker.cli", *command, "--segment-size", "8"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert worker.returncode == 0, worker.stderr
    assert "remote write" not in worker.stderr  # no failed push

    selector = f'work_id="{json.loads(worker.stdout)["work_id"]}"'
    for stage in ("decode", "swap", "encode"):
        (total,) = query(prometheus, f'sum({names.FRAMES.prometheus}{{stage="{stage}", {selector}}})')
        assert total["value"][1] == str(frames) == "24", stage  # type: ignore[index]
    (segments,) = query(prometheus, f"sum({names.SEGMENTS_COMMITTED.prometheus}{{{selector}}})")
    assert segments["value"][1] == "3"  # type: ignore[index]
    (swapped,) = query(prometheus, f'sum({names.FACES.prometheus}{{kind="swapped", {selector}}})')
    assert 0 < int(swapped["value"][1]) <= frames  # type: ignore[index]  # one face per frame at most
