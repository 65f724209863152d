"""The scan and report operators over a real ledger on the local filesystem, with the swap runs' states faked.

The claims use the same exclusive-create primitive as on S3 (a hard link here, ``If-None-Match`` there), so racing
scans here exercise the real at-most-once guarantee; ``integration/s3`` repeats the essentials against an S3 server.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.api.datamodels._generated import DagRunState
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from facefusion_provider import ingest
from facefusion_provider.hooks.job_ledger import IngestLedgerHook
from facefusion_provider.operators.ingest import (
    IngestReportOperator,
    ScanForNewJobsOperator,
    ingest_config,
    ingest_params,
    ingest_schedule,
)


class FakeTaskInstance:
    """What the operators use of Airflow's runtime task instance: XCom and the states of other DAGs' runs."""

    def __init__(self, run_states: dict[str, str], run_id: str = "manual__1") -> None:
        self.dag_id = "facefusion_s3_ingest"
        self.run_id = run_id
        self.run_states = run_states
        self.xcom: dict[str, Any] = {}
        self.lookups: list[str] = []
        self.failures: dict[tuple[str, str], dict[str, str]] = {}  # (swap run, task) -> its failure XCom

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = json.loads(json.dumps(value))  # what XCom would store

    def xcom_pull(self, task_ids: str, key: str = "return_value", **where: Any) -> Any:
        if "run_id" in where:  # another DAG's run: what its failing task recorded
            return self.failures.get((where["run_id"], task_ids)) if key == "failure" else None
        return self.xcom.get(key)

    def get_dr_count(self, dag_id: str, run_ids: list[str]) -> int:
        assert dag_id == "facefusion_swap_batch"
        self.lookups.extend(run_ids)
        return sum(1 for run_id in run_ids if run_id in self.run_states)

    def get_dagrun_state(self, dag_id: str, run_id: str) -> DagRunState:
        return DagRunState(self.run_states[run_id])  # the Task SDK's enum, as the real call returns it


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    paths = {name: tmp_path / name for name in ("in", "out", "faces")}
    for path in paths.values():
        path.mkdir()
    (paths["faces"] / "face.jpg").write_bytes(b"jpeg")
    return paths


def scan_operator(folders: dict[str, Path], **overrides: Any) -> ScanForNewJobsOperator:
    form = ingest_params({})
    values: dict[str, Any] = {name: param.value if param.has_value else None for name, param in form.items()}
    values.update(
        {
            "input_prefix": folders["in"].as_uri(),
            "output_prefix": folders["out"].as_uri(),
            "source_uris": [(folders["faces"] / "face.jpg").as_uri()],
            "processors": [],
            "max_attempts": 2,
        }
    )
    values.update(overrides)
    return ScanForNewJobsOperator(task_id="scan", **values)


def upload(folders: dict[str, Path], name: str, content: bytes = b"video") -> str:
    path = folders["in"] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path.as_uri()


def scan(folders: dict[str, Path], ti: FakeTaskInstance, **overrides: Any) -> list[dict[str, Any]]:
    return scan_operator(folders, **overrides).execute({"ti": ti})  # type: ignore[arg-type]


def report(ti: FakeTaskInstance) -> Any:
    """The report task of the scan ``ti`` ran: the scan's report, as the DAG passes it."""
    return IngestReportOperator(task_id="report", report=ti.xcom.get("report")).execute({"ti": ti})  # type: ignore[arg-type]


def test_each_new_video_starts_once_and_a_second_scan_starts_nothing(folders: dict[str, Path]) -> None:
    uris = [upload(folders, name) for name in ("a.mp4", "b.mov", "sub/c.mkv")]
    upload(folders, "readme.txt")
    ti = FakeTaskInstance({})
    triggers = scan(folders, ti)
    assert sorted(t["conf"]["target_uri"] for t in triggers) == sorted(uris)
    out = folders["out"].as_uri()
    assert {t["conf"]["output_uri"] for t in triggers} == {f"{out}/a.mp4", f"{out}/b.mov", f"{out}/sub/c.mkv"}
    assert all(t["conf"]["source_uris"] == [(folders["faces"] / "face.jpg").as_uri()] for t in triggers)
    # Flat, as the trigger form sends it: the options that differ from the defaults.
    assert all(set(t["conf"]) == {"source_uris", "target_uri", "output_uri", "processors"} for t in triggers)
    assert all(t["conf"]["processors"] == [] for t in triggers)
    assert {t["trigger_dag_id"] for t in triggers} == {"facefusion_swap_batch"}
    # The ledger lives under the output prefix by default and holds one claim per video.
    claims = sorted((folders["out"] / ".facefusion-ledger" / "jobs").glob("*/attempt-001.json"))
    assert len(claims) == 3
    # The runs exist now (queued): the next scan finds them in flight and starts nothing.
    ti_later = FakeTaskInstance({t["trigger_run_id"]: "running" for t in triggers}, run_id="manual__2")
    assert scan(folders, ti_later) == []
    assert {v["kind"] for v in ti_later.xcom["report"]["jobs"]} == {"in_flight"}
    # Once they succeeded, their outcomes are recorded and they stay done; one more upload starts exactly one.
    new = upload(folders, "d.mp4")
    ti_done = FakeTaskInstance({t["trigger_run_id"]: "success" for t in triggers}, run_id="manual__3")
    assert [t["conf"]["target_uri"] for t in scan(folders, ti_done)] == [new]
    assert len(list((folders["out"] / ".facefusion-ledger" / "jobs").glob("*/attempt-001.success.json"))) == 3


