"""The README's metrics picture: the demo run through Airflow with its workers' metrics pushed into a real Prometheus,
drawn from Prometheus' own answers (PromQL ``query_range``) with matplotlib.

Prometheus is Debian's package (2.42: no OTLP receiver, so the workers use its remote-write receiver,
``FACEFUSION_METRICS_REMOTE_WRITE_URL``), private to this script. The run is ``make demo``'s (``airflow dags test``
on the embedded default, the demo clip, 300 frames) in segments of 32 and two spans, the workers pushing every 2 s as
well as at each commit. Every query names its metric from the catalogue (metric_names.py), as the dashboard does.

    python bench/metrics_picture.py                      # writes docs/metrics-demo.png (the run itself under out/metrics)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # synth, readback, demo

from demo import make_demo_inputs  # noqa: E402
from demo_airflow import airflow_env, dags_test, init_home, run_succeeded, swap_conf  # noqa: E402

from facefusion_provider import metric_names as names  # noqa: E402

PROMETHEUS = Path("/usr/bin/prometheus")
SEGMENT_SIZE = 32
SPAN_WAVE = 2
PUSH_INTERVAL_MS = 2000
STEP_S = 1.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def prometheus(folder: Path) -> Iterator[str]:
    """A private Prometheus with its remote-write receiver on a free loopback port; yields its base URL."""
    config = folder / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    address = f"127.0.0.1:{_free_port()}"
    command = [
        str(PROMETHEUS),
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address={address}",
        "--web.enable-remote-write-receiver",
    ]
    with (folder / "prometheus.log").open("w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_ready(f"http://{address}", server)
            yield f"http://{address}"
        finally:
            server.terminate()
            server.wait(timeout=30)


def _wait_ready(base: str, server: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{base}/-/ready", timeout=1) as reply:
            if reply.status == 200:
                return
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("prometheus did not start")
        time.sleep(0.1)


def run_demo(out: Path, remote_write_url: str) -> tuple[float, float]:
    """The demo DAG run with its workers pushing to ``remote_write_url``; its start and end (Unix seconds)."""
    source, target = make_demo_inputs(str(out))
    settings = {"work_root": (out / "work").as_uri(), "span_wave": str(SPAN_WAVE)}
    env = airflow_env(out / "airflow", settings=settings)
    env |= {names.REMOTE_WRITE_URL_VARIABLE: remote_write_url, "OTEL_METRIC_EXPORT_INTERVAL": str(PUSH_INTERVAL_MS)}
    init_home(env)
    conf = swap_conf([source], target, str(out / "demo.mp4"), {"segment_size": SEGMENT_SIZE})
    began = time.time()
    result = dags_test(conf, env)
    ended = time.time()
    if not run_succeeded(result):
        raise RuntimeError(f"the demo run failed:\n{(result.stdout + result.stderr)[-6000:]}")
    return began, ended


def query_range(base: str, promql: str, start: float, end: float) -> list[dict[str, Any]]:
    """Prometheus' answer to ``promql`` from ``start`` to ``end``: one entry per series, ``values`` as [t, "v"]."""
    params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{STEP_S}"}
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{urllib.parse.urlencode(params)}", timeout=30) as reply:
        answer = json.load(reply)
    if answer["status"] != "success":
        raise RuntimeError(f"{promql}: {answer}")
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


PANELS: tuple[tuple[str, str, str, str], ...] = (
    ("Frames by stage (all workers)", f"sum by (stage) ({names.FRAMES.prometheus})", "stage", "frames"),
    (
        "Encode rate (frames per second, 10 s window)",
        f'sum(rate({names.FRAMES.prometheus}{{stage="encode"}}[10s]))',
        "",
        "fps",
    ),
    ("Segments committed, by span", f"sum by (map_index) ({names.SEGMENTS_COMMITTED.prometheus})", "map_index", ""),
    ("Seconds spent per stage (stacked)", f"sum by (stage) ({names.STAGE_TIME.prometheus})", "stage", "s"),
)


def draw(base: str, start: float, end: float, picture: Path) -> dict[str, str]:
    """One panel per query of ``PANELS``; returns the queries by panel title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True)
    for axis, (title, promql, label, unit) in zip(axes.flat, PANELS, strict=True):
        series = sorted(query_range(base, promql, start, end), key=lambda item: str(item["metric"].get(label, "")))
        stacked = title.endswith("(stacked)")
        curves = [
            (
                [float(t) - start for t, _ in item["values"]],
                [float(v) for _, v in item["values"]],
                _legend(label, item["metric"]),
            )
            for item in series
        ]
        if stacked and curves:
            _stack(axis, curves)
        else:
            for times, values, name in curves:
                axis.step(times, values, where="post", label=name)
        axis.set_title(title, fontsize=10)
        axis.set_ylabel(unit)
        axis.grid(alpha=0.3)
        if label:
            axis.legend(fontsize=8, loc="upper left")
    for axis in axes[1]:
        axis.set_xlabel("seconds since the run was triggered")
    stamp = datetime.fromtimestamp(start).strftime("%Y-%m-%d %H:%M")
    figure.suptitle(f"facefusion_swap demo run ({stamp}): worker metrics as Prometheus answers them", fontsize=11)
    figure.tight_layout()
    picture.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(picture, dpi=110)
    return {title: promql for title, promql, _, _ in PANELS}


def _legend(label: str, metric: dict[str, str]) -> str:
    if label == "map_index":
        return f"span {metric.get(label, '?')}"
    return metric.get(label, "all") if label else "all"


def _stack(axis: Any, curves: list[tuple[list[float], list[float], str]]) -> None:
    """Curves summed on a common time grid (a series absent at a time counts as its last value, or 0)."""
    grid = sorted({t for times, _, _ in curves for t in times})
    layers = []
    for times, values, _ in curves:
        known = dict(zip(times, values, strict=True))
        layer, last = [], 0.0
        for t in grid:
            last = known.get(t, last)
            layer.append(last)
        layers.append(layer)
    axis.stackplot(grid, layers, labels=[name for _, _, name in curves], step="post")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "out" / "metrics", help="the run's inputs, output and home")
    parser.add_argument("--picture", type=Path, default=REPO / "docs" / "metrics-demo.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="prometheus-") as folder, prometheus(Path(folder)) as base:
        start, end = run_demo(args.out.absolute(), f"{base}/api/v1/write")
        queries = draw(base, start, end + 5, args.picture)
    print(json.dumps({"picture": str(args.picture), "seconds": round(end - start, 1), "queries": queries}, indent=2))


if __name__ == "__main__":
    main()
