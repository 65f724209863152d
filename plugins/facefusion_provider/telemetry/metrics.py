"""What the worker measures, exported with OpenTelemetry when an exporter is configured, and nothing otherwise.

``worker_metrics()`` returns a ``WorkerMetrics``: a no-op when no exporter is configured (OpenTelemetry is then never
imported), else one bound to the attributes of this task (dag, run, task, map index, try, work, node, GPU). The frame loop
calls it directly: ``metrics.frames("encode", n)``, ``with metrics.timed("swap"): ...``, ``metrics.segment_committed()``.

Configured means ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (OTLP over HTTP, every
standard ``OTEL_*`` variable applies) or ``FACEFUSION_METRICS_REMOTE_WRITE_URL`` (Prometheus remote write, for a
Prometheus without an OTLP receiver), unless ``OTEL_SDK_DISABLED=true`` or ``OTEL_METRICS_EXPORTER=none``.

Points are pushed, never scraped (a span's pod lives minutes): in the background at every segment commit and every
``OTEL_METRIC_EXPORT_INTERVAL`` (15 s by default here), and once more, synchronously, when the process exits, which
includes SIGTERM: the worker CLI turns it into ``SystemExit`` and so runs the exit hook. A SIGKILL loses only what was
counted since the last push.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from facefusion_provider import metric_names as names
from facefusion_provider.contract import WorkerSettings, worker_settings
from facefusion_provider.metric_names import Direction, FaceKind, FrameStage, MediaPath, MediaStage, TimedStage

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.resources import Resource

DEFAULT_EXPORT_INTERVAL_S = 15.0
# The last push at exit must fit in a pod's termination grace period beside the worker's own clean-up.
EXIT_FLUSH_TIMEOUT_S = 5.0
_OTLP_TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
_NO_GPU = frozenset({"", "all", "none", "void", "NoDevFiles"})


class WorkerMetrics:
    """The worker's measurements. This base class records nothing: it is what the worker gets when no exporter is
    configured, so every call costs one method dispatch."""

    def frames(self, stage: FrameStage, n: int = 1) -> None:
        """``n`` frames went through ``stage`` (decode, swap, encode)."""

    def faces(self, kind: FaceKind, n: int) -> None:
        """``n`` faces were detected or swapped."""

    def stage_seconds(self, stage: TimedStage, seconds: float) -> None:
        """``seconds`` were spent in ``stage``."""

    def timed(self, stage: TimedStage) -> contextlib.AbstractContextManager[Any]:
        """A ``with`` block whose wall time counts as ``stage``'s."""
        return _NOTHING_TIMED

    def io_bytes(self, direction: Direction, n: int) -> None:
        """``n`` bytes were read from or written to storage."""

    def model_load(self, model: str, seconds: float) -> None:
        """Loading ``model`` took ``seconds``."""

    def failure(self, failure_class: str, *, retryable: bool) -> None:
        """The command failed with ``failure_class`` (``FaceFusionError.failure_class``, or ``internal``)."""

    def frames_remaining(self, n: int) -> None:
        """Frames of this task's span still to encode (feeds the ETA)."""

    def media_path(self, stage: MediaStage, path: MediaPath) -> None:
        """A span decodes or encodes its frames on ``path`` (NVDEC, NVENC or software)."""

    def segment_committed(self) -> None:
        """A segment was committed: count it and push everything in the background."""

    def segment_retired(self, kind: str) -> None:
        """A committed segment failed its check (``kind``: missing, size, checksum, marker) and was retired."""

    def analysis_retired(self) -> None:
        """A stored analysis file failed its check and was removed (its frames are analysed again)."""

    def flush(self) -> None:
        """Push what was counted so far, in the background."""


_NOTHING_TIMED = contextlib.nullcontext()
_NULL_METRICS = WorkerMetrics()


class _StageTimer:
    """Times a ``with`` block into one stage's seconds."""

    __slots__ = ("_metrics", "_stage", "_start")

    def __init__(self, metrics: WorkerMetrics, stage: TimedStage) -> None:
        self._metrics = metrics
        self._stage = stage
        self._start = 0.0

    def __enter__(self) -> _StageTimer:
        self._start = time.perf_counter()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._metrics.stage_seconds(self._stage, time.perf_counter() - self._start)


AttributeKey = tuple[tuple[str, str], ...]


