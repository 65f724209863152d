from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

from facefusion_provider.get_provider_info import get_provider_info
from facefusion_provider.settings import SETTINGS, FaceFusionSettings, load_settings


def test_defaults_are_the_embedded_single_machine_setup(tmp_path: Path) -> None:
    settings = FaceFusionSettings.from_values({}, airflow_home=str(tmp_path))

    assert settings.backend == "local"
    assert settings.work_root == (tmp_path / "facefusion").as_uri()
    assert settings.worker_command == (sys.executable, "-m", "facefusion_provider.worker")
    assert settings.pool == "default_pool"  # a fresh Airflow has it: the first run never waits on a missing pool
    assert (settings.span_wave, settings.max_active_spans_per_run) == (0, 4)
    assert settings.allowed_input_prefixes == settings.allowed_output_prefixes == ()
    assert settings.aws_conn_id is None
    assert settings.retries == 3
    assert settings.retry_delay == timedelta(seconds=30)
    assert settings.retry_exponential_backoff == 2.0


def test_environment_variables_override_airflow_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__FACEFUSION__BACKEND", "Kubernetes")
    monkeypatch.setenv("AIRFLOW__FACEFUSION__WORK_ROOT", "s3://bucket/work")
    monkeypatch.setenv("AIRFLOW__FACEFUSION__WORKER_COMMAND", "/opt/ff/bin/facefusion-worker --log-level debug")
    monkeypatch.setenv("AIRFLOW__FACEFUSION__RETRY_DELAY_SECONDS", "0.5")
    monkeypatch.setenv("AIRFLOW__FACEFUSION__AWS_CONN_ID", "aws_prod")

    settings = load_settings()

    assert settings.backend == "kubernetes"
    assert settings.work_root == "s3://bucket/work"
    assert settings.worker_command == ("/opt/ff/bin/facefusion-worker", "--log-level", "debug")
    assert settings.retry_delay == timedelta(seconds=0.5)
    assert settings.aws_conn_id == "aws_prod"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("backend", "slurm", "backend: 'slurm' is not one of local, kubernetes"),
        ("retries", "three", "retries: expected a number"),
        ("max_active_spans_per_run", "0", "max_active_spans_per_run: must be at least 1"),
        ("span_wave", "-8", "span_wave: must be at least 0"),
        ("allowed_output_prefixes", "s3://out/../x", "allowed_output_prefixes: '..' is not allowed"),
        ("allowed_input_prefixes", "in/", "allowed_input_prefixes: 'in/' is a relative path"),
    ],
)
def test_bad_settings_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FaceFusionSettings.from_values({key: value}, airflow_home="/tmp")


def test_a_former_setting_name_is_refused_naming_the_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__FACEFUSION__CHUNK_WAVE", "8")
    with pytest.raises(ValueError, match=r"chunk_wave: no longer a setting: it is called span_wave now"):
        load_settings()


def test_provider_info_documents_every_setting() -> None:
    section = get_provider_info()["config"]["facefusion"]

    assert set(section["options"]) == {spec.name for spec in SETTINGS}
    assert section["options"]["backend"]["default"] == "local"
    assert all(option["description"] for option in section["options"].values())


def test_airflow_config_knows_every_default_verbatim() -> None:
    from airflow.sdk import conf

    for spec in SETTINGS:
        assert conf.get("facefusion", spec.name) == spec.default, spec.name


def test_provider_info_matches_airflows_schema() -> None:
    import json
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)
