"""The worker tasks' extra links: this run's output video and its preview, as links to the provider's view (which
checks the user and signs or sends the file when opened), for S3 and local outputs alike."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from s3_servers import MotoServer

from facefusion_provider.get_provider_info import get_provider_info
from facefusion_provider.links.output import OutputPreviewLink, OutputVideoLink
from facefusion_provider.operators.kubernetes import FaceFusionWorkerPodOperator
from facefusion_provider.operators.local import FaceFusionWorkerOperator
from facefusion_provider.sensors.standing_workers import SpanCommittedSensor

CONN_ID = "facefusion_s3"
VIDEO, PREVIEW = b"\x00\x00\x00\x18ftypmp42 the output", b"\xff\xd8\xff the preview"


@pytest.fixture
def s3_output(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://videos/out/clip.mp4`` and its preview in moto, reachable only through the configured connection."""
    client = moto_server.client()
    client.put_object(Bucket="videos", Key="out/clip.mp4", Body=VIDEO)
    client.put_object(Bucket="videos", Key="out/clip.preview.jpg", Body=PREVIEW)
    connection = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": moto_server.url, "region_name": "us-east-1"},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW__FACEFUSION__AWS_CONN_ID", CONN_ID)
    return "s3://videos/out/clip.mp4"


def _merge(output_uri: str, command: str = "merge") -> FaceFusionWorkerOperator:
    return FaceFusionWorkerOperator(task_id=command, command=command, work_uri="file:///work/w1", output_uri=output_uri)


TI_KEY: Any = SimpleNamespace(dag_id="facefusion_swap", run_id="manual__1", task_id="merge", map_index=-1)


def _links(operator: Any) -> tuple[str, str]:
    return OutputVideoLink().get_link(operator, ti_key=TI_KEY), OutputPreviewLink().get_link(operator, ti_key=TI_KEY)


def test_an_s3_output_links_to_the_providers_view_and_no_credential_is_stored(s3_output: str) -> None:
    """The link opens the view (``tests/unit/s3/test_output_view.py``), which signs for minutes when it is opened."""
    video_url, preview_url = _links(_merge(s3_output))

    assert video_url == "/facefusion/outputs/facefusion_swap/manual__1/video"
    assert preview_url == "/facefusion/outputs/facefusion_swap/manual__1/preview"
    assert "X-Amz" not in video_url + preview_url and "testing" not in video_url + preview_url


def test_a_local_output_links_to_the_view_too() -> None:
    assert _links(_merge("file:///data/out/clip.mp4"))[0] == "/facefusion/outputs/facefusion_swap/manual__1/video"


def test_prepare_and_an_unrendered_output_have_no_link() -> None:
    assert _links(_merge("file:///data/out/clip.mp4", command="prepare")) == ("", "")
    assert _links(_merge("{{ ti.xcom_pull(task_ids='validate', key='output_uri') }}")) == ("", "")


def test_both_backends_worker_tasks_carry_the_links_and_the_provider_registers_them() -> None:
    for operator in (FaceFusionWorkerOperator, FaceFusionWorkerPodOperator, SpanCommittedSensor):
        assert {link.name for link in operator.operator_extra_links} >= {"Output video", "Output preview"}, operator
    assert get_provider_info()["extra-links"] == [
        "facefusion_provider.links.output.OutputVideoLink",
        "facefusion_provider.links.output.OutputPreviewLink",
    ]