class _Totals:
    """The process's sums (counters) and last values (gauges) per metric and attribute set. The frame loop adds to
    them from any thread for the price of a lock; OpenTelemetry reads them at each push through observable
    instruments, so its per-measurement work (about 7 us a call here) never runs per frame."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[AttributeKey, float]] = {spec.name: {} for spec in names.WORKER_METRICS}

    def add(self, name: str, key: AttributeKey, value: float) -> None:
        with self._lock:
            values = self._values[name]
            values[key] = values.get(key, 0) + value

    def set(self, name: str, key: AttributeKey, value: float) -> None:
        with self._lock:
            self._values[name][key] = value

    def read(self, name: str) -> list[tuple[AttributeKey, float]]:
        with self._lock:
            return list(self._values[name].items())


class _ExportedMetrics(WorkerMetrics):
    """Measurements added to the process's totals, every one carrying this task's attributes."""

    def __init__(self, exporting: _Exporting, attributes: Mapping[str, str]) -> None:
        self._exporting = exporting
        self._totals = exporting.totals
        self._attributes = dict(attributes)
        self._plain = tuple(sorted(self._attributes.items()))
        # One key per label value, built once: the frame loop calls these for every batch.
        self._keys: dict[tuple[str, str], AttributeKey] = {}

    def _key(self, label: str, value: str) -> AttributeKey:
        key = self._keys.get((label, value))
        if key is None:
            key = self._keys[(label, value)] = tuple(sorted({**self._attributes, label: value}.items()))
        return key

    def frames(self, stage: FrameStage, n: int = 1) -> None:
        self._totals.add(names.FRAMES.name, self._key("stage", stage), n)

    def faces(self, kind: FaceKind, n: int) -> None:
        self._totals.add(names.FACES.name, self._key("kind", kind), n)

    def stage_seconds(self, stage: TimedStage, seconds: float) -> None:
        self._totals.add(names.STAGE_TIME.name, self._key("stage", stage), seconds)

    def timed(self, stage: TimedStage) -> contextlib.AbstractContextManager[Any]:
        return _StageTimer(self, stage)

    def io_bytes(self, direction: Direction, n: int) -> None:
        self._totals.add(names.IO_BYTES.name, self._key("direction", direction), n)

    def model_load(self, model: str, seconds: float) -> None:
        self._totals.add(names.MODEL_LOAD_TIME.name, self._key("model", model), seconds)

    def failure(self, failure_class: str, *, retryable: bool) -> None:
        labels = {**self._attributes, "failure_class": failure_class, "retryable": str(retryable).lower()}
        self._totals.add(names.FAILURES.name, tuple(sorted(labels.items())), 1)

    def frames_remaining(self, n: int) -> None:
        self._totals.set(names.FRAMES_REMAINING.name, self._plain, n)

    def media_path(self, stage: MediaStage, path: MediaPath) -> None:
        labels = {**self._attributes, "stage": stage, "path": path}
        self._totals.add(names.MEDIA_PATH.name, tuple(sorted(labels.items())), 1)

    def segment_committed(self) -> None:
        self._totals.add(names.SEGMENTS_COMMITTED.name, self._plain, 1)
        self._exporting.wake()

    def segment_retired(self, kind: str) -> None:
        self._totals.add(names.SEGMENTS_RETIRED.name, self._key("kind", kind), 1)
        self._exporting.wake()

    def analysis_retired(self) -> None:
        self._totals.add(names.SEGMENTS_RETIRED.name, self._key("kind", "analysis"), 1)

    def flush(self) -> None:
        self._exporting.wake()


def _observe(provider: MeterProvider, totals: _Totals) -> None:
    """One observable instrument per catalogue metric, reporting the totals (cumulative sums, last gauge values)."""
    from opentelemetry.metrics import CallbackOptions, Observation

    meter = provider.get_meter("facefusion_provider.worker")
    for spec in names.WORKER_METRICS:

        def observe(options: CallbackOptions, name: str = spec.name) -> list[Observation]:
            return [Observation(value, dict(key)) for key, value in totals.read(name)]

        create = meter.create_observable_counter if spec.kind == "counter" else meter.create_observable_gauge
        create(spec.name, callbacks=[observe], unit=spec.unit, description=spec.description)


class _Exporting:
    """The process's meter provider and the thread that pushes its points: when woken (a commit) or every interval."""

    def __init__(self, provider: MeterProvider, interval_s: float) -> None:
        self.provider = provider
        self.totals = _Totals()
        _observe(provider, self.totals)
        self._interval_s = interval_s
        self._wake = threading.Event()
        self._stopping = False
        # Not named facefusion-*: that prefix is the pipeline's, whose threads must all end with a command.
        self._thread = threading.Thread(target=self._push_until_stopped, name="metrics-push", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def _push_until_stopped(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if not self._stopping:
                self.provider.force_flush()

    def close(self, timeout_s: float) -> None:
        """Stop the thread (waiting at most ``timeout_s`` for a push under way), push once more and shut the exporter
        down; the exporters' own timeout (``EXIT_FLUSH_TIMEOUT_S`` by default) bounds that last push."""
        deadline = time.monotonic() + timeout_s
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout_s)
        remaining_ms = max(deadline - time.monotonic(), 0.1) * 1000
        self.provider.force_flush(timeout_millis=remaining_ms)
        self.provider.shutdown(timeout_millis=max(deadline - time.monotonic(), 0.1) * 1000)


class _Process:
    """The process's one exporting state, made on first use."""

    lock = threading.Lock()
    exporting: _Exporting | None = None


def exporter_configured(settings: WorkerSettings, environ: Mapping[str, str]) -> bool:
    """Whether metrics are asked for: an OTLP endpoint (the standard variables) or a remote-write URL, no opt-out."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "none":
        return False
    endpoints = (environ.get(variable, "").strip() for variable in names.OTLP_ENDPOINT_VARIABLES)
    return bool(settings.metrics_remote_write_url) or any(endpoints)


def metric_attributes(settings: WorkerSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """This task's attributes from the settings the operators set, the node and the GPU; unknown ones are left out."""
    named = {
        names.DAG_ID: settings.metric_dag_id,
        names.RUN_ID: settings.metric_run_id,
        names.TASK_ID: settings.metric_task_id,
        names.MAP_INDEX: settings.metric_map_index,
        names.WORK_ID: settings.metric_work_id,
        names.TRY_NUMBER: str(settings.try_number),
    }
    attributes = {name: value for name, value in named.items() if value}
    attributes[names.NODE] = environ.get(names.NODE_VARIABLE) or socket.gethostname()
    for variable in names.GPU_VARIABLES:
        gpu = environ.get(variable, "").strip()
        if gpu not in _NO_GPU:
            attributes[names.GPU] = gpu
            break
    return attributes


def worker_metrics(attributes: Mapping[str, str] | None = None) -> WorkerMetrics:
    """The worker's metrics for this task: the settings' attributes plus ``attributes`` (e.g. the work id once
    known). A no-op, without importing OpenTelemetry, when no exporter is configured."""
    settings = worker_settings()
    if not exporter_configured(settings, os.environ):
        return _NULL_METRICS
    exporting = _start_exporting(settings)
    return _ExportedMetrics(exporting, {**metric_attributes(settings, os.environ), **(attributes or {})})


def _start_exporting(settings: WorkerSettings) -> _Exporting:
    """The process's one meter provider, made on first use; its last push is registered to run at exit."""
    with _Process.lock:
        if _Process.exporting is None:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            # An infinite interval: the reader starts no thread of its own; _Exporting decides when to push.
            reader = PeriodicExportingMetricReader(_exporter(settings, os.environ), export_interval_millis=float("inf"))
            provider = MeterProvider(metric_readers=[reader], resource=_resource(), shutdown_on_exit=False)
            _Process.exporting = _Exporting(provider, _export_interval_s(os.environ))
            atexit.register(close_metrics)
        return _Process.exporting


def close_metrics(timeout_s: float = EXIT_FLUSH_TIMEOUT_S) -> None:
    """Push what is left and stop exporting (at exit; idempotent). Later measurements go nowhere."""
    with _Process.lock:
        exporting, _Process.exporting = _Process.exporting, None
    if exporting is not None:
        exporting.close(timeout_s)


def _exporter(settings: WorkerSettings, environ: Mapping[str, str]) -> MetricExporter:
    if url := settings.metrics_remote_write_url:
        from facefusion_provider.telemetry.remote_write import RemoteWriteExporter

        return RemoteWriteExporter(url, timeout_s=EXIT_FLUSH_TIMEOUT_S)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    # The SDK's 10 s default would eat most of a pod's grace period when the receiver is down.
    explicit_timeout = any(environ.get(variable) for variable in _OTLP_TIMEOUT_VARIABLES)
    return OTLPMetricExporter(timeout=None if explicit_timeout else EXIT_FLUSH_TIMEOUT_S)


def _resource() -> Resource:
    """The standard resource (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``), named facefusion-worker unless
    those name it."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: names.WORKER_SERVICE_NAME}))
    return resource


def _export_interval_s(environ: Mapping[str, str]) -> float:
    try:
        interval_s = float(environ["OTEL_METRIC_EXPORT_INTERVAL"]) / 1000
    except (KeyError, ValueError):
        return DEFAULT_EXPORT_INTERVAL_S
    return interval_s if interval_s > 0 else DEFAULT_EXPORT_INTERVAL_S
