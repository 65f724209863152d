"""The output links: what the xcom table stores (a link to the provider's view, with no credential and no location)
and what the view answers, behind Airflow's own authentication (the simple auth manager's JWTs, on a throwaway SQLite
database): 401 without a token, 403 without access, the bytes of a local output (the video as a download) or a
redirect to a short-lived presigned URL of an S3 one (moto) for a user allowed to read the DAG's runs, and only while
the output's marker names the run's work: another run's output at the same path is refused (409), a removed one not
found (404), each saying why."""

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

from facefusion_provider.airflow_plugin import FaceFusionPlugin, LazyOutputsApp, run_view
from facefusion_provider.airflow_plugin import outputs as outputs_view
from facefusion_provider.airflow_plugin.run_output import DagTasks, RunFacts
from facefusion_provider.links.output import OutputPreviewLink, OutputVideoLink, output_link_path
from facefusion_provider.work.layout import output_marker_uri
from facefusion_provider.work.records import OutputMarker, RunHolder

DAG_ID, RUN_ID = "facefusion_swap", "manual__2026-01-01T00:00:00+00:00"
KEY_ID, SECRET = "AKIAOUTPUTVIEWTEST01", "output-view-secret-do-not-store-3c9e"
VIDEO, PREVIEW = b"\x00\x00\x00\x18ftypmp42 the output", b"\xff\xd8\xff the preview"
CONN_ID = "facefusion_s3"
WORK_ID, OTHER_WORK_ID = "w-this-run", "w-a-later-run"
TASKS = DagTasks(validate="validate", plan="plan")


def _accepted(output_uri: str, run_id: str = RUN_ID, work_id: str = WORK_ID) -> RunFacts:
    """A finished run whose validate accepted ``output_uri`` for work ``work_id``."""
    states: dict[str, tuple[str | None, ...]] = {"validate": ("success",), "plan": ("success",)}
    return RunFacts(run_id, "success", states, TASKS, work_id, output_uri, f"file:///work/work/{work_id}")


def _marker(output_uri: str, work_id: str = WORK_ID, run_id: str = RUN_ID) -> bytes:
    holder = RunHolder(kind="airflow", dag_id=DAG_ID, run_id=run_id)
    marker = OutputMarker(work_id=work_id, output_uri=output_uri, frame_count=1, sha256=None, size=1, run=holder)
    return marker.model_dump_json().encode()


def _write_local(folder: Path, work_id: str = WORK_ID, run_id: str = RUN_ID) -> str:
    """A local output with its preview and its marker naming ``work_id``; its URI."""
    (folder / "clip.mp4").write_bytes(VIDEO)
    (folder / "clip.preview.jpg").write_bytes(PREVIEW)
    uri = (folder / "clip.mp4").as_uri()
    (folder / ".clip.mp4.facefusion.json").write_bytes(_marker(uri, work_id, run_id))
    assert output_marker_uri(uri) == (folder / ".clip.mp4.facefusion.json").as_uri()
    return uri


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
def outputs(auth_manager: Any) -> Iterator[tuple[TestClient, dict[str, RunFacts]]]:
    """The view as the API server mounts it, with what Airflow's database says of each run given by the test."""
    runs: dict[str, RunFacts] = {}
    app = outputs_view.create_app()
    app.dependency_overrides[run_view.read_run_facts] = lambda dag_id, run_id: runs.get(run_id)
    with TestClient(app, follow_redirects=False) as client:
        yield client, runs


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
    outputs: tuple[TestClient, dict[str, RunFacts]], auth_manager: Any, tmp_path: Path
) -> None:
    client, runs = outputs
    runs[RUN_ID] = _accepted(_write_local(tmp_path))

    assert client.get(_path("video")).status_code == 401
    assert client.get(_path("video"), headers={"Authorization": "Bearer not-a-jwt"}).status_code == 403
    no_role = {"Authorization": f"Bearer {_token(auth_manager, None)}"}
    assert client.get(_path("video"), headers=no_role).status_code == 403


def test_a_logged_in_user_gets_a_local_outputs_bytes_and_its_preview(
    outputs: tuple[TestClient, dict[str, RunFacts]], auth_manager: Any, tmp_path: Path
) -> None:
    client, runs = outputs
    runs[RUN_ID] = _accepted(_write_local(tmp_path))
    client.cookies.set("_token", _token(auth_manager, "viewer"))  # the UI's session cookie

    video = client.get(_path("video"))
    assert (video.status_code, video.content, video.headers["content-type"]) == (200, VIDEO, "video/mp4")
    assert video.headers["content-disposition"] == 'attachment; filename="clip.mp4"'  # a click saves it
    preview = client.get(_path("preview"), headers={"Authorization": f"Bearer {_token(auth_manager, 'viewer')}"})
    assert (preview.status_code, preview.content) == (200, PREVIEW)
    assert preview.headers["content-disposition"].startswith("inline")  # a click opens it
    assert client.get(_path("video", run_id="manual__other")).status_code == 404
    (tmp_path / "clip.mp4").unlink()
    removed = client.get(_path("video"))
    assert (removed.status_code, removed.headers["content-type"]) == (404, "text/plain; charset=utf-8")
    assert removed.text == f"removed: the output of run {RUN_ID} is no longer at {runs[RUN_ID].output_uri}\n"


