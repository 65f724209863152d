"""deploy/'s Prometheus config, alert rules and Grafana dashboard: valid for promtool, and every PromQL expression in
them queries only metrics the code emits (metric_names.py, in Prometheus form), DCGM's or Airflow's own, with labels
those metrics carry."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk._shared.observability.metrics.metrics_registry import YAML_REGISTRY_PATH
from system_binaries import Promtool

from facefusion_provider import metric_names as names

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS_CONFIG = ROOT / "deploy" / "monitoring" / "prometheus.yml"
ALERTS = ROOT / "deploy" / "monitoring" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "facefusion.json"

# NVIDIA dcgm-exporter's default counters (etc/default-counters.csv) the dashboard and alerts use, and its labels.
DCGM_METRICS = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
}
DCGM_LABELS = {"gpu", "UUID", "device", "modelName", "Hostname", "pod", "namespace", "container"}
# Labels Prometheus itself puts on pushed series (from service.name and service.instance.id).
TARGET_LABELS = {"job", "instance"}

PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SELECTOR = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{((?:[^}"]|"[^"]*")*)\}')
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
IDENTIFIER = re.compile(r"(?<![\w$.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")


def airflow_metrics() -> dict[str, set[str]]:
    """Airflow's own metrics under Prometheus names (its OTel backend: prefix airflow, counters _total), with the
    tags its registry lists as the legacy name's variables (now labels)."""
    registry = yaml.safe_load(Path(YAML_REGISTRY_PATH).read_text())["metrics"]
    found = {}
    for entry in registry:
        if entry["type"] in ("counter", "gauge") and "{" not in entry["name"]:
            name = names.prometheus_name(f"airflow.{entry['name']}", "", entry["type"])
            found[name] = set(re.findall(r"\{(\w+)\}", entry.get("legacy_name", "")))
    return found


AIRFLOW_METRICS = airflow_metrics()


def our_labels(spec: names.MetricSpec) -> set[str]:
    common = set(names.WORKER_ATTRIBUTES) if spec in names.WORKER_METRICS else set()
    return common | set(spec.labels) | TARGET_LABELS


KNOWN_LABELS: dict[str, set[str]] = {
    **{spec.prometheus: our_labels(spec) for spec in names.ALL_METRICS},
    **dict.fromkeys(DCGM_METRICS, DCGM_LABELS | TARGET_LABELS),
    **{name: labels | TARGET_LABELS for name, labels in AIRFLOW_METRICS.items()},
}
LABEL_VALUES: dict[tuple[str, str], set[str]] = {
    (names.FRAMES.prometheus, "stage"): set(names.FRAME_STAGES),
    (names.STAGE_TIME.prometheus, "stage"): set(names.TIMED_STAGES),
    (names.FACES.prometheus, "kind"): set(names.FACE_KINDS),
    (names.IO_BYTES.prometheus, "direction"): set(names.DIRECTIONS),
    (names.FAILURES.prometheus, "retryable"): {"true", "false"},
    (names.MEDIA_PATH.prometheus, "stage"): set(names.MEDIA_STAGES),
    (names.MEDIA_PATH.prometheus, "path"): set(names.MEDIA_PATHS),
}


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def rule_expressions() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def metric_names_in(expression: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, keywords, label names in
    groupings or matchers, strings, numbers or durations."""
    text = re.sub(r'"[^"]*"', '""', expression)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = GROUPING.sub(" ", text)
    return {name for name in IDENTIFIER.findall(text) if name not in PROMQL_KEYWORDS}


EXPRESSIONS = [pytest.param(expr, id=f"alert-{i}") for i, expr in enumerate(rule_expressions())] + [
    pytest.param(expr, id=f"panel-{i}") for i, expr in enumerate(dashboard_expressions())
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_every_query_names_emitted_metrics_and_their_labels(expression: str) -> None:
    used = metric_names_in(expression)
    assert used, expression
    assert used <= set(KNOWN_LABELS), used - set(KNOWN_LABELS)

    for name, body in SELECTOR.findall(expression):
        for label, operator, value in MATCHER.findall(body):
            assert label in KNOWN_LABELS[name], f"{name} has no label {label}"
            if operator == "=" and (name, label) in LABEL_VALUES:
                assert value in LABEL_VALUES[(name, label)], f"{name}{{{label}={value!r}}} never exists"
    available = set().union(*(KNOWN_LABELS[name] for name in used))
    for _, labels in GROUPING.findall(expression):
        grouped = {label.strip() for label in labels.split(",") if label.strip()}
        assert grouped <= available, grouped - available


def test_the_name_extraction_sees_through_promql() -> None:
    expression = (
        'sum by (stage) (rate(facefusion_worker_stage_time_seconds_total{run_id=~"$run_id"}[$__rate_interval]))'
        ' / scalar(sum(rate(facefusion_worker_frames_total{stage="encode"}[5m]))) and on () DCGM_FI_DEV_GPU_UTIL < 20'
    )

    assert metric_names_in(expression) == {
        "facefusion_worker_stage_time_seconds_total",
        "facefusion_worker_frames_total",
        "DCGM_FI_DEV_GPU_UTIL",
    }
    assert (
        "airflow_pool_queued_slots" in AIRFLOW_METRICS and "pool_name" in AIRFLOW_METRICS["airflow_pool_queued_slots"]
    )


def test_the_dashboard_shows_every_metric_and_the_gpus() -> None:
    used = set().union(*(metric_names_in(expression) for expression in dashboard_expressions()))

    assert {spec.prometheus for spec in names.ALL_METRICS} <= used
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"} <= used
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "facefusion"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_alerts_cover_stalls_failures_and_idle_gpus() -> None:
    rules = yaml.safe_load(ALERTS.read_text())
    alerts: dict[str, Any] = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}

    assert {"FacefusionRunStalled", "FacefusionTransientFailures", "FacefusionGpusIdleWhileSegmentsWait"} <= set(alerts)
    assert "DCGM_FI_DEV_GPU_UTIL" in metric_names_in(alerts["FacefusionGpusIdleWhileSegmentsWait"]["expr"])


def test_promtool_accepts_the_config_and_the_rules(promtool: Promtool) -> None:
    config = promtool("check", "config", PROMETHEUS_CONFIG)  # also checks the rule files it loads
    assert config.returncode == 0, config.stdout + config.stderr


def test_promtool_parses_every_dashboard_query(tmp_path: Path, promtool: Promtool) -> None:
    grafana = {"$__rate_interval": "1m", "$__range": "1h", "$dag_id": ".*", "$run_id": ".*"}
    rules = []
    for index, expression in enumerate(dashboard_expressions()):
        concrete = expression
        for variable, value in grafana.items():
            concrete = concrete.replace(variable, value)
        rules.append({"record": f"dashboard:panel_{index}", "expr": concrete})
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))

    result = promtool("check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
