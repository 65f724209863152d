"""A real OTLP/HTTP metrics endpoint for tests: an HTTP server on 127.0.0.1 that decodes every
``ExportMetricsServiceRequest`` it is sent and answers as a collector does."""

from __future__ import annotations

import gzip
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

METRICS_PATH = "/v1/metrics"


@dataclass(frozen=True)
class Point:
    """One decoded data point of a counter or gauge."""

    name: str
    unit: str
    kind: str  # "sum" or "gauge"
    monotonic: bool
    attributes: dict[str, Any]
    resource: dict[str, Any]
    value: float
    time_unix_nano: int


def _value(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value"))


def _attributes(pairs: Iterator[KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class OtlpReceiver:
    """Collects every request sent to ``endpoint``; ``latest`` gives each series' last (cumulative) value."""

    def __init__(self) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != METRICS_PATH:
                    self.send_error(404)
                    return
                request = ExportMetricsServiceRequest.FromString(body)
                with receiver._lock:
                    receiver.requests.append(request)
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests assert on what arrived."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{METRICS_PATH}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def points(self) -> list[Point]:
        with self._lock:
            requests = list(self.requests)
        found = []
        for request in requests:
            for resource_metrics in request.resource_metrics:
                resource = _attributes(resource_metrics.resource.attributes)
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        kind = metric.WhichOneof("data")
                        if kind not in ("sum", "gauge"):
                            continue
                        data = getattr(metric, kind)
                        monotonic = kind == "sum" and data.is_monotonic
                        for point in data.data_points:
                            value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
                            found.append(
                                Point(
                                    metric.name,
                                    metric.unit,
                                    kind,
                                    monotonic,
                                    _attributes(point.attributes),
                                    resource,
                                    float(value),
                                    point.time_unix_nano,
                                )
                            )
        return found

    def latest(self, name: str) -> list[Point]:
        """Each series of ``name`` (one per attribute set) at its latest point: a counter's total so far."""
        newest: dict[frozenset[tuple[str, Any]], Point] = {}
        for point in self.points():
            if point.name != name:
                continue
            key = frozenset(point.attributes.items())
            if key not in newest or point.time_unix_nano >= newest[key].time_unix_nano:
                newest[key] = point
        return list(newest.values())

    def total(self, name: str, **labels: Any) -> float:
        """The sum of ``name``'s latest values over the series whose attributes include ``labels``."""
        return sum(
            point.value
            for point in self.latest(name)
            if all(point.attributes.get(key) == value for key, value in labels.items())
        )

    def wait_until(self, condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.05)
        return condition()


def child_environment(**extra: str) -> dict[str, str]:
    """This process's environment without any OTel, metric, GPU or Airflow setting that could redirect a child, plus
    ``extra``."""
    prefixes = ("OTEL_", "FACEFUSION_", "AIRFLOW__", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NODE_NAME")
    return {name: value for name, value in os.environ.items() if not name.startswith(prefixes)} | extra
