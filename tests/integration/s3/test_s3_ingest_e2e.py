"""``facefusion_s3_ingest`` end to end: ``airflow standalone`` (scheduler, executor, API), S3 on the moto server, and
credentials only from an Airflow AWS connection (the server's environment has no AWS variables at all).

One server and one story for the module, in order: three uploads -> one ingestion run -> three swap runs and three
correct outputs; a second ingestion run starts nothing; one more upload, a corrupt one, starts exactly one swap run,
which fails with a clear error while the others stay done; the next ingestion run reports the failure by key (failing,
so alerts fire) and retries it. (The retry limit and racing runs are covered in unit/s3 against the same ledger code.)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import TEST_SETTINGS, StandaloneAirflow
from conftest import S3Stack

from facefusion_provider.media.readback import frame_digests

pytestmark = pytest.mark.slow

INGEST = "facefusion_s3_ingest"
SWAP = "facefusion_swap"
CONN_ID = "facefusion_s3"
INGEST_SETTINGS = {
    "schedule": "none",  # manual runs only: a cron would also start the latest missed run when the DAG is unpaused
    "input_prefix": "s3://videos/incoming/",
    "output_prefix": "s3://videos/swapped/",
    "source_uris": ["s3://videos/faces/face.png"],
    "options": {"processors": [], "output_video_quality": 100},
    "max_attempts": 2,
}


class Ingestion:
    """The two DAGs of one standalone server, seen through REST."""

    def __init__(self, server: StandaloneAirflow) -> None:
        self.server = server

    def trigger(self) -> str:
        body = self.server.api("POST", f"/api/v2/dags/{INGEST}/dagRuns", json={"logical_date": None, "conf": {}})
        return str(body["dag_run_id"])

    def wait(self, dag_id: str, run_id: str, timeout: float = 240) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = str(self.server.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])
            if state in ("success", "failed"):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"{dag_id} run {run_id} still {state} after {timeout} s")
            time.sleep(1)

    def ingest(self) -> tuple[str, str]:
        """One ingestion run, to its end: (run id, final state)."""
        run_id = self.trigger()
        return run_id, self.wait(INGEST, run_id)

    def swap_runs(self) -> dict[str, dict[str, Any]]:
        body = self.server.api("GET", f"/api/v2/dags/{SWAP}/dagRuns", params={"limit": 100})
        return {run["dag_run_id"]: run for run in body["dag_runs"]}

    def wait_for_swaps(self, run_ids: set[str]) -> dict[str, str]:
        return {run_id: self.wait(SWAP, run_id) for run_id in sorted(run_ids)}

    def report(self, run_id: str) -> dict[str, Any]:
        path = f"/api/v2/dags/{INGEST}/dagRuns/{run_id}/taskInstances/scan/xcomEntries/report"
        return dict(self.server.api("GET", path, params={"deserialize": True, "stringify": False})["value"])

    def task_states(self, dag_id: str, run_id: str) -> dict[tuple[str, int], str | None]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
        body = self.server.api("GET", path, params={"limit": 200})
        return {(ti["task_id"], ti["map_index"]): ti["state"] for ti in body["task_instances"]}

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1"
        params = {"map_index": map_index, "full_content": True}
        return json.dumps(self.server.api("GET", path, params=params, headers={"Accept": "application/json"}))


@pytest.fixture(scope="module")
def ingestion(s3_stack: S3Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ingestion]:
    settings = {**TEST_SETTINGS, "work_root": "s3://work/airflow/", "aws_conn_id": CONN_ID}
    extra_env = {
        f"AIRFLOW_CONN_{CONN_ID.upper()}": s3_stack.connection(),
        "AIRFLOW_VAR_FACEFUSION_INGEST": json.dumps(INGEST_SETTINGS),
    }
    server = StandaloneAirflow(tmp_path_factory.mktemp("airflow_s3"), settings, extra_env)
    for name in list(server.env):
        if name.startswith(("AWS_", "FACEFUSION_")):  # the connection is the only way to S3
            del server.env[name]
    try:
        server.start()
        server.api("POST", "/api/v2/pools", json={"name": "facefusion_gpu", "slots": 3})
        deadline = time.monotonic() + 120
        while server.client.get(f"/api/v2/dags/{INGEST}").status_code != 200:
            assert time.monotonic() < deadline, server.api("GET", "/api/v2/importErrors")
            time.sleep(1)
        server.api("PATCH", f"/api/v2/dags/{INGEST}", json={"is_paused": False})
        yield Ingestion(server)
    finally:
        server.stop()


def upload(s3: S3Stack, local: Path, key: str) -> None:
    s3.client().upload_file(str(local), "videos", key)


def output_frames(s3: S3Stack, key: str, folder: Path) -> list[str]:
    local = folder / key.replace("/", "_")
    s3.client().download_file("videos", key, str(local))
    return [digest.md5 for digest in frame_digests(str(local))]


def test_ingestion_starts_each_new_video_once_and_retries_failures(
    ingestion: Ingestion, s3_stack: S3Stack, media: Path, tmp_path: Path
) -> None:
    s3 = s3_stack
    assert ingestion.server.api("GET", f"/api/v2/dags/{INGEST}")["timetable_summary"] is None  # the Variable's "none"
    upload(s3, media / "face.png", "faces/face.png")
    clips = {"a.mp4": "clip0", "b.mp4": "clip1", "sub/c.mp4": "clip2"}
    for name, clip in clips.items():
        upload(s3, media / f"{clip}.mp4", f"incoming/{name}")

    # Three uploads, one ingestion run: three swap runs, three correct outputs under the output prefix.
    run_id, state = ingestion.ingest()
    assert state == "success", ingestion.task_states(INGEST, run_id)
    first = set(ingestion.swap_runs())
    assert len(first) == 3 and all(run.startswith("ingest__") for run in first)
    assert set(ingestion.wait_for_swaps(first).values()) == {"success"}
    for name, clip in clips.items():
        expected = [digest.md5 for digest in frame_digests(str(media / f"{clip}.mp4"))]
        assert output_frames(s3, f"swapped/{name}", tmp_path) == expected, name
    assert s3.keys("work", "airflow/jobs/") == []  # cleanup removed every job folder from the S3 work root

    # A second ingestion run starts nothing.
    run_id, state = ingestion.ingest()
    assert state == "success"
    assert set(ingestion.swap_runs()) == first
    assert {video["kind"] for video in ingestion.report(run_id)["videos"]} == {"done"}

    # One more upload starts exactly one run; a corrupt video fails it with a clear error, the others stay done.
    upload(s3, media / "corrupt.mp4", "incoming/corrupt.mp4")
    run_id, state = ingestion.ingest()
    assert state == "success"
    (corrupt_run,) = set(ingestion.swap_runs()) - first
    assert ingestion.swap_runs()[corrupt_run]["conf"]["target_uri"] == "s3://videos/incoming/corrupt.mp4"
    assert ingestion.wait_for_swaps({corrupt_run}) == {corrupt_run: "failed"}
    states = ingestion.task_states(SWAP, corrupt_run)
    failed_task = next(task for (task, _), task_state in states.items() if task_state == "failed")
    log = ingestion.task_log(SWAP, corrupt_run, failed_task)
    assert "s3://videos/incoming/corrupt.mp4" in log and "invalid_media" in log
    assert not [key for key in s3.keys("videos", "swapped/") if "corrupt" in key]
    assert {ingestion.swap_runs()[run]["state"] for run in first} == {"success"}

    # The next ingestion run reports the failure by key (and fails, so alerts fire) and retries it once more.
    run_id, state = ingestion.ingest()
    assert state == "failed"
    assert ingestion.task_states(INGEST, run_id)[("report", -1)] == "failed"
    assert "s3://videos/incoming/corrupt.mp4 (attempt 1 of 2 failed" in ingestion.task_log(INGEST, run_id, "report")
    (retry,) = set(ingestion.swap_runs()) - first - {corrupt_run}
    assert retry.endswith("__2")
    assert ingestion.wait_for_swaps({retry}) == {retry: "failed"}

    # The connection's secret never reached conf, XCom or any log; the server had no AWS variables to leak.
    secret = s3.secret_key
    assert all(secret not in json.dumps(run["conf"]) for run in ingestion.swap_runs().values())
    assert secret not in json.dumps(ingestion.report(run_id))
    for root, _, files in os.walk(ingestion.server.home / "logs"):
        for name in files:
            assert secret not in (Path(root) / name).read_text(errors="replace"), name
