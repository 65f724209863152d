"""Credentials flow: Airflow AWS connection -> storage hook -> the worker subprocess's environment, and nowhere else."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.local import FaceFusionWorkerOperator

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY"
CONNECTION = {
    "conn_type": "aws",
    "login": "AKIAFACEFUSIONTEST",
    "password": SECRET,
    "extra": {"endpoint_url": "http://127.0.0.1:9999", "region_name": "eu-west-1"},
}

RECORDING_WORKER = """
import json, os, sys
names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "FACEFUSION_S3_ENDPOINT_URL",
         "AWS_DEFAULT_REGION")
with open(os.environ["RECORD"], "w") as record:
    json.dump({"argv": sys.argv[1:], "env": {name: os.environ.get(name) for name in names}}, record)
"""


@pytest.fixture
def aws_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_FACEFUSION_S3", json.dumps(CONNECTION))
    return "facefusion_s3"


def test_credentials_reach_fsspec_only_inside_their_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACEFUSION_S3_ENDPOINT_URL", "http://env-endpoint:9000")
    assert storage.storage_options("s3://b/k")["client_kwargs"] == {"endpoint_url": "http://env-endpoint:9000"}
    assert "key" not in storage.storage_options("s3://b/k")  # boto3 finds the environment's or the role's own
    credentials = storage.S3Credentials("AKIA1", SECRET, "token1", "http://conn-endpoint:9000", "eu-west-1")
    with storage.using_s3_credentials(credentials):
        options = storage.storage_options("s3://b/k")
        assert storage.storage_options("file:///tmp/x") == {}
    assert (options["key"], options["secret"], options["token"]) == ("AKIA1", SECRET, "token1")
    assert options["client_kwargs"] == {"endpoint_url": "http://conn-endpoint:9000", "region_name": "eu-west-1"}
    assert options["config_kwargs"]["retries"] == {"mode": "standard", "total_max_attempts": 6}
    assert "key" not in storage.storage_options("s3://b/k")


def test_credentials_never_show_their_secrets_in_a_repr() -> None:
    credentials = storage.S3Credentials("AKIA1", SECRET, "session-token-value", "http://e:1", None)
    assert SECRET not in repr(credentials) and "session-token-value" not in repr(credentials)
    assert credentials.environment() == {
        "AWS_ACCESS_KEY_ID": "AKIA1",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": "session-token-value",
        "FACEFUSION_S3_ENDPOINT_URL": "http://e:1",
    }


def test_retry_attempts_are_bounded_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACEFUSION_S3_MAX_ATTEMPTS", "3")
    assert storage.storage_options("s3://b/k")["config_kwargs"]["retries"]["total_max_attempts"] == 3
    monkeypatch.setenv("FACEFUSION_S3_MAX_ATTEMPTS", "many")
    with pytest.raises(InvalidOptionError, match="FACEFUSION_S3_MAX_ATTEMPTS"):
        storage.storage_options("s3://b/k")


def test_the_hook_reads_the_aws_connection_with_its_endpoint(aws_connection: str) -> None:
    credentials = FaceFusionStorageHook(aws_conn_id=aws_connection).s3_credentials()
    assert credentials is not None
    assert (credentials.access_key_id, credentials.secret_access_key) == ("AKIAFACEFUSIONTEST", SECRET)
    assert credentials.endpoint_url == "http://127.0.0.1:9999"
    assert credentials.region_name == "eu-west-1"


def test_the_hook_uses_the_aws_conn_id_setting_and_nothing_without_it(
    aws_connection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert FaceFusionStorageHook().worker_environment() == {}
    monkeypatch.setenv("AIRFLOW__FACEFUSION__AWS_CONN_ID", aws_connection)
    env = FaceFusionStorageHook().worker_environment()
    assert env["AWS_ACCESS_KEY_ID"] == "AKIAFACEFUSIONTEST" and env["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert env["FACEFUSION_S3_ENDPOINT_URL"] == "http://127.0.0.1:9999"


def test_the_local_worker_gets_the_credentials_in_its_environment_only(
    aws_connection: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(RECORDING_WORKER)
    record = tmp_path / "record.json"
    monkeypatch.setenv("RECORD", str(record))
    monkeypatch.setenv("AIRFLOW__FACEFUSION__AWS_CONN_ID", aws_connection)
    monkeypatch.setenv("AIRFLOW__FACEFUSION__WORKER_COMMAND", f"{sys.executable} {script}")
    operator = FaceFusionWorkerOperator(
        task_id="prepare",
        command="prepare",
        work_uri="s3://work/work/w1",
        output_uri="s3://out/v.mp4",
        worker_args=["--target", "s3://in/v.mp4"],
    )
    # A work on S3: the marker check before launching also goes through the connection, which points nowhere here;
    # skip it to keep this a unit test (integration/s3 runs the real thing against an S3 server).
    monkeypatch.setattr("facefusion_provider.operators.local.nothing_to_do", lambda *args, **kwargs: None)
    context: Any = {
        "ti": SimpleNamespace(try_number=1, dag_id="facefusion_swap", run_id="r1", task_id="prepare", map_index=-1)
    }
    with caplog.at_level(logging.DEBUG):
        operator.execute(context)
    seen = json.loads(record.read_text())
    assert seen["env"]["AWS_ACCESS_KEY_ID"] == "AKIAFACEFUSIONTEST"
    assert seen["env"]["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert seen["env"]["FACEFUSION_S3_ENDPOINT_URL"] == "http://127.0.0.1:9999"
    assert seen["argv"] == ["prepare", "--work-uri", "s3://work/work/w1", "--target", "s3://in/v.mp4"]
    assert SECRET not in " ".join(seen["argv"])
    assert SECRET not in caplog.text
