"""A number no task can receive (beyond int64: Airflow hands a task its conf through msgpack) is refused with one
line naming the field: at the trigger (the API middleware, as the API server stacks it) and as a run triggered another
way starts (the scheduler listener), so no run fails with an empty task log."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from fastapi import FastAPI
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.testclient import TestClient

from facefusion_provider.airflow_plugin import conf_limits
from facefusion_provider.airflow_plugin.conf_limits import RefuseOutOfRangeConf, out_of_range_field

BASE = {"source_uris": ["/f.png"], "target_uri": "/in.mp4", "output_uri": "/out.mp4"}


def test_the_reason_a_task_cannot_start_with_such_a_number() -> None:
    with pytest.raises(OverflowError):
        msgspec.msgpack.encode({"segment_size": 10**30})


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        ({"segment_size": 10**30}, "segment_size"),
        ({"trim_frame_end": 10**20}, "trim_frame_end"),
        ({"options": {"segment_size": 10**30}}, "options.segment_size"),
        ({"face_mask_padding": [0, 0, -(10**40), 0]}, "face_mask_padding[2]"),
    ],
)
def test_the_first_out_of_range_number_is_named(conf: dict[str, Any], field: str) -> None:
    problem = out_of_range_field({**BASE, **conf})
    assert problem is not None and problem.startswith(f"{field}: a ") and "out of range" in problem
    assert "\n" not in problem and len(problem) < 200


def test_numbers_a_task_can_receive_pass() -> None:
    assert out_of_range_field({**BASE, "segment_size": 2**63 - 1, "face_swapper_blend": True, "x": [1.5e300]}) is None


@pytest.fixture
def api() -> tuple[TestClient, list[dict[str, Any]]]:
    """A stand-in trigger route that records what reached it, behind the middleware and GZip as in the API server."""
    received: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/api/v2/dags/{dag_id}/dagRuns")
    def trigger(dag_id: str, body: dict[str, Any]) -> dict[str, str]:
        received.append(body)
        return {"dag_run_id": "manual__1"}

    app.add_middleware(RefuseOutOfRangeConf)
    app.add_middleware(GZipMiddleware, minimum_size=100)
    return TestClient(app), received


def test_a_trigger_of_our_dags_with_such_a_number_is_answered_400_in_one_line(
    api: tuple[TestClient, list[dict[str, Any]]],
) -> None:
    client, received = api
    body = '{"conf": {"segment_size": ' + str(10**30) + "}}"
    response = client.post(
        "/api/v2/dags/facefusion_swap/dagRuns", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["detail"].startswith("segment_size: a 31-digit number is out of range")
    assert received == []


def test_good_triggers_and_other_dags_reach_the_api_unchanged(api: tuple[TestClient, list[dict[str, Any]]]) -> None:
    client, received = api
    good = {"conf": {**BASE, "segment_size": 64}, "logical_date": None}
    assert client.post("/api/v2/dags/facefusion_swap/dagRuns", json=good).json() == {"dag_run_id": "manual__1"}
    other = json.loads('{"conf": {"n": ' + str(10**30) + "}}")
    assert client.post("/api/v2/dags/someone_elses/dagRuns", json=other).status_code == 200
    assert received == [good, other]


def test_a_run_started_otherwise_fails_as_it_starts_with_a_note_naming_the_field() -> None:
    states: list[Any] = []
    run = SimpleNamespace(
        dag_id="facefusion_swap",
        run_id="manual__1",
        conf={"trim_frame_end": 10**20},
        note=None,
        set_state=states.append,
    )
    conf_limits.on_dag_run_running(dag_run=run, msg="started")
    assert [str(state) for state in states] == ["failed"]
    assert run.note.startswith("Not started: trim_frame_end: a 21-digit number is out of range")

    fine = SimpleNamespace(dag_id="facefusion_swap", run_id="m2", conf=BASE, note=None, set_state=states.append)
    conf_limits.on_dag_run_running(dag_run=fine, msg="started")
    theirs = SimpleNamespace(dag_id="other", run_id="m3", conf={"n": 10**30}, note=None, set_state=states.append)
    conf_limits.on_dag_run_running(dag_run=theirs, msg="started")
    assert len(states) == 1 and fine.note is None and theirs.note is None


def test_a_swap_trigger_with_an_input_left_empty_is_refused_naming_it() -> None:
    empty = json.dumps({"conf": {**BASE, "target_uri": ""}}).encode()
    assert conf_limits.trigger_problem(empty, "facefusion_swap") == "Target video (target_uri): required: fill it in"
    assert conf_limits.trigger_problem(empty, "facefusion_s3_ingest") is None  # its own fields, its own form
    assert conf_limits.trigger_problem(json.dumps({"conf": BASE}).encode(), "facefusion_swap_batch") is None
