"""The provider's Airflow plugin: the scheduler listener that fails a run whose pool is missing, and the API middleware
that cuts a bad param's 400 to one line (both end to end in tests/integration/airflow/test_fresh_airflow.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.plugins_manager import AirflowPlugin
from airflow.serialization.definitions.param import SerializedParam, SerializedParamsDict
from fastapi import FastAPI, HTTPException
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.testclient import TestClient

from facefusion_provider.airflow_plugin import FaceFusionPlugin, pools, run_notes
from facefusion_provider.airflow_plugin.conf_limits import RefuseBadConf
from facefusion_provider.airflow_plugin.trigger_errors import OneLineParamErrors
from facefusion_provider.operators.params import swap_params


def _task(task_id: str, pool: str, module: str = "facefusion_provider.operators.local") -> Any:
    return SimpleNamespace(task_id=task_id, pool=pool, _task_module=module)


def test_only_the_providers_tasks_and_their_pools_are_checked() -> None:
    tasks = [
        _task("validate", "default_pool", "facefusion_provider.operators.validate"),
        _task("swap_span", "facefusion_gpu"),
        _task("merge", "default_pool"),
        _task("notify", "other_pool", "airflow.providers.standard.operators.bash"),
    ]
    assert pools.provider_task_pools(tasks) == {"default_pool": ["validate", "merge"], "facefusion_gpu": ["swap_span"]}


def test_the_missing_pool_message_is_one_line_naming_the_pool_and_how_to_create_it() -> None:
    message = pools.missing_pool_message({"facefusion_gpu": ["swap_span"]})
    assert "\n" not in message
    assert message.startswith("Not started: pool 'facefusion_gpu' (tasks swap_span) does not exist.")
    assert "`airflow pools set facefusion_gpu <slots> '<description>'`" in message
    assert "[facefusion] pool empty to use default_pool" in message


def test_the_plugin_registers_the_listener_and_the_middleware() -> None:
    assert issubclass(FaceFusionPlugin, AirflowPlugin) and FaceFusionPlugin.name == "facefusion"
    assert FaceFusionPlugin.listeners == [run_notes]  # which runs the pools and conf_limits checks in order
    assert [item["middleware"] for item in FaceFusionPlugin.fastapi_root_middlewares] == [
        OneLineParamErrors,
        RefuseBadConf,
    ]


def _airflow_param_error(conf: dict[str, Any]) -> str:
    """The message Airflow's API server builds for a bad param (its own validation of the serialized params)."""
    params = {name: SerializedParam(p.value, p.description, **p.schema) for name, p in swap_params().items()}
    base = {"source_uris": ["/f.png"], "target_uri": "/in.mp4", "output_uri": "/out.mp4"}
    with pytest.raises(Exception) as raised:
        SerializedParamsDict(params).deep_merge({**base, **conf}).validate()
    return str(raised.value)


@pytest.fixture
def api() -> TestClient:
    """A stand-in for Airflow's API: the trigger route answers 400 with Airflow's own message; GZip outside, as there."""
    app = FastAPI()

    @app.post("/api/v2/dags/{dag_id}/dagRuns")
    def trigger(dag_id: str, body: dict[str, Any]) -> dict[str, str]:
        if body.get("conf"):
            raise HTTPException(400, _airflow_param_error(body["conf"]))
        return {"dag_run_id": "manual__1"}

    app.add_middleware(OneLineParamErrors)
    app.add_middleware(GZipMiddleware, minimum_size=100)
    return TestClient(app)


def test_a_bad_param_of_our_dags_is_answered_in_one_line(api: TestClient) -> None:
    assert "Failed validating 'maximum' in schema" in _airflow_param_error({"face_swapper_blend": 150})  # Airflow's
    for dag_id in ("facefusion_swap", "facefusion_swap_batch"):
        response = api.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"conf": {"face_swapper_blend": 150}})
        assert response.status_code == 400
        assert response.json() == {
            "detail": "Face swapper blend (face_swapper_blend): 150 is greater than the maximum of 100"
        }
    response = api.post("/api/v2/dags/facefusion_swap/dagRuns", json={"conf": {"face_mask_padding": [1, 2]}})
    assert response.json()["detail"] == "Face mask padding (face_mask_padding): [1, 2] is too short"


def test_other_dags_and_good_triggers_pass_through(api: TestClient) -> None:
    other = api.post("/api/v2/dags/someone_elses/dagRuns", json={"conf": {"face_swapper_blend": 150}})
    assert other.status_code == 400 and "Failed validating" in other.json()["detail"]
    assert api.post("/api/v2/dags/facefusion_swap/dagRuns", json={}).json() == {"dag_run_id": "manual__1"}
