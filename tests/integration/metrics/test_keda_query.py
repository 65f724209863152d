"""KEDA's query, exactly as the chart renders it into the ScaledObject, against a real Prometheus fed by a real run.

``facefusion_swap`` runs (``airflow dags test``) with ``span_workers = standing`` and no standing worker yet: its span
task defers and the wait (task, then trigger) sets ``airflow.facefusion.segments.waiting`` through Airflow's OTel
backend, as in a deployment. Debian's Prometheus 2.42 has no OTLP receiver, so the OTLP requests reach it through
``OtlpToPrometheus``: the project's OTLP endpoint, forwarding every point by remote write under the names Prometheus'
OTLP receiver gives them (``metric_names.prometheus_name``, ``telemetry/remote_write.py``). The query must say the run's N
free segments while it waits; then a ``facefusion-worker serve`` starts (what KEDA would start), works the segments,
and the query falls to 0."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import pytest
import yaml
from demo_airflow import airflow_env, dags_test, init_home, run_succeeded, swap_conf
from demo_clip import short_demo_clip
from helm_python import Chart
from otlp_receiver import OtlpReceiver, Point, child_environment
from test_prometheus_remote_write import prometheus, query  # noqa: F401  (prometheus: a fixture)

from facefusion_provider.metric_names import MetricKind, prometheus_name
from facefusion_provider.telemetry.remote_write import HEADERS, Sample, snappy_block, write_request
from facefusion_provider.work.layout import output_marker_uri

pytestmark = pytest.mark.slow

CHART = Path(__file__).resolve().parents[3] / "deploy" / "chart"
FRAMES = 32
SEGMENT_SIZE = 8  # 4 segments, one span (standing runs have one)


def scaled_object_query() -> str:
    """The Prometheus query of the ScaledObject that ``helm install`` with KEDA on renders."""
    rendered = Chart.load(CHART).render({"keda": {"enabled": True}}, name="facefusion", namespace="facefusion")
    manifests = [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]
    (scaled,) = [doc for doc in manifests if doc["kind"] == "ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    return str(trigger["metadata"]["query"])


def _sample(point: Point) -> Sample:
    kind: MetricKind = "counter" if point.monotonic else "gauge"
    labels = {re.sub(r"[^a-zA-Z0-9_]", "_", key): str(value) for key, value in point.attributes.items()}
    if service := point.resource.get("service.name"):
        labels["job"] = str(service)
    if instance := point.resource.get("service.instance.id"):
        labels["instance"] = str(instance)
    labels["__name__"] = prometheus_name(point.name, point.unit, kind)
    return labels, point.value, point.time_unix_nano // 1_000_000


class OtlpToPrometheus:
    """An OTLP/HTTP endpoint whose points reach a Prometheus by remote write, as Prometheus 3's OTLP receiver takes
    them: one remote-write request per forward, every 0.2 s."""

    def __init__(self, remote_write_url: str) -> None:
        self.receiver = OtlpReceiver()
        self.url = remote_write_url
        self.forwarded = 0
        self.refused: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._forward_loop, name="otlp-to-prometheus", daemon=True)

    @property
    def endpoint(self) -> str:
        return str(self.receiver.endpoint)

    def start(self) -> OtlpToPrometheus:
        self.receiver.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.receiver.stop()

    def _forward_loop(self) -> None:
        while not self._stop.wait(0.2):
            points = self.receiver.points()
            fresh, self.forwarded = points[self.forwarded :], len(points)
            if fresh:
                self._write(fresh)

    def _write(self, points: list[Point]) -> None:
        body = snappy_block(write_request(iter(_sample(point) for point in points)))
        request = urllib.request.Request(self.url, data=body, headers=HEADERS, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10):
                pass
        except urllib.error.HTTPError as error:  # e.g. an out-of-order sample: the others are stored
            self.refused.append(error.read().decode(errors="replace"))


@pytest.fixture
def bridge(prometheus: str) -> Iterator[OtlpToPrometheus]:  # noqa: F811
    started = OtlpToPrometheus(f"{prometheus}/api/v1/write").start()
    yield started
    started.stop()


def waiting_segments(base: str, promql: str) -> float | None:
    """The query's one value now, or None while it has none."""
    result = query(base, promql)
    if not result:
        return None
    (only,) = result
    value: Any = only["value"]
    return float(value[1])


