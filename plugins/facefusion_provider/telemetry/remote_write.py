"""A Prometheus remote-write exporter for the worker's OpenTelemetry metrics, for a Prometheus without an OTLP receiver
(2.x with ``--web.enable-remote-write-receiver``; Mimir, Thanos Receive and VictoriaMetrics take it too).

Stdlib only, on purpose: PyPI's ``opentelemetry-exporter-prometheus-remote-write`` (0.66b1) requires protobuf < 7, which
this project's Airflow side rules out. The message (``prometheus.WriteRequest``: series of labels and samples) is four
small protobuf messages written by hand here, and snappy's block format allows a stream of plain literals, which is what
``snappy_block`` writes. Names follow ``metric_names.prometheus_name``, the same translation as Prometheus' own OTLP
receiver, so a dashboard reads the same series either way. Counters and gauges only: the worker records no histograms.
"""

from __future__ import annotations

import logging
import re
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry.sdk.metrics.export import Gauge, MetricExporter, MetricExportResult, MetricsData, Sum
from opentelemetry.sdk.resources import Resource

from facefusion_provider.metric_names import MetricKind, prometheus_name

log = logging.getLogger(__name__)

_LABEL_SEPARATORS = re.compile(r"[^a-zA-Z0-9_]")
_SNAPPY_LITERAL_MAX = 65536
HEADERS = {
    "Content-Type": "application/x-protobuf",
    "Content-Encoding": "snappy",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "facefusion-worker",
}

Sample = tuple[dict[str, str], float, int]


class RemoteWriteExporter(MetricExporter):
    """POSTs each collection as one remote-write request; cumulative points, so a lost request loses nothing for good."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        super().__init__()
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"remote-write URL must be http(s): {url!r}")
        self._url = url
        self._timeout_s = timeout_s

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        body = snappy_block(write_request(samples(metrics_data)))
        # The URL's scheme is checked to be http(s) in __init__.
        request = urllib.request.Request(self._url, data=body, headers=HEADERS, method="POST")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=min(self._timeout_s, timeout_millis / 1000)):  # noqa: S310
                return MetricExportResult.SUCCESS
        except (urllib.error.URLError, OSError) as error:
            log.warning("remote write to %s failed: %s", self._url, error)
            return MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Nothing held: each export is one request."""


def samples(metrics_data: MetricsData) -> Iterator[Sample]:
    """Every point as (labels with ``__name__``, value, milliseconds since the epoch)."""
    for resource_metrics in metrics_data.resource_metrics:
        target = _target_labels(resource_metrics.resource)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                data = metric.data
                if not isinstance(data, Sum | Gauge):
                    continue
                kind: MetricKind = "counter" if isinstance(data, Sum) and data.is_monotonic else "gauge"
                name = prometheus_name(metric.name, metric.unit or "", kind)
                for point in data.data_points:
                    labels = {**target, **_labels(point.attributes or {}), "__name__": name}
                    yield labels, float(point.value), point.time_unix_nano // 1_000_000


def _target_labels(resource: Resource) -> dict[str, str]:
    """``job`` and ``instance`` from the resource, as Prometheus' OTLP receiver derives them."""
    attributes = resource.attributes
    labels = {}
    if service := attributes.get("service.name"):
        namespace = attributes.get("service.namespace")
        labels["job"] = f"{namespace}/{service}" if namespace else str(service)
    if instance := attributes.get("service.instance.id"):
        labels["instance"] = str(instance)
    return labels


def _labels(attributes: Mapping[str, Any]) -> dict[str, str]:
    return {_LABEL_SEPARATORS.sub("_", key): str(value) for key, value in attributes.items()}


def write_request(series: Iterator[Sample]) -> bytes:
    """``prometheus.WriteRequest``: field 1, repeated ``TimeSeries`` (labels sorted by name, as the protocol asks)."""
    return b"".join(_field(1, _time_series(labels, value, timestamp_ms)) for labels, value, timestamp_ms in series)


def _time_series(labels: Mapping[str, str], value: float, timestamp_ms: int) -> bytes:
    encoded = b"".join(
        _field(1, _field(1, name.encode()) + _field(2, labels[name].encode())) for name in sorted(labels)
    )
    # Sample: field 1 a double (wire type 1), field 2 an int64 (wire type 0).
    sample = b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(timestamp_ms)
    return encoded + _field(2, sample)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def snappy_block(data: bytes) -> bytes:
    """``data`` in snappy's block format as literals only: valid for any decoder, and these requests are small."""
    out = bytearray(_varint(len(data)))
    for start in range(0, len(data), _SNAPPY_LITERAL_MAX):
        chunk = data[start : start + _SNAPPY_LITERAL_MAX]
        length = len(chunk) - 1
        # Tag byte: the literal's length - 1 in its top six bits below 60, else 60/61 and that length in 1/2 bytes.
        if length < 60:
            out.append(length << 2)
        elif length < 256:
            out += bytes((60 << 2, length))
        else:
            out += bytes((61 << 2,)) + length.to_bytes(2, "little")
        out += chunk
    return bytes(out)