def test_a_failed_video_is_reported_once_and_retried_up_to_the_limit(folders: dict[str, Path]) -> None:
    bad = upload(folders, "bad.mp4", b"not a video")
    (first,) = scan(folders, FakeTaskInstance({}))
    ti = FakeTaskInstance({first["trigger_run_id"]: "failed"}, run_id="manual__2")
    (retry,) = scan(folders, ti)
    assert retry["conf"]["target_uri"] == bad and retry["trigger_run_id"].endswith("__2")
    with pytest.raises(
        AirflowFailException, match=r"bad\.mp4 \(attempt 1 of 2 failed in run facefusion_swap_batch/ingest__"
    ):
        report(ti)
    # The second attempt fails too: given up, reported once more, and never started again.
    ti = FakeTaskInstance({first["trigger_run_id"]: "failed", retry["trigger_run_id"]: "failed"}, run_id="manual__3")
    assert scan(folders, ti) == []
    with pytest.raises(AirflowFailException, match=r"attempt 2 of 2 failed .* given up"):
        report(ti)
    ti = FakeTaskInstance({first["trigger_run_id"]: "failed", retry["trigger_run_id"]: "failed"}, run_id="manual__4")
    assert scan(folders, ti) == []
    assert report(ti)["jobs"][0]["kind"] == "given_up"
    assert ti.lookups == []  # finished attempts are never looked up again


def test_racing_scans_claim_each_video_exactly_once(folders: dict[str, Path]) -> None:
    uris = {upload(folders, f"v{i}.mp4") for i in range(6)}
    barrier = threading.Barrier(4)
    results: list[list[dict[str, Any]]] = []
    errors: list[BaseException] = []

    def race(number: int) -> None:
        try:
            barrier.wait()
            results.append(scan(folders, FakeTaskInstance({}, run_id=f"manual__{number}")))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    started = [t["conf"]["target_uri"] for result in results for t in result]
    assert sorted(started) == sorted(uris)  # every video once, none twice


def test_a_scan_that_lost_the_claim_starts_nothing_for_that_video(folders: dict[str, Path]) -> None:
    upload(folders, "a.mp4")
    cfg = ingest_config(
        {
            "input_prefix": folders["in"].as_uri(),
            "output_prefix": folders["out"].as_uri(),
            "source_uris": [(folders["faces"] / "face.jpg").as_uri()],
            "processors": [],
        }
    )
    hook = IngestLedgerHook()
    # Run A plans while run B claims first (the listing and the claim are not one step).
    found = ingest.find_jobs(hook.list_files(cfg.input_prefix), cfg, now=0, read=hook.read)
    plan_a = ingest.plan_ingest(found.jobs, {}, {}, cfg, now=datetime.now(UTC), ingest_run="A")
    assert len(scan(folders, FakeTaskInstance({}, run_id="B"))) == 1
    assert not hook.claim(cfg.ledger_prefix, plan_a.starts[0].claim)


def test_a_retried_scan_resumes_its_own_claims_with_the_same_run_ids(folders: dict[str, Path]) -> None:
    upload(folders, "a.mp4")
    triggers = scan(folders, FakeTaskInstance({}, run_id="manual__1"))
    # The first try died after claiming: its trigger never ran, so Airflow has no such run.
    again = scan(folders, FakeTaskInstance({}, run_id="manual__1"))
    assert again == triggers
    # Another run leaves the young claim alone (the claiming run may still trigger it).
    assert scan(folders, FakeTaskInstance({}, run_id="manual__2")) == []


def test_a_run_that_failed_on_bad_input_is_rejected_and_never_retried(folders: dict[str, Path]) -> None:
    upload(folders, "a.mp4")
    (first,) = scan(folders, FakeTaskInstance({}))
    ti = FakeTaskInstance({first["trigger_run_id"]: "failed"}, run_id="manual__2")
    ti.failures[(first["trigger_run_id"], "validate")] = {
        "failure_class": "input_missing",
        "message": "target_uri: gone",
    }
    assert scan(folders, ti) == []
    with pytest.raises(AirflowFailException, match=r"attempt 1 of 2 rejected .*: target_uri: gone; not retried \(bad"):
        report(ti)
    later = FakeTaskInstance({first["trigger_run_id"]: "failed"}, run_id="manual__3")
    assert scan(folders, later) == [] and later.xcom["report"]["jobs"][0]["kind"] == "rejected"


