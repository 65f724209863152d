"""``facefusion_s3_ingest`` end to end: ``airflow standalone`` (scheduler, executor, API), S3 on the moto server, and
credentials only from an Airflow AWS connection (the server's environment has no AWS variables at all).

One server for the module and its three modes, each a story in order:

- videos: uploads -> one ingestion run -> one swap run each and correct outputs; a second ingestion run starts
  nothing; a corrupt upload fails its run as bad input, which the next ingestion run reports (failing, so alerts
  fire) and never retries. (The retry limit and racing runs are covered in unit/s3 against the same ledger code.)
- faces, the content factory: five selfies of five people -> five runs against one standard video, each output nearer
  its own face than the others' (dlib's judge), one stored analysis of the target, no duplicates on a second scan.
- manifests: three good lines and one bad -> three runs, and a report naming the bad line and its field.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from airflow_harness import TEST_SETTINGS, StandaloneAirflow
from judge import identity_judge
from people import carphone, people
from readback import frame_digests
from s3_stack import S3Stack

from facefusion_provider.media.images import encode_image

pytestmark = pytest.mark.slow

INGEST = "facefusion_s3_ingest"
SWAP = "facefusion_swap_batch"
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

    def trigger(self, conf: dict[str, Any] | None = None) -> str:
        body = self.server.api(
            "POST", f"/api/v2/dags/{INGEST}/dagRuns", json={"logical_date": None, "conf": conf or {}}
        )
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

    def ingest(self, conf: dict[str, Any] | None = None) -> tuple[str, str]:
        """One ingestion run, to its end: (run id, final state)."""
        run_id = self.trigger(conf)
        return run_id, self.wait(INGEST, run_id)

    def swap_runs(self) -> dict[str, dict[str, Any]]:
        body = self.server.api("GET", f"/api/v2/dags/{SWAP}/dagRuns", params={"limit": 100})
        return {run["dag_run_id"]: run for run in body["dag_runs"]}

    def wait_for_swaps(self, run_ids: set[str], timeout: float = 240) -> dict[str, str]:
        return {run_id: self.wait(SWAP, run_id, timeout) for run_id in sorted(run_ids)}

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


def test_videos_mode_starts_each_new_video_once_and_never_retries_bad_input(
    ingestion: Ingestion, s3_stack: S3Stack, media: Path, tmp_path: Path
) -> None:
    s3 = s3_stack
    assert ingestion.server.api("GET", f"/api/v2/dags/{INGEST}")["timetable_summary"] is None  # the Variable's "none"
    upload(s3, media / "face.png", "faces/face.png")
    clips = {"a.mp4": "clip0", "sub/c.mp4": "clip2"}
    for name, clip in clips.items():
        upload(s3, media / f"{clip}.mp4", f"incoming/{name}")

    # Two uploads, one ingestion run: a swap run each, correct outputs under the output prefix.
    run_id, state = ingestion.ingest()
    assert state == "success", ingestion.task_states(INGEST, run_id)
    first = set(ingestion.swap_runs())
    assert len(first) == 2 and all(run.startswith("ingest__") for run in first)
    assert set(ingestion.wait_for_swaps(first).values()) == {"success"}
    for name, clip in clips.items():
        expected = [digest.md5 for digest in frame_digests(str(media / f"{clip}.mp4"))]
        assert output_frames(s3, f"swapped/{name}", tmp_path) == expected, name
    assert s3.keys("work", "airflow/work/") == []  # cleanup removed the shared work from the S3 work root

    # A second ingestion run starts nothing.
    run_id, state = ingestion.ingest()
    assert state == "success"
    assert set(ingestion.swap_runs()) == first
    assert {job["kind"] for job in ingestion.report(run_id)["jobs"]} == {"done"}

    # A corrupt upload starts exactly one run, which fails as bad input while the others stay done.
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

    # The next ingestion run reports it (and fails, so alerts fire), and never retries bad input.
    run_id, state = ingestion.ingest()
    assert state == "failed"
    assert ingestion.task_states(INGEST, run_id)[("report", -1)] == "failed"
    report_log = ingestion.task_log(INGEST, run_id, "report")
    assert "s3://videos/incoming/corrupt.mp4 (attempt 1 of 2 rejected" in report_log and "not retried" in report_log
    assert set(ingestion.swap_runs()) == first | {corrupt_run}
    run_id, state = ingestion.ingest()
    assert state == "success" and set(ingestion.swap_runs()) == first | {corrupt_run}

    # The connection's secret never reached conf, XCom or any log; the server had no AWS variables to leak.
    secret = s3.secret_key
    assert all(secret not in json.dumps(run["conf"]) for run in ingestion.swap_runs().values())
    assert secret not in json.dumps(ingestion.report(run_id))
    for root, _, files in os.walk(ingestion.server.home / "logs"):
        for name in files:
            assert secret not in (Path(root) / name).read_text(errors="replace"), name


FACTORY = {
    "mode": "faces",
    "input_prefix": "s3://videos/selfies/",
    "output_prefix": "s3://videos/factory/",
    "target_uris": ["s3://videos/standard/carphone.mp4"],
    "processors": ["face_swapper"],
    "output_video_quality": 90,
}


def test_faces_mode_swaps_each_new_face_into_the_standard_video_once(
    ingestion: Ingestion, s3_stack: S3Stack, tmp_path: Path
) -> None:
    s3 = s3_stack
    faces = people()
    for name, image in faces.items():
        s3.client().put_object(Bucket="videos", Key=f"selfies/{name}.png", Body=encode_image(image, "png"))
    upload(s3, carphone(tmp_path / "carphone.mp4", frames=8), "standard/carphone.mp4")
    before = set(ingestion.swap_runs())

    run_id, state = ingestion.ingest(FACTORY)
    assert state == "success", (ingestion.task_states(INGEST, run_id), ingestion.task_log(INGEST, run_id, "report"))
    runs = set(ingestion.swap_runs()) - before
    assert len(runs) == len(faces)
    assert set(ingestion.wait_for_swaps(runs, timeout=600).values()) == {"success"}

    judge = identity_judge()
    sources = {name: judge.descriptor(image) for name, image in faces.items()}
    for name in faces:
        local = tmp_path / f"{name}.mp4"
        s3.client().download_file("videos", f"factory/{name}.mp4", str(local))
        with av.open(str(local)) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
        found = [judge.descriptor(frame, where) for frame in frames if (where := judge.locate(frame)) is not None]
        mean = np.mean(found, axis=0)
        nearest = min(sources, key=lambda other: judge.distance(mean, sources[other]))
        assert nearest == name, {other: judge.distance(mean, value) for other, value in sources.items()}
    assert len({key.split("/")[2] for key in s3.keys("work", "airflow/analysis/")}) == 1  # one analysis of the target

    run_id, state = ingestion.ingest(FACTORY)
    assert state == "success" and set(ingestion.swap_runs()) - before == runs  # no duplicates on a second scan


def test_a_manifest_starts_its_good_lines_and_names_the_bad_one(
    ingestion: Ingestion, s3_stack: S3Stack, media: Path
) -> None:
    s3 = s3_stack
    upload(s3, media / "face.png", "faces/face.png")
    upload(s3, media / "clip3.mp4", "library/clip3.mp4")
    line = {"source_uris": ["s3://videos/faces/face.png"], "target_uri": "s3://videos/library/clip3.mp4"}
    lines = [
        {**line, "output_uri": f"s3://videos/manifested/{name}.mp4", "processors": []}
        for name in ("one", "two", "three")
    ]
    lines.insert(2, {**line, "output_uri": "s3://videos/manifested/bad.mp4", "face_swapper_blend": 150})
    body = "\n".join(json.dumps(entry) for entry in lines)
    s3.client().put_object(Bucket="videos", Key="manifests/batch.jsonl", Body=body.encode())
    before = set(ingestion.swap_runs())
    conf = {"mode": "manifests", "input_prefix": "s3://videos/manifests/", "output_prefix": "s3://videos/manifested/"}

    run_id, state = ingestion.ingest(conf)
    assert state == "success"
    runs = set(ingestion.swap_runs()) - before
    assert len(runs) == 3
    assert set(ingestion.wait_for_swaps(runs).values()) == {"success"}
    outputs = [key for key in s3.keys("videos", "manifested/") if key.endswith(".mp4") and "/." not in key]
    assert outputs == [f"manifested/{name}.mp4" for name in ("one", "three", "two")]
    (bad,) = [job for job in ingestion.report(run_id)["jobs"] if job["kind"] == "invalid"]
    assert bad["label"] == "batch.jsonl line 3" and "options.face_swapper_blend" in bad["detail"]
    assert "INVALID batch.jsonl line 3" in ingestion.task_log(INGEST, run_id, "scan")
