"""The catalogue of every metric the project emits, shared by the worker, the operators, deploy/ and the tests.

The worker's metrics go out through OpenTelemetry (``facefusion.worker.*``); the run-level figures go through Airflow's
own stats (``airflow.facefusion.*``, with Airflow's default ``otel_prefix``/``statsd_prefix`` ``airflow``). Prometheus
sees them under ``prometheus_name``: the OpenTelemetry-to-Prometheus translation (dots to underscores, a unit suffix,
``_total`` on counters) that Prometheus' OTLP receiver and the worker's remote-write exporter both apply, so the
dashboard and the alert rules name the same series whichever way the numbers arrive. Stdlib only: both sides import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from facefusion_provider import contract

MetricKind = Literal["counter", "gauge"]

FrameStage = Literal["decode", "swap", "encode"]
TimedStage = Literal["decode", "detect", "landmarks", "swap", "paste", "enhance", "encode", "upload"]
FaceKind = Literal["detected", "swapped"]
Direction = Literal["read", "write"]
MediaStage = Literal["decode", "encode"]
MediaPath = Literal["nvdec", "nvenc", "software"]

FRAME_STAGES: tuple[FrameStage, ...] = get_args(FrameStage)
TIMED_STAGES: tuple[TimedStage, ...] = get_args(TimedStage)
FACE_KINDS: tuple[FaceKind, ...] = get_args(FaceKind)
DIRECTIONS: tuple[Direction, ...] = get_args(Direction)
MEDIA_STAGES: tuple[MediaStage, ...] = get_args(MediaStage)
MEDIA_PATHS: tuple[MediaPath, ...] = get_args(MediaPath)

# Prometheus' suffix for each unit the catalogue uses (others pass as they are); a unit in braces ("{frame}") adds none.
_UNIT_SUFFIXES = {"s": "seconds", "By": "bytes", "1": "", "": ""}
_NAME_SEPARATORS = re.compile(r"[^a-zA-Z0-9:]+")


def prometheus_name(name: str, unit: str, kind: MetricKind) -> str:
    """The name Prometheus stores for an OpenTelemetry metric (the OTLP receiver's "underscore escaping with
    suffixes" translation, as in prometheus/otlptranslator): tokens joined by ``_``, the unit's suffix unless a token
    already says it, and ``_total`` last on a counter."""
    parts = [part for part in _NAME_SEPARATORS.split(name) if part]
    suffix = "" if unit.startswith("{") else _UNIT_SUFFIXES.get(unit, unit)
    if suffix and suffix not in parts:
        parts.append(suffix)
    if kind == "counter":
        parts = [part for part in parts if part != "total"] + ["total"]
    return "_".join(parts)


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its OpenTelemetry name, instrument kind and unit, and the labels its points carry beyond the
    common attributes."""

    name: str
    kind: MetricKind
    unit: str
    description: str
    labels: tuple[str, ...] = ()

    @property
    def prometheus(self) -> str:
        return prometheus_name(self.name, self.unit, self.kind)


# --- The worker (OpenTelemetry) ---------------------------------------------------------------------------------------

FRAMES = MetricSpec("facefusion.worker.frames", "counter", "{frame}", "Frames through a stage.", ("stage",))
FACES = MetricSpec("facefusion.worker.faces", "counter", "{face}", "Faces detected and swapped.", ("kind",))
# A counter of seconds, not a histogram: rate() of it per stage is the stage breakdown, one series per stage.
STAGE_TIME = MetricSpec("facefusion.worker.stage.time", "counter", "s", "Seconds spent in a stage.", ("stage",))
SEGMENTS_COMMITTED = MetricSpec("facefusion.worker.segments.committed", "counter", "{segment}", "Segments committed.")
SEGMENTS_RETIRED = MetricSpec(
    "facefusion.worker.segments.retired",
    "counter",
    "{segment}",
    "Committed segments found damaged (missing, size, checksum, marker), retired and computed again; and stored"
    " analysis files found damaged (analysis), removed and analysed again.",
    ("kind",),
)
MODEL_LOAD_TIME = MetricSpec(
    "facefusion.worker.model.load.time", "counter", "s", "Seconds spent loading a model.", ("model",)
)
IO_BYTES = MetricSpec("facefusion.worker.io", "counter", "By", "Bytes read and written.", ("direction",))
FAILURES = MetricSpec(
    "facefusion.worker.failures",
    "counter",
    "{failure}",
    "Failed worker commands by failure class (exceptions.py).",
    ("failure_class", "retryable"),
)
FRAMES_REMAINING = MetricSpec(
    "facefusion.worker.frames.remaining", "gauge", "{frame}", "Frames of this task's span not yet encoded."
)
MEDIA_PATH = MetricSpec(
    "facefusion.worker.media.paths",
    "counter",
    "{span}",
    "Spans by the path their frames were decoded and encoded on: NVDEC, NVENC or software (media/hardware.py).",
    ("stage", "path"),
)

WORKER_METRICS: tuple[MetricSpec, ...] = (
    FRAMES,
    FACES,
    STAGE_TIME,
    SEGMENTS_COMMITTED,
    SEGMENTS_RETIRED,
    MODEL_LOAD_TIME,
    IO_BYTES,
    FAILURES,
    FRAMES_REMAINING,
    MEDIA_PATH,
)

# The attributes on every worker point, and the variables they come from. The operators set the FACEFUSION_METRIC_*
# ones (run_metrics.worker_metric_environment); FACEFUSION_TRY_NUMBER they set already; the pod gets NODE_NAME from
# the downward API (spec.nodeName); the GPU is the one the container runtime or the local backend hands the process.
DAG_ID = "dag_id"
RUN_ID = "run_id"
TASK_ID = "task_id"
MAP_INDEX = "map_index"
TRY_NUMBER = "try_number"
WORK_ID = "work_id"
NODE = "node"
GPU = "gpu"
WORKER_ATTRIBUTES = (DAG_ID, RUN_ID, TASK_ID, MAP_INDEX, TRY_NUMBER, WORK_ID, NODE, GPU)

ATTRIBUTE_VARIABLES: dict[str, str] = {
    DAG_ID: contract.METRIC_DAG_ID_VARIABLE,
    RUN_ID: contract.METRIC_RUN_ID_VARIABLE,
    TASK_ID: contract.METRIC_TASK_ID_VARIABLE,
    MAP_INDEX: contract.METRIC_MAP_INDEX_VARIABLE,
    WORK_ID: contract.METRIC_WORK_ID_VARIABLE,
    TRY_NUMBER: contract.TRY_NUMBER_VARIABLE,
}
NODE_VARIABLE = "NODE_NAME"
# The process's own view first (the local backend pins one GPU with it), then the container runtime's (GPU UUIDs).
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")

# Where the worker pushes: the standard OTLP variables, or a Prometheus remote-write URL for Prometheus 2.x.
OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
REMOTE_WRITE_URL_VARIABLE = contract.METRICS_REMOTE_WRITE_URL_VARIABLE
# The exporter settings a worker pod gets from the Airflow side's environment (a subprocess inherits them anyway).
# Not OTEL_EXPORTER_OTLP_HEADERS: it may carry credentials, which reach pods through secrets only.
FORWARDED_VARIABLES = (
    *OTLP_ENDPOINT_VARIABLES,
    REMOTE_WRITE_URL_VARIABLE,
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_METRICS_EXPORTER",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
)
WORKER_SERVICE_NAME = "facefusion-worker"

# --- The run, from the operators (Airflow's stats) --------------------------------------------------------------------

AIRFLOW_PREFIX = "airflow"

SEGMENTS_REUSED = MetricSpec(
    "airflow.facefusion.segments.reused", "counter", "", "Segments a run found committed.", ("dag_id", "run_id")
)
SEGMENTS_LAUNCHED = MetricSpec(
    "airflow.facefusion.segments.launched", "counter", "", "Segments a run had to compute.", ("dag_id", "run_id")
)
RUN_FPS = MetricSpec(
    "airflow.facefusion.run.fps",
    "gauge",
    "",
    "Frames per second of a whole run, trigger to merge.",
    ("dag_id", "run_id"),
)
MERGE_SECONDS = MetricSpec(
    "airflow.facefusion.merge.seconds", "gauge", "", "Seconds the merge of a run took.", ("dag_id", "run_id")
)
OUTPUT_BYTES = MetricSpec(
    "airflow.facefusion.output.bytes", "counter", "", "Bytes of the outputs written.", ("dag_id", "run_id")
)
BAD_INPUT = MetricSpec(
    "airflow.facefusion.bad_input", "counter", "", "Runs refused for bad input, by conf field.", ("dag_id", "field")
)

# What KEDA scales the standing workers on (deploy/chart, keda.prometheus.query): set by a run's span wait (with
# [facefusion] span_workers = standing) while it waits, 0 once its segments are committed.
SEGMENTS_WAITING = MetricSpec(
    "airflow.facefusion.segments.waiting",
    "gauge",
    "",
    "Segments of a live run that no worker has committed yet.",
    ("dag_id", "run_id"),
)

RUN_METRICS: tuple[MetricSpec, ...] = (
    SEGMENTS_REUSED,
    SEGMENTS_LAUNCHED,
    RUN_FPS,
    MERGE_SECONDS,
    OUTPUT_BYTES,
    BAD_INPUT,
    SEGMENTS_WAITING,
)


def stat_name(spec: MetricSpec) -> str:
    """The name to hand Airflow's stats, which adds its own prefix."""
    return spec.name.removeprefix(f"{AIRFLOW_PREFIX}.")


ALL_METRICS: tuple[MetricSpec, ...] = WORKER_METRICS + RUN_METRICS
