"""The worker tasks' extra links: this run's output video and its preview, presigned for s3:// through the
``[facefusion] aws_conn_id`` connection (opened here against moto), the URI itself for local outputs."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from s3_servers import MotoServer

from facefusion_provider.get_provider_info import get_provider_info
from facefusion_provider.operators.kubernetes import KubernetesSwapSpanOperator, KubernetesWorkerOperator
from facefusion_provider.operators.links import LINK_EXPIRY, OutputPreviewLink, OutputVideoLink
from facefusion_provider.operators.local import LocalSwapSpanOperator, LocalWorkerOperator

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


def _merge(output_uri: str, command: str = "merge") -> LocalWorkerOperator:
    return LocalWorkerOperator(task_id=command, command=command, work_uri="file:///work/w1", output_uri=output_uri)


def _links(operator: Any) -> tuple[str, str]:
    return OutputVideoLink().get_link(operator, ti_key=None), OutputPreviewLink().get_link(operator, ti_key=None)


def test_an_s3_output_links_to_presigned_urls_that_open_the_video_and_its_preview(
    s3_output: str, moto_server: MotoServer
) -> None:
    video_url, preview_url = _links(_merge(s3_output))

    assert video_url.startswith(f"{moto_server.url}/videos/out/clip.mp4?")
    assert preview_url.startswith(f"{moto_server.url}/videos/out/clip.preview.jpg?")
    query = parse_qs(urlparse(video_url).query)
    assert query["X-Amz-Expires"] == [str(int(LINK_EXPIRY.total_seconds()))]
    assert query["X-Amz-Credential"][0].startswith("testing/")  # signed with the connection's key
    assert httpx.get(video_url).content == VIDEO
    assert httpx.get(preview_url).content == PREVIEW


def test_a_local_output_links_to_its_own_uri() -> None:
    assert _links(_merge("file:///data/out/clip.mp4")) == (
        "file:///data/out/clip.mp4",
        "file:///data/out/clip.preview.jpg",
    )


def test_prepare_and_an_unrendered_output_have_no_link() -> None:
    assert _links(_merge("file:///data/out/clip.mp4", command="prepare")) == ("", "")
    assert _links(_merge("{{ ti.xcom_pull(task_ids='validate', key='output_uri') }}")) == ("", "")


def test_both_backends_worker_tasks_carry_the_links_and_the_provider_registers_them() -> None:
    for operator in (LocalWorkerOperator, LocalSwapSpanOperator, KubernetesWorkerOperator, KubernetesSwapSpanOperator):
        assert {link.name for link in operator.operator_extra_links} >= {"Output video", "Output preview"}, operator
    assert get_provider_info()["extra-links"] == [
        "facefusion_provider.operators.links.OutputVideoLink",
        "facefusion_provider.operators.links.OutputPreviewLink",
    ]