def test_a_run_that_failed_on_the_deployment_is_retried_by_a_later_scan(folders: dict[str, Path]) -> None:
    upload(folders, "a.mp4")
    (first,) = scan(folders, FakeTaskInstance({}))
    ti = FakeTaskInstance({first["trigger_run_id"]: "failed"}, run_id="manual__2")
    ti.failures[(first["trigger_run_id"], "plan")] = {
        "failure_class": "storage_denied",
        "message": "s3://work/: access denied",
    }
    (retry,) = scan(folders, ti)
    assert retry["trigger_run_id"] != first["trigger_run_id"] and retry["conf"] == first["conf"]
    assert ti.xcom["report"]["newly_failed"][0]["detail"] == "s3://work/: access denied"


def test_a_scan_outside_the_allow_lists_fails_at_once_naming_the_param(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    upload(folders, "a.mp4")
    monkeypatch.setenv("AIRFLOW__FACEFUSION__ALLOWED_OUTPUT_PREFIXES", folders["faces"].as_uri())
    with pytest.raises(AirflowFailException, match=r"^output_prefix: .* is outside the allowed output locations"):
        scan(folders, FakeTaskInstance({}))
    assert not any(folders["out"].iterdir())  # no ledger, no claim


def test_an_unconfigured_scan_skips_saying_so_and_fails_nothing(folders: dict[str, Path]) -> None:
    with pytest.raises(AirflowSkipException, match="Not configured: set input_prefix and output_prefix"):
        scan(folders, FakeTaskInstance({}), input_prefix=None)


def test_bad_params_fail_the_scan_without_retries(folders: dict[str, Path]) -> None:
    with pytest.raises(AirflowFailException, match="input_prefix"):
        scan(folders, FakeTaskInstance({}), input_prefix="bucket-without-scheme")


def test_the_faces_mode_swaps_each_new_face_into_the_standard_videos(folders: dict[str, Path]) -> None:
    faces = [upload(folders, name, b"jpeg") for name in ("alice.jpg", "bob.png")]
    triggers = scan(folders, FakeTaskInstance({}), mode="faces", source_uris=[], target_uris=["s3://std/intro.mp4"])
    assert sorted(t["conf"]["source_uris"][0] for t in triggers) == sorted(faces)
    out = folders["out"].as_uri()
    assert sorted(t["conf"]["output_uri"] for t in triggers) == [f"{out}/alice.mp4", f"{out}/bob.mp4"]
    assert (
        scan(folders, FakeTaskInstance({}, run_id="manual__2"), mode="faces", target_uris=["s3://std/intro.mp4"]) == []
    )


def test_schedule_and_param_defaults_come_from_the_variable() -> None:
    settings = {
        "schedule": "0 * * * *",
        "input_prefix": "s3://v/in/",
        "output_prefix": "s3://v/out/",
        "source_uris": ["s3://v/face.jpg"],
        "options": {"face_swapper_blend": 90},
        "max_attempts": 5,
    }
    assert ingest_schedule(settings) == "0 * * * *"
    assert ingest_schedule({"input_prefix": "s3://v/in/"}) == "*/15 * * * *"
    assert ingest_schedule({}) is None  # not configured: no schedule, nothing runs on its own
    assert ingest_schedule({"schedule": "none"}) is None
    params = ingest_params(settings)
    assert params["input_prefix"].value == "s3://v/in/"
    assert params["face_swapper_blend"].value == 90
    assert params["face_swapper_blend"].schema["section"] == "Swap options (every run)"
    assert params["max_attempts"].value == 5
    assert params["max_runs_per_scan"].value == 10
    assert params["ledger_prefix"].value is None
    assert all(param.schema.get("title") for param in params.values())
    form = ingest_params({})
    required = {name for name, param in form.items() if not param.has_value and "null" not in param.schema["type"]}
    assert required == {"input_prefix", "output_prefix"}  # the form blocks the trigger until they are filled
    # The form stars every non-nullable param as required: the URI lists are needed by one mode each, so not starred.
    assert all("null" in form[name].schema["type"] for name in ("source_uris", "target_uris", "ledger_prefix"))
    with pytest.raises(ValueError, match="unknown keys"):
        ingest_params({"input_prefx": "s3://v/in/"})
    # An option beside the Params would be ignored: it belongs under "options".
    with pytest.raises(ValueError, match=r"\['face_swapper_blend'\] are swap options; put them under \"options\""):
        ingest_params({"input_prefix": "s3://v/in/", "face_swapper_blend": 90})
