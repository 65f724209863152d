"""A stats backend for Airflow's metrics seam (``stats.initialize(factory=...)``, where Airflow plugs StatsD, OTel or
Datadog) that keeps what the operators send, for tests that run an operator in this process. The real OTel backend
is exercised end to end by tests/integration/metrics."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk.observability import stats
from airflow.sdk.observability.metrics.stats_utils import get_stats_factory


@dataclass(frozen=True)
class Sent:
    kind: str  # "incr" or "gauge"
    stat: str
    value: float
    tags: dict[str, Any]


@dataclass
class RecordedStats:
    sent: list[Sent] = field(default_factory=list)

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self.sent.append(Sent("incr", stat, count, dict(tags or {})))

    def gauge(
        self, stat: str, value: float, rate: float = 1, delta: bool = False, *, tags: dict[str, Any] | None = None
    ) -> None:
        self.sent.append(Sent("gauge", stat, value, dict(tags or {})))

    def of(self, stat: str) -> list[Sent]:
        return [item for item in self.sent if item.stat == stat]


@contextmanager
def recorded_stats() -> Iterator[RecordedStats]:
    """Airflow's stats sent to a ``RecordedStats`` inside the block; after it, the configured backend (as the task
    runner sets it up: none in the tests)."""
    recorder = RecordedStats()
    stats.initialize(factory=lambda: recorder, export_legacy_names=False)
    try:
        yield recorder
    finally:
        stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
