"""A conf no task could use is refused with one line naming the field: at the trigger (the API middleware, as the API
server stacks it: 400, never 500) and, for one no task can receive, as a run triggered another way starts (the scheduler
listener), so no run fails with an empty task log, and no run exists that validate would fail on its conf alone."""

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
from facefusion_provider.airflow_plugin.conf_limits import RefuseBadConf, out_of_range_field

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

    app.add_middleware(RefuseBadConf)
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


def _trigger(client: TestClient, body: str | bytes, dag_id: str = "facefusion_swap") -> Any:
    return client.post(f"/api/v2/dags/{dag_id}/dagRuns", content=body, headers={"content-type": "application/json"})


def test_a_conf_nested_ten_thousand_levels_is_answered_400_saying_why(
    api: tuple[TestClient, list[dict[str, Any]]],
) -> None:
    client, received = api
    deep = '{"conf": {"options": ' + "[" * 10_000 + "]" * 10_000 + "}}"
    for dag_id in ("facefusion_swap", "facefusion_s3_ingest"):
        response = _trigger(client, deep, dag_id)
        assert response.status_code == 400
        assert response.json()["detail"].startswith("request body: nested too deeply to read")
    assert received == []


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ('{"conf": {"options": ' + "[" * 40 + "]" * 40 + "}}", "options[0][0][0]"),
        ('{"conf": {"target_uri": "/in.mp4"', "request body: not JSON that can be read: Expecting"),
        ('{"conf": {"segment_size": 1' + "0" * 5000 + "}}", "request body: not JSON that can be read: Exceeds"),
        ("[1, 2]", "request body: expected a JSON object (with a conf), got list"),
        ('{"conf": ["/f.png"]}', "conf: expected an object of field names and values, got list"),
    ],
)
def test_a_body_the_middleware_cannot_read_is_answered_400_naming_why(
    body: str, detail: str, api: tuple[TestClient, list[dict[str, Any]]]
) -> None:
    client, received = api
    response = _trigger(client, body)
    assert response.status_code == 400 and response.json()["detail"].startswith(detail)
    assert "\n" not in response.json()["detail"] and received == []


# What validate refuses on the conf alone, refused before a run exists: (conf, the one line the trigger answers).
REFUSED_AT_THE_TRIGGER = {
    "six-megabyte-uri": (
        {**BASE, "target_uri": "/" + "a" * 6_000_000},
        "Target video (target_uri): the path or URI is 6000001 bytes long; at most 4096 are allowed",
    ),
    "nested-string-number": (
        {**BASE, "options": {"face_swapper_blend": "90"}},
        "Face swapper blend (face_swapper_blend): Input should be a valid integer (got '90')",
    ),
    "unknown-keys": (
        {**BASE, "face_swaper_blend": 90, "colour": "red"},
        "colour: unknown conf key; allowed: source_uris",
    ),
    "flat-out-of-range": (
        {**BASE, "face_swapper_blend": 150},
        "Face swapper blend (face_swapper_blend): 150 is greater than the maximum of 100",
    ),
    "no-conf": ({}, "Source faces (source_uris): expected a non-empty list of paths or URIs"),
    "bad-output-container": ({**BASE, "output_uri": "/out.avi"}, "Output video (output_uri): file:///out.avi has"),
}


@pytest.mark.parametrize("case", list(REFUSED_AT_THE_TRIGGER))
def test_what_validate_refuses_on_the_conf_alone_is_answered_400_before_a_run_exists(
    case: str, api: tuple[TestClient, list[dict[str, Any]]]
) -> None:
    client, received = api
    conf, detail = REFUSED_AT_THE_TRIGGER[case]
    for dag_id in sorted(conf_limits.SWAP_DAG_IDS):
        response = _trigger(client, json.dumps({"conf": conf}), dag_id)
        assert response.status_code == 400
        assert response.json()["detail"].startswith(detail), response.json()["detail"][:300]
        assert "\n" not in response.json()["detail"]  # one line, as validate's note would say it
    assert received == []


def test_the_unknown_keys_are_named_with_the_nearest_known_one() -> None:
    body = json.dumps({"conf": {**BASE, "face_swaper_blend": 90}}).encode()
    assert conf_limits.trigger_problem(body, "facefusion_swap") == (
        "face_swaper_blend: unknown conf key; did you mean 'face_swapper_blend'?"
    )


@pytest.mark.parametrize("case", [case for case in REFUSED_AT_THE_TRIGGER if case != "flat-out-of-range"])
def test_validate_refuses_the_same_confs_naming_the_same_field(case: str) -> None:
    """The middleware runs validate's own conf check: a run triggered another way fails at validate the same way."""
    from airflow.sdk.definitions.param import ParamsDict

    from facefusion_provider.exceptions import NonRetryableError
    from facefusion_provider.operators.params import swap_params, titled_reason
    from facefusion_provider.operators.validate import StorageChecks, validate_conf

    conf, detail = REFUSED_AT_THE_TRIGGER[case]
    params = ParamsDict(swap_params())
    params.update(conf)
    checks = StorageChecks(
        content_id=lambda uri: "sha256:0", check_writable=lambda uri: None, read_range=lambda uri, start, end: b""
    )
    with pytest.raises(NonRetryableError) as raised:
        validate_conf(params.validate(), conf, work_root="/work", checks=checks)
    assert titled_reason(str(raised.value)).startswith(detail)


def test_what_needs_storage_or_settings_is_left_to_validate(api: tuple[TestClient, list[dict[str, Any]]]) -> None:
    client, received = api
    conf = {**BASE, "target_uri": "s3://nobody-has-this-bucket/in.mp4", "output_uri": "/work/out.mp4"}
    assert client.post("/api/v2/dags/facefusion_swap/dagRuns", json={"conf": conf}).status_code == 200
    assert received == [{"conf": conf}]


def test_a_run_started_otherwise_with_a_conf_too_deep_fails_as_it_starts() -> None:
    states: list[Any] = []
    deep: Any = []
    for _ in range(100):
        deep = [deep]
    run = SimpleNamespace(
        dag_id="facefusion_swap", run_id="m1", conf={**BASE, "options": deep}, note=None, set_state=states.append
    )
    conf_limits.on_dag_run_running(dag_run=run, msg="started")
    assert [str(state) for state in states] == ["failed"]
    assert run.note.startswith("Not started: options") and "nested more than 32 levels deep" in run.note
