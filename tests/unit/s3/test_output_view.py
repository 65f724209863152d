"""The output links: what the xcom table stores (a link to the provider's view, with no credential and no location)
and what the view answers, behind Airflow's own authentication (the simple auth manager's JWTs, on a throwaway SQLite
database): 401 without a token, 403 without access, the bytes of a local output or a redirect to a short-lived
presigned URL of an S3 one (moto) for a user allowed to read the DAG's runs."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from fastapi.testclient import TestClient
from s3_servers import MotoServer

from facefusion_provider.airflow_plugin import FaceFusionPlugin, LazyOutputsApp, output_link_path
from facefusion_provider.airflow_plugin import outputs as outputs_view
from facefusion_provider.operators.links import OutputPreviewLink, OutputVideoLink

DAG_ID, RUN_ID = "facefusion_swap", "manual__2026-01-01T00:00:00+00:00"
KEY_ID, SECRET = "AKIAOUTPUTVIEWTEST01", "output-view-secret-do-not-store-3c9e"
VIDEO, PREVIEW = b"\x00\x00\x00\x18ftypmp42 the output", b"\xff\xd8\xff the preview"
CONN_ID = "facefusion_s3"


@pytest.fixture(scope="module")
def auth_manager() -> Any:
    """The simple auth manager on a migrated SQLite database in the tests' throwaway Airflow home."""
    from airflow import settings
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.utils.db import initdb

    assert str(settings.SQL_ALCHEMY_CONN).startswith(f"sqlite:///{tempfile.gettempdir()}"), settings.SQL_ALCHEMY_CONN
    initdb()
    manager = create_auth_manager()
    manager.init()
    return manager


