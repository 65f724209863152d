"""Run-level figures from the operators, through Airflow's own metrics (``airflow.sdk.observability.stats``), and the
variables that give a worker command its metric attributes.

The backend is Airflow's ``[metrics]`` choice: with ``otel_on`` every figure arrives with its tags (``dag_id``,
``run_id``, ``field``) as labels, under the names in ``metric_names.RUN_METRICS``; StatsD drops tags unless
``statsd_influxdb_enabled`` (or Datadog) is on. Nothing is sent when no backend is configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from airflow.sdk.observability import stats

from facefusion_provider import metric_names as names


class TaskInstanceLike(Protocol):
    """What these helpers read of a task instance (``context["ti"]``)."""

    @property
    def dag_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def task_id(self) -> str: ...

    @property
    def map_index(self) -> int | None: ...


def run_tags(ti: TaskInstanceLike) -> dict[str, str]:
    """The tags of a run's figures."""
    return {names.DAG_ID: ti.dag_id, names.RUN_ID: ti.run_id}


def worker_metric_environment(
    ti: TaskInstanceLike, environ: Mapping[str, str], work_id: str | None = None
) -> dict[str, str]:
    """Variables a worker command needs for its metrics: where to push them (this side's exporter settings in
    ``environ``) and the attributes that name its task (read by ``telemetry.metrics``)."""
    forwarded = {name: environ[name] for name in names.FORWARDED_VARIABLES if environ.get(name)}
    values = {
        names.DAG_ID: ti.dag_id,
        names.RUN_ID: ti.run_id,
        names.TASK_ID: ti.task_id,
        names.MAP_INDEX: str(-1 if ti.map_index is None else ti.map_index),
        names.WORK_ID: work_id or "",
    }
    return forwarded | {names.ATTRIBUTE_VARIABLES[name]: value for name, value in values.items() if value}


def segments(*, reused: int, launched: int, tags: Mapping[str, str]) -> None:
    """A run's segments: ``reused`` found committed (by an earlier try or run), ``launched`` to compute."""
    stats.incr(names.stat_name(names.SEGMENTS_REUSED), reused, tags=dict(tags))
    stats.incr(names.stat_name(names.SEGMENTS_LAUNCHED), launched, tags=dict(tags))


def run_fps(frames: int, seconds: float, *, tags: Mapping[str, str]) -> None:
    """Frames per second of a whole run: its frames over the seconds from its start to its merge."""
    if seconds > 0:
        stats.gauge(names.stat_name(names.RUN_FPS), frames / seconds, tags=dict(tags))


def merge_seconds(seconds: float, *, tags: Mapping[str, str]) -> None:
    stats.gauge(names.stat_name(names.MERGE_SECONDS), seconds, tags=dict(tags))


def output_bytes(size: int, *, tags: Mapping[str, str]) -> None:
    stats.incr(names.stat_name(names.OUTPUT_BYTES), size, tags=dict(tags))


def bad_input(field: str, *, dag_id: str) -> None:
    """A run refused before any pod started because its conf field ``field`` is wrong."""
    stats.incr(names.stat_name(names.BAD_INPUT), tags={names.DAG_ID: dag_id, "field": field})


def segments_waiting(count: int, *, tags: Mapping[str, str]) -> None:
    """A live run's segments not committed yet (what KEDA scales the standing workers on); 0 once all are."""
    stats.gauge(names.stat_name(names.SEGMENTS_WAITING), count, tags=dict(tags))
