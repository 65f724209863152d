"""The ingestion scan against S3, its credentials from an Airflow AWS connection only (no AWS variables set)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import s3fs
from airflow.sdk.exceptions import AirflowFailException
from s3_stack import S3Stack

from facefusion_provider.operators.ingest import ScanForNewJobsOperator, ingest_params

CONN_ID = "facefusion_s3"


class RunStates:
    """The part of Airflow's task instance the scan uses: XCom and other runs' states (none exist here)."""

    dag_id = "facefusion_s3_ingest"

    def __init__(self, run_id: str = "manual__1") -> None:
        self.run_id = run_id
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def get_dr_count(self, dag_id: str, run_ids: list[str]) -> int:
        return 0


@pytest.fixture
def connection_only(s3: S3Stack, monkeypatch: pytest.MonkeyPatch) -> S3Stack:
    for name in list(os.environ):
        if name.startswith(("AWS_", "FACEFUSION_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", s3.connection())
    s3fs.S3FileSystem.clear_instance_cache()
    return s3


def scan(prefix: str, ti: RunStates) -> list[dict[str, Any]]:
    form = {name: param.value if param.has_value else None for name, param in ingest_params({}).items()}
    values = {
        **form,
        "input_prefix": f"s3://videos/{prefix}/in/",
        "output_prefix": f"s3://videos/{prefix}/out/",
        "source_uris": ["s3://videos/faces/face.png"],
        "processors": [],
    }
    operator = ScanForNewJobsOperator(task_id="scan", aws_conn_id=CONN_ID, **values)
    return operator.execute({"ti": ti})  # type: ignore[arg-type]


def test_new_videos_are_claimed_once_in_a_ledger_on_s3(connection_only: S3Stack, media: Path) -> None:
    s3 = connection_only
    for name in ("a.mp4", "b/c.mp4", "notes.txt"):
        s3.client().upload_file(str(media / "clip0.mp4"), "videos", f"scan/in/{name}")
    triggers = scan("scan", RunStates())
    assert sorted(t["conf"]["output_uri"] for t in triggers) == [
        "s3://videos/scan/out/a.mp4",
        "s3://videos/scan/out/b/c.mp4",
    ]
    claims = s3.keys("videos", "scan/out/.facefusion-ledger/jobs/")
    assert len(claims) == 2 and all(key.endswith("/attempt-001.json") for key in claims)
    conditional = [e for e in s3.proxy.exchanges() if e.method == "PUT" and "attempt-001" in e.path]
    assert [e.status for e in conditional] == [200, 200]
    # An overlapping run that listed the same videos finds them claimed: it starts nothing.
    assert scan("scan", RunStates("manual__2")) == []


def test_wrong_credentials_fail_the_scan_at_once(connection_only: S3Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    s3 = connection_only
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", s3.connection().replace(s3.secret_key, "wrong-secret"))
    s3.proxy.forget_exchanges()
    with pytest.raises(AirflowFailException, match=r"access denied to bucket 'videos'.*SignatureDoesNotMatch"):
        scan("denied", RunStates())
    assert [e.status for e in s3.proxy.exchanges()] == [403]  # no retries: the task fails for good