def _poll_until(base: str, promql: str, wanted: float, seconds: float) -> float | None:
    deadline = time.monotonic() + seconds
    value = waiting_segments(base, promql)
    while value != wanted and time.monotonic() < deadline:
        time.sleep(0.5)
        value = waiting_segments(base, promql)
    return value


def _frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_the_scaled_objects_query_counts_a_waiting_runs_free_segments_then_zero(
    prometheus: str,  # noqa: F811
    bridge: OtlpToPrometheus,
    tmp_path: Path,
) -> None:
    promql = scaled_object_query()
    source, target = short_demo_clip(tmp_path, FRAMES)
    expected = math.ceil(_frames(target) / SEGMENT_SIZE)
    home = tmp_path / "airflow"
    work_root = (tmp_path / "work").as_uri()
    own = {
        key: value
        for key, value in airflow_env(home, settings={"work_root": work_root, "span_workers": "standing"}).items()
        if key.startswith("AIRFLOW")
    }
    env = child_environment(
        **own,
        AIRFLOW__METRICS__OTEL_ON="True",
        AIRFLOW__METRICS__OTEL_INTERVAL_MILLISECONDS="1000",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=bridge.endpoint,
    )
    init_home(env)
    assert waiting_segments(prometheus, promql) == 0  # nothing ever waited: `or vector(0)`, KEDA keeps zero workers

    conf = swap_conf([source], str(target), str(tmp_path / "out.mp4"), {"segment_size": SEGMENT_SIZE})
    result: dict[str, subprocess.CompletedProcess[str]] = {}
    run = threading.Thread(target=lambda: result.update(done=dags_test(conf, env, timeout=600)), daemon=True)
    run.start()
    standing: subprocess.Popen[str] | None = None
    try:
        seen = _poll_while(run, result, prometheus, promql, lambda value: value > 0, 300, "the span wait")
        assert seen == expected == 4  # every segment of the run is free: no worker has one
        time.sleep(3)  # a few exports later (KEDA polls every 15 s), still the same figure
        assert waiting_segments(prometheus, promql) == expected

        standing = subprocess.Popen(
            [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", work_root],
            env=child_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        run.join(timeout=600)
        assert "done" in result, "airflow dags test did not finish"
        done = result["done"]
        assert run_succeeded(done), (done.stdout + done.stderr)[-6000:]
        assert _poll_until(prometheus, promql, 0, 60) == 0  # the wait's last figure, kept 2 m by last_over_time
    finally:
        if standing is not None:
            standing.terminate()  # SIGTERM, as KEDA scales it down: it drains
            _, err = standing.communicate(timeout=60)
            assert f"{expected} segments of 1 runs committed so far" in err, err[-3000:]
    assert not bridge.refused, bridge.refused[:3]
    assert Path(output_marker_uri(str(tmp_path / "out.mp4"))).exists()


def _poll_while(
    run: threading.Thread,
    result: dict[str, subprocess.CompletedProcess[str]],
    base: str,
    promql: str,
    accept: Any,
    seconds: float,
    what: str,
) -> float:
    """Queries every 0.5 s until ``accept`` takes the value, failing at once if the run ended first."""
    deadline = time.monotonic() + seconds
    while True:
        value = waiting_segments(base, promql)
        if value is not None and accept(value):
            return value
        if time.monotonic() > deadline or not run.is_alive():
            done = result.get("done")
            log = (done.stdout + done.stderr)[-5000:] if done else ""
            raise AssertionError(f"{what}: the query said {value} after {seconds} s\n{log}")
        time.sleep(0.5)
