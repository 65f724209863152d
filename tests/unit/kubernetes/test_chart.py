"""deploy/chart, rendered offline with Helm (helm-python-sdk): lint-clean, every manifest valid against its schema
(Kubernetes' own for core kinds, KEDA's and prometheus-operator's published fields for theirs), its values in step
with the Airflow side's settings, and the KEDA scaler's query checked by Prometheus' own promtool."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml
from chart_helpers import (
    AIRFLOW_VALUES,
    CHART,
    DEPLOY,
    EVERYTHING_ON,
    NAMESPACE,
    STANDING_WORKERS,
    documents,
    of_kind,
    render,
    standing_workers_file,
)
from crd_schemas import CUSTOM_RESOURCE_SCHEMAS
from kube_pod_helpers import KUBE_CONN_ID, KUBERNETES_VERSION, serialize, validate_strictly
from system_binaries import Promtool

from facefusion_provider import metric_names
from facefusion_provider.operators.kubernetes import FaceFusionWorkerPodOperator
from facefusion_provider.settings import FaceFusionSettings

RENDERINGS = {"defaults": {}, "everything on": EVERYTHING_ON}
# Values that are maps of the user's own keys: documented as one value.
FREE_MAPS = {"gpu.resourcesByType", "gpu.nodeSelector", "monitoring.grafanaDashboard.labels"}


def chart_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def airflow_config() -> dict[str, str]:
    config: dict[str, str] = yaml.safe_load(AIRFLOW_VALUES.read_text())["config"]["facefusion"]
    return config


def with_keda(**keda: Any) -> dict[str, Any]:
    return {"keda": {"enabled": True, **keda}}


def validate(manifest: dict[str, Any]) -> None:
    """Strict schema check: Kubernetes' for core kinds, the CRD's published fields for custom resources."""
    schema = CUSTOM_RESOURCE_SCHEMAS.get((manifest["apiVersion"], manifest["kind"]))
    if schema is None:
        validate_strictly(manifest)
        return
    jsonschema.validate(manifest, schema)
    if manifest["kind"] == "ScaledObject":
        # advanced.horizontalPodAutoscalerConfig.behavior is Kubernetes' HorizontalPodAutoscalerBehavior.
        behavior = manifest["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        validate_strictly(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "behavior", "namespace": NAMESPACE},
                "spec": {
                    "scaleTargetRef": manifest["spec"]["scaleTargetRef"],
                    "maxReplicas": manifest["spec"]["maxReplicaCount"],
                    "behavior": behavior,
                },
            }
        )


def standing_worker(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    deployments: list[dict[str, Any]] = of_kind(manifests, "Deployment")
    (deployment,) = deployments
    return deployment


def span_pod(settings: FaceFusionSettings) -> dict[str, Any]:
    """The swap-span pod the kubernetes backend renders from these settings."""
    operator = FaceFusionWorkerPodOperator(
        task_id="swap_span",
        command="swap-span",
        work_uri=f"{settings.work_root}/work/0123456789abcdef01234567",
        output_uri="s3://facefusion-out/a.mp4",
        target_uri="s3://facefusion-in/a.mp4",
        span={"index": 0, "first": 0, "last": 4, "start": 0, "end": 1024},
        pod_settings=settings.kubernetes,
        kubernetes_conn_id=KUBE_CONN_ID,
    )
    pod: dict[str, Any] = serialize(operator.build_pod_request_obj(dry_run=True))["spec"]
    return pod


# --- Helm's own checks --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", RENDERINGS.values(), ids=RENDERINGS.keys())
def test_helm_lint_finds_nothing_wrong(values: dict[str, Any]) -> None:
    report = helm_python.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=f"v{KUBERNETES_VERSION}.0")

    assert report["errors"] == []
    problems = [message for message in report["messages"] if message["severity"] >= 2]
    assert problems == []


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"kedda": {"enabled": True}}, "kedda"),
        ({"gpu": {"count": 0}}, "/gpu/count"),
        ({"keda": {"prometheus": {"threshold": "four"}}}, "/keda/prometheus/threshold"),
        ({"allowedOutputPrefixes": ["s3://facefusion-out"]}, "/allowedOutputPrefixes/0"),
    ],
)
def test_a_wrong_value_is_refused_naming_it(values: dict[str, Any], named: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=re.escape(named)):
        render(values)


def test_a_gpu_type_without_resources_or_a_quota_below_keda_is_refused_naming_the_value() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r'no row "v100" \(gpu.type\)'):
        render({"gpu": {"type": "v100"}})
    with pytest.raises(helm_python.HelmRenderError, match=re.escape("exceeds gpuQuota.gpus")):
        render({**with_keda(maxReplicaCount=16), "gpuQuota": {"gpus": 8}})


# --- Every manifest against its schema ----------------------------------------------------------------------------------


@pytest.mark.parametrize("values", RENDERINGS.values(), ids=RENDERINGS.keys())
def test_every_rendered_manifest_validates_strictly(values: dict[str, Any]) -> None:
    manifests = documents(render(values))

    assert manifests
    for manifest in manifests:
        validate(manifest)
        # Only the device plugin lives elsewhere (kube-system: a host path, a node-critical priority).
        expected = "kube-system" if manifest["kind"] == "DaemonSet" else NAMESPACE
        assert manifest["metadata"]["namespace"] == expected, manifest["metadata"]["name"]


def test_everything_on_renders_every_part_and_defaults_leave_the_optional_ones_out() -> None:
    kinds_on = sorted(manifest["kind"] for manifest in documents(render(EVERYTHING_ON)))
    kinds_default = sorted(manifest["kind"] for manifest in documents(render()))

    assert set(kinds_on) == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
        "ScaledObject",
        "ResourceQuota",
        "DaemonSet",
        "PersistentVolumeClaim",
        "PrometheusRule",
        "ConfigMap",
    }
    assert not {"ScaledObject", "DaemonSet", "PrometheusRule"} & set(kinds_default)


def test_the_strict_checks_refuse_a_misspelt_field() -> None:
    manifests = documents(render(EVERYTHING_ON))
    (scaled,) = of_kind(manifests, "ScaledObject")
    (rule,) = of_kind(manifests, "PrometheusRule")
    deployment = standing_worker(manifests)

    broken_scaled = copy.deepcopy(scaled)
    broken_scaled["spec"]["cooldownPeriods"] = 300
    with pytest.raises(jsonschema.ValidationError, match="cooldownPeriods"):
        validate(broken_scaled)
    broken_trigger = copy.deepcopy(scaled)
    del broken_trigger["spec"]["triggers"][0]["metadata"]
    with pytest.raises(jsonschema.ValidationError, match="metadata"):
        validate(broken_trigger)
    broken_behavior = copy.deepcopy(scaled)
    broken_behavior["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["window"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken_behavior)
    broken_rule = copy.deepcopy(rule)
    broken_rule["spec"]["groups"][0]["rules"][0]["exp"] = "up"
    with pytest.raises(jsonschema.ValidationError):
        validate(broken_rule)
    broken_deployment = copy.deepcopy(deployment)
    broken_deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 60
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken_deployment)


# --- The standing workers -----------------------------------------------------------------------------------------------


def test_the_standing_workers_are_the_span_pods_of_the_airflow_values() -> None:
    config = airflow_config()
    values = chart_values()
    manifests = documents(render())
    claim_name = values["models"]["claim"]["name"]
    # The span pod the Airflow side's settings give, with the models claim the chart mounts.
    settings = FaceFusionSettings.from_values(
        {**config, "models_volume_claim": claim_name}, airflow_home="/opt/airflow"
    )
    pod = span_pod(settings)
    (span_container,) = pod["containers"]
    deployment = standing_worker(manifests)
    (account,) = of_kind(manifests, "ServiceAccount")
    (quota,) = of_kind(manifests, "ResourceQuota")
    (claim,) = of_kind(manifests, "PersistentVolumeClaim")

    assert deployment["metadata"]["namespace"] == NAMESPACE == settings.kubernetes.namespace
    template = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert deployment["spec"]["replicas"] <= int(quota["spec"]["hard"][f"requests.{settings.kubernetes.gpu_resource}"])
    spec = template["spec"]
    (container,) = spec["containers"]

    # Who it is, where it runs, what it may do: the span pods' choices.
    assert spec["serviceAccountName"] == pod["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False and account["automountServiceAccountToken"] is False
    assert container["envFrom"] == span_container["envFrom"]
    assert container["envFrom"][0]["secretRef"]["name"] == settings.kubernetes.storage_secret
    assert container["image"] == span_container["image"] == config["worker_image"]
    assert "command" not in container and not span_container["command"]  # the image's entrypoint (tini, the worker)
    assert container["resources"] == span_container["resources"]
    assert spec["nodeSelector"] == pod["nodeSelector"] == dict(settings.kubernetes.node_selector)
    assert spec["tolerations"] == pod["tolerations"] == [dict(item) for item in settings.kubernetes.tolerations]
    assert spec["securityContext"] == pod["securityContext"] and spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == span_container["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["terminationMessagePolicy"] == span_container["terminationMessagePolicy"]
    assert spec["volumes"] == pod["volumes"] and container["volumeMounts"] == span_container["volumeMounts"]
    assert claim["metadata"]["name"] == claim_name and claim["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert deployment["spec"]["progressDeadlineSeconds"] >= settings.kubernetes.startup_timeout_seconds

    # What it serves: every live run under the work root of the Airflow side, with the same allow-lists and models.
    assert container["args"] == ["serve", "--work-root", config["work_root"]]
    env = {variable["name"]: variable for variable in container["env"]}
    span_env = {variable["name"]: variable for variable in span_container["env"]}
    for name in ("FACEFUSION_MODELS_CACHE", "FACEFUSION_MODELS_DIR", "FACEFUSION_MODELS_URI", "NODE_NAME"):
        assert env[name] == span_env[name], name
    assert env["FACEFUSION_TERMINATION_LOG"]["value"] == span_env["FACEFUSION_TERMINATION_LOG"]["value"]
    assert env["FACEFUSION_ALLOWED_INPUT_PREFIXES"]["value"] == ",".join(settings.allowed_input_prefixes)
    assert env["FACEFUSION_ALLOWED_OUTPUT_PREFIXES"]["value"] == ",".join(settings.allowed_output_prefixes)
    airflow_env = {
        variable["name"]: variable["value"] for variable in yaml.safe_load(AIRFLOW_VALUES.read_text())["env"]
    }
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == airflow_env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert set(env) - set(span_env) <= {"OTEL_EXPORTER_OTLP_ENDPOINT"}  # forwarded to span pods from Airflow's env


@pytest.mark.parametrize(
    "gpu_type", sorted(yaml.safe_load((CHART / "values.yaml").read_text())["gpu"]["resourcesByType"])
)
def test_each_gpu_type_gets_its_row_of_resources(gpu_type: str) -> None:
    row = chart_values()["gpu"]["resourcesByType"][gpu_type]

    (container,) = standing_worker(documents(render({"gpu": {"type": gpu_type}})))["spec"]["template"]["spec"][
        "containers"
    ]

    assert container["resources"]["requests"]["cpu"] == row["cpu"]
    assert container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"] == row["memory"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_without_a_secret_or_a_models_claim_the_workers_use_their_identity_and_the_image() -> None:
    manifests = documents(render({"storage": {"existingSecret": ""}, "models": {"claim": {"name": ""}}}))
    spec = standing_worker(manifests)["spec"]["template"]["spec"]
    (container,) = spec["containers"]

    assert "envFrom" not in container
    assert not of_kind(manifests, "PersistentVolumeClaim")
    assert "models" not in {volume["name"] for volume in spec["volumes"]}
    assert "FACEFUSION_MODELS_DIR" not in {variable["name"] for variable in container["env"]}


def test_the_chart_carries_no_secret_value() -> None:
    manifests = documents(render(EVERYTHING_ON))
    credential = re.compile(r"password|secret.?access|access.?key|token|credential", re.IGNORECASE)

    assert not of_kind(manifests, "Secret")
    assert not [key for key in leaf_keys(chart_values()) if credential.search(key)]
    assert chart_values()["storage"] == {"existingSecret": "facefusion-storage"}  # a name, never the keys


def test_the_loose_standing_workers_file_is_the_charts_rendering() -> None:
    assert STANDING_WORKERS.read_text() == standing_workers_file(), "run python tests/unit/kubernetes/chart_helpers.py"


def test_the_pod_launcher_may_do_what_the_pod_operator_does_for_the_airflow_releases_accounts() -> None:
    manifests = documents(render())
    (role,) = of_kind(manifests, "Role")
    (binding,) = of_kind(manifests, "RoleBinding")
    airflow = chart_values()["airflow"]

    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}
    needed = {("pods", verb) for verb in ("create", "get", "list", "watch", "patch", "delete")} | {("pods/log", "get")}
    assert needed <= granted
    assert ("events", "list") in granted
    assert not {verb for resource, verb in granted if resource == "secrets"}  # the operator never reads secrets
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {(subject["name"], subject["namespace"]) for subject in binding["subjects"]} >= {
        ("airflow-worker", airflow["namespace"]),
        ("airflow-triggerer", airflow["namespace"]),
    }


# --- KEDA ---------------------------------------------------------------------------------------------------------------


def test_keda_scales_the_standing_workers_from_zero_with_a_cooldown() -> None:
    values = chart_values()
    manifests = documents(render(with_keda()))
    (scaled,) = of_kind(manifests, "ScaledObject")
    deployment = standing_worker(manifests)
    (quota,) = of_kind(manifests, "ResourceQuota")
    spec = scaled["spec"]

    # KEDA owns the replica count: the Deployment sets none, so an upgrade does not reset it.
    assert "replicas" not in deployment["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert scaled["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert spec["minReplicaCount"] == 0 and spec["cooldownPeriod"] > 0
    assert spec["maxReplicaCount"] * values["gpu"]["count"] <= int(quota["spec"]["hard"]["requests.nvidia.com/gpu"])
    # Scale-down removes one worker at a time, and each has the grace period to finish or release its segment.
    scale_down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert scale_down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 60}]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 60
    (trigger,) = spec["triggers"]
    prometheus = values["keda"]["prometheus"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"] == {
        "serverAddress": prometheus["serverAddress"],
        "query": prometheus["query"],
        "threshold": prometheus["threshold"],
        "activationThreshold": "0",
    }


def test_promtool_parses_the_keda_query_and_refuses_a_broken_one(tmp_path: Path, promtool: Promtool) -> None:
    query = chart_values()["keda"]["prometheus"]["query"]
    for name, expression in (("keda", query), ("broken", query.removesuffix(")") + "(")):
        path = tmp_path / f"{name}.yml"
        path.write_text(
            yaml.safe_dump({"groups": [{"name": name, "rules": [{"record": "keda:query", "expr": expression}]}]})
        )
        result = promtool("check", "rules", path)
        assert (result.returncode == 0) == (name == "keda"), result.stdout + result.stderr


def test_the_keda_query_counts_each_runs_waiting_segments_once_and_nothing_when_none_wait(
    tmp_path: Path, promtool: Promtool
) -> None:
    """Prometheus' engine (promtool test rules) evaluates the query over pushed series: run a seen by two triggerers
    (its span task moved), run b draining to 0; both stop pushing after 2 minutes (their runs ended)."""
    query = chart_values()["keda"]["prometheus"]["query"]
    metric = "airflow_facefusion_segments_waiting"
    run_a, run_b = [12] * 9, [5, 4, 3, 2, 1, 0, 0, 0, 0]  # one value every 15 s, 0 s to 2 min
    series = [
        (f'{metric}{{dag_id="facefusion_swap",run_id="a",instance="triggerer-0"}}', run_a),
        (f'{metric}{{dag_id="facefusion_swap",run_id="a",instance="triggerer-1"}}', run_a),
        (f'{metric}{{dag_id="facefusion_swap",run_id="b",instance="triggerer-0"}}', run_b),
    ]
    expected = {"1m": run_a[4] + run_b[4], "2m": run_a[8] + run_b[8], "5m": 0}
    tests = {
        "rule_files": [],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [{"series": name, "values": " ".join(map(str, values))} for name, values in series],
                "promql_expr_test": [
                    {"expr": query, "eval_time": at, "exp_samples": [{"labels": "{}", "value": value}]}
                    for at, value in expected.items()
                ],
            }
        ],
    }
    path = tmp_path / "keda-query.test.yml"
    path.write_text(yaml.safe_dump(tests))

    result = promtool("test", "rules", path)

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_keda_query_reads_a_metric_the_provider_emits() -> None:
    query = chart_values()["keda"]["prometheus"]["query"]
    known = {spec.prometheus for spec in metric_names.ALL_METRICS}

    queried = set(re.findall(r"\b(airflow_facefusion_\w+|facefusion_worker_\w+)", query))

    assert queried and queried <= known


# --- Prometheus rules and the Grafana dashboard -------------------------------------------------------------------------


def test_the_rules_and_the_dashboard_are_deploys_own_files() -> None:
    manifests = documents(render(EVERYTHING_ON))
    (rule,) = of_kind(manifests, "PrometheusRule")
    config_maps = {item["metadata"]["name"]: item for item in of_kind(manifests, "ConfigMap")}
    alerts = (DEPLOY / "monitoring" / "alerts.yml").read_text()
    dashboard = (DEPLOY / "grafana" / "facefusion.json").read_text()

    assert rule["spec"]["groups"] == yaml.safe_load(alerts)["groups"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert yaml.safe_load(config_maps["facefusion-prometheus-rules"]["data"]["alerts.yml"]) == yaml.safe_load(alerts)
    grafana = config_maps["facefusion-grafana-dashboard"]
    assert grafana["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(grafana["data"]["facefusion.json"]) == json.loads(dashboard)


# --- Documentation ------------------------------------------------------------------------------------------------------


def leaf_keys(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the values a user sets (maps of free keys, like resourcesByType, stop at the map)."""
    keys = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in FREE_MAPS:
            keys.extend(leaf_keys(value, f"{path}."))
        else:
            keys.append(path)
    return keys


def test_every_value_is_documented_in_the_charts_readme() -> None:
    readme = (CHART / "README.md").read_text()

    missing = [key for key in leaf_keys(chart_values()) if f"`{key}`" not in readme]

    assert missing == []