@pytest.fixture
def outputs(auth_manager: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The view as the API server mounts it, with ``validate``'s ``output_uri`` XCom of each run given by the test."""
    output_uris: dict[str, str] = {}
    app = outputs_view.create_app()
    app.dependency_overrides[outputs_view.validated_output_uri] = lambda dag_id, run_id: output_uris.get(run_id)
    with TestClient(app, follow_redirects=False) as client:
        yield client, output_uris


def _token(auth_manager: Any, role: str | None) -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return str(auth_manager.generate_jwt(SimpleAuthManagerUser(username=f"user-{role}", role=role)))


def _path(kind: str, run_id: str = RUN_ID) -> str:
    return output_link_path(DAG_ID, run_id, kind).removeprefix("/facefusion")


def test_the_stored_links_lead_to_the_view_and_hold_no_credential_or_location(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    merge = SimpleNamespace(task_id="merge", command="merge", output_uri="s3://videos/out/clip.mp4")  # what links read
    ti_key = SimpleNamespace(dag_id=DAG_ID, run_id=RUN_ID, task_id="merge", map_index=-1, try_number=1)
    video = OutputVideoLink().get_link(merge, ti_key=ti_key)  # type: ignore[arg-type]
    preview = OutputPreviewLink().get_link(merge, ti_key=ti_key)  # type: ignore[arg-type]

    assert (
        video
        == "https://airflow.example.com/facefusion/outputs/facefusion_swap/manual__2026-01-01T00%3A00%3A00%2B00%3A00/video"
    )
    assert preview.endswith("/preview")
    for link in (video, preview):
        assert KEY_ID not in link and "X-Amz" not in link and "videos" not in link and "clip" not in link
    assert {item["url_prefix"] for item in FaceFusionPlugin.fastapi_apps} == {"/facefusion"}
    assert all(isinstance(item["app"], LazyOutputsApp) for item in FaceFusionPlugin.fastapi_apps)


def test_without_a_token_401_with_a_bad_one_or_no_access_403(
    outputs: tuple[TestClient, dict[str, str]], auth_manager: Any, tmp_path: Path
) -> None:
    client, output_uris = outputs
    (tmp_path / "clip.mp4").write_bytes(VIDEO)
    output_uris[RUN_ID] = (tmp_path / "clip.mp4").as_uri()

    assert client.get(_path("video")).status_code == 401
    assert client.get(_path("video"), headers={"Authorization": "Bearer not-a-jwt"}).status_code == 403
    no_role = {"Authorization": f"Bearer {_token(auth_manager, None)}"}
    assert client.get(_path("video"), headers=no_role).status_code == 403


def test_a_logged_in_user_gets_a_local_outputs_bytes_and_its_preview(
    outputs: tuple[TestClient, dict[str, str]], auth_manager: Any, tmp_path: Path
) -> None:
    client, output_uris = outputs
    (tmp_path / "clip.mp4").write_bytes(VIDEO)
    (tmp_path / "clip.preview.jpg").write_bytes(PREVIEW)
    output_uris[RUN_ID] = (tmp_path / "clip.mp4").as_uri()
    client.cookies.set("_token", _token(auth_manager, "viewer"))  # the UI's session cookie

    video = client.get(_path("video"))
    assert (video.status_code, video.content, video.headers["content-type"]) == (200, VIDEO, "video/mp4")
    preview = client.get(_path("preview"), headers={"Authorization": f"Bearer {_token(auth_manager, 'viewer')}"})
    assert (preview.status_code, preview.content) == (200, PREVIEW)
    assert client.get(_path("video", run_id="manual__other")).status_code == 404
    (tmp_path / "clip.mp4").unlink()
    assert client.get(_path("video")).status_code == 404


def test_an_s3_output_redirects_to_a_url_valid_for_minutes(
    outputs: tuple[TestClient, dict[str, str]],
    auth_manager: Any,
    moto_server: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, output_uris = outputs
    s3 = moto_server.client()
    s3.put_object(Bucket="videos", Key="out/clip.mp4", Body=VIDEO)
    s3.put_object(Bucket="videos", Key="out/clip.preview.jpg", Body=PREVIEW)
    connection = {
        "conn_type": "aws",
        "login": KEY_ID,
        "password": SECRET,
        "extra": {"endpoint_url": moto_server.url, "region_name": "us-east-1"},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW__FACEFUSION__AWS_CONN_ID", CONN_ID)
    output_uris[RUN_ID] = "s3://videos/out/clip.mp4"
    viewer = {"Authorization": f"Bearer {_token(auth_manager, 'viewer')}"}

    for kind, body in (("video", VIDEO), ("preview", PREVIEW)):
        answer = client.get(_path(kind), headers=viewer)
        assert answer.status_code == 307, answer.text
        url = answer.headers["location"]
        query = parse_qs(urlparse(url).query)
        assert query["X-Amz-Expires"] == [str(outputs_view.PRESIGNED_SECONDS)]
        assert httpx.get(url).content == body
    assert client.get(_path("video")).status_code == 401


def _store_validated_output(run_id: str, output_uri: str) -> None:
    """The rows a run leaves: its DAG, the run, and ``validate``'s ``output_uri`` XCom (written without the task
    instance row it refers to, which needs a serialized DAG: SQLite's foreign keys are off for that one insert)."""
    from datetime import UTC, datetime

    from airflow import settings
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunType
    from sqlalchemy import insert, select

    with create_session() as session:
        if session.get(DagModel, DAG_ID) is None:
            session.add(DagBundleModel(name="output-view-tests"))
            session.flush()
            session.add(DagModel(dag_id=DAG_ID, bundle_name="output-view-tests"))  # type: ignore[no-untyped-call]
            session.flush()
        session.add(DagRun(dag_id=DAG_ID, run_id=run_id, run_type=DagRunType.MANUAL))
        session.flush()
        run_pk = session.scalar(select(DagRun.id).where(DagRun.run_id == run_id))
    row = {
        "dag_run_id": run_pk,
        "task_id": outputs_view.VALIDATE_TASK_ID,
        "map_index": -1,
        "key": outputs_view.OUTPUT_KEY,
        "dag_id": DAG_ID,
        "run_id": run_id,
        "value": XComModel.serialize_value(output_uri),
        "timestamp": datetime.now(UTC),
    }
    assert settings.engine is not None
    with settings.engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.execute(insert(XComModel.__table__).values(**row))
        connection.commit()


def test_the_view_finds_the_output_in_validates_xcom(auth_manager: Any, tmp_path: Path) -> None:
    (tmp_path / "clip.mp4").write_bytes(VIDEO)
    _store_validated_output("manual__from_xcom", (tmp_path / "clip.mp4").as_uri())
    viewer = {"Authorization": f"Bearer {_token(auth_manager, 'viewer')}"}

    with TestClient(outputs_view.create_app()) as client:
        assert client.get(_path("video", run_id="manual__from_xcom"), headers=viewer).content == VIDEO
        assert client.get(_path("video", run_id="manual__never_validated"), headers=viewer).status_code == 404