def test_an_output_another_run_wrote_since_is_served_under_that_run_only(
    outputs: tuple[TestClient, dict[str, RunFacts]], auth_manager: Any, tmp_path: Path
) -> None:
    client, runs = outputs
    uri = _write_local(tmp_path, OTHER_WORK_ID, "manual__later")  # the later run's merge wrote the same path
    runs[RUN_ID], runs["manual__later"] = _accepted(uri), _accepted(uri, "manual__later", OTHER_WORK_ID)
    client.cookies.set("_token", _token(auth_manager, "viewer"))

    for kind in ("video", "preview"):
        refused = client.get(_path(kind))
        assert refused.status_code == 409 and VIDEO not in refused.content and PREVIEW not in refused.content
        assert refused.text.startswith(f"replaced: {uri} holds the output of run manual__later of {DAG_ID}")
    assert client.get(_path("video", run_id="manual__later")).content == VIDEO


def test_an_s3_output_redirects_to_a_url_valid_for_minutes(
    outputs: tuple[TestClient, dict[str, RunFacts]],
    auth_manager: Any,
    moto_server: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, runs = outputs
    s3 = moto_server.client()
    s3.put_object(Bucket="videos", Key="out/clip.mp4", Body=VIDEO)
    s3.put_object(Bucket="videos", Key="out/clip.preview.jpg", Body=PREVIEW)
    s3.put_object(Bucket="videos", Key="out/.clip.mp4.facefusion.json", Body=_marker("s3://videos/out/clip.mp4"))
    connection = {
        "conn_type": "aws",
        "login": KEY_ID,
        "password": SECRET,
        "extra": {"endpoint_url": moto_server.url, "region_name": "us-east-1"},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW__FACEFUSION__AWS_CONN_ID", CONN_ID)
    runs[RUN_ID] = _accepted("s3://videos/out/clip.mp4")
    viewer = {"Authorization": f"Bearer {_token(auth_manager, 'viewer')}"}

    for kind, body in (("video", VIDEO), ("preview", PREVIEW)):
        answer = client.get(_path(kind), headers=viewer)
        assert answer.status_code == 307, answer.text
        url = answer.headers["location"]
        query = parse_qs(urlparse(url).query)
        assert query["X-Amz-Expires"] == [str(outputs_view.PRESIGNED_SECONDS)]
        answer = httpx.get(url)
        assert answer.content == body
        disposition = answer.headers["content-disposition"]  # S3 answers as the link asked: save the video
        assert disposition == ("attachment; filename*=UTF-8''clip.mp4" if kind == "video" else "inline")
        assert answer.headers["content-type"] == ("video/mp4" if kind == "video" else "image/jpeg")
    assert client.get(_path("video")).status_code == 401


def _store_validated_run(run_id: str, output_uri: str, work_uri: str) -> None:
    """The rows a run leaves: its DAG, the run (succeeded), and ``validate``'s ``output_uri`` and ``work_uri`` XComs
    (written without the task instance row they refer to, which needs a serialized DAG: SQLite's foreign keys are off
    for that one insert)."""
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
        session.add(DagRun(dag_id=DAG_ID, run_id=run_id, run_type=DagRunType.MANUAL, state="success"))
        session.flush()
        run_pk = session.scalar(select(DagRun.id).where(DagRun.run_id == run_id))
    rows = [
        {
            "dag_run_id": run_pk,
            "task_id": TASKS.validate,
            "map_index": -1,
            "key": key,
            "dag_id": DAG_ID,
            "run_id": run_id,
            "value": XComModel.serialize_value(value),
            "timestamp": datetime.now(UTC),
        }
        for key, value in ((run_view.OUTPUT_KEY, output_uri), (run_view.WORK_KEY, work_uri))
    ]
    assert settings.engine is not None
    with settings.engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.execute(insert(XComModel.__table__), rows)
        connection.commit()


def test_the_view_finds_the_output_and_work_in_validates_xcoms(
    auth_manager: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store_validated_run("manual__from_xcom", _write_local(tmp_path), f"file:///work/work/{WORK_ID}")
    monkeypatch.setattr(run_view, "dag_tasks", lambda dag_id: TASKS)  # the serialized DAG's tasks, by their class
    viewer = {"Authorization": f"Bearer {_token(auth_manager, 'viewer')}"}

    with TestClient(outputs_view.create_app()) as client:
        assert client.get(_path("video", run_id="manual__from_xcom"), headers=viewer).content == VIDEO
        assert client.get(_path("video", run_id="manual__never_validated"), headers=viewer).status_code == 404
        tab = client.get(f"/runs/{DAG_ID}/manual__from_xcom", headers=viewer)
        assert '<p id="progress">Done: the output video is ready.</p>' in tab.text
