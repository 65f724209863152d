"""Ingestion planning, ledger and credential tests without an Airflow database; merge tests on a moto S3 server."""

from __future__ import annotations

import os
import tempfile

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))

import sys
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

# The S3 servers of the integration tests (moto in its own process, a fault-injecting proxy), reused here.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "s3"))
from s3_servers import MotoServer
from synth import VideoSpec, write_video

from facefusion_provider import contract

BUCKETS = ("work", "videos")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No setting, credential or endpoint leaks in from the environment that runs the tests."""
    for name in list(os.environ):
        if name.startswith(("AIRFLOW__FACEFUSION__", "FACEFUSION_", "AWS_", "AIRFLOW_CONN_", "AIRFLOW_VAR_")):
            monkeypatch.delenv(name)
    yield


@pytest.fixture(scope="module")
def moto_server() -> Iterator[MotoServer]:
    """moto's S3 server with the buckets ``work`` and ``videos``, for one test module."""
    server = MotoServer()
    try:
        client = server.client()
        for bucket in BUCKETS:
            client.create_bucket(Bucket=bucket)
        yield server
    finally:
        server.stop()


@pytest.fixture
def use_s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Points the storage layer at an S3 endpoint, with moto's test credentials (for this test only)."""

    def use(endpoint: str) -> None:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            contract.S3_ENDPOINT_VARIABLE: endpoint,
        }.items():
            monkeypatch.setenv(name, value)

    return use


@pytest.fixture
def s3(moto_server: MotoServer, use_s3_endpoint: Callable[[str], None]) -> Iterator[Any]:
    """moto's S3 client, with the storage layer pointed at the server for this test."""
    use_s3_endpoint(moto_server.url)
    try:
        yield moto_server.client()
    finally:
        fsspec.filesystem("s3").clear_instance_cache()


@pytest.fixture(scope="module")
def large_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 12 MB of video (noise, losslessly coded) and an audio track: enough for three parts of S3's smallest,
    and two 45-frame segments of over 5 MiB each."""
    path = tmp_path_factory.mktemp("large") / "source.mp4"
    rng = np.random.default_rng(7)
    frames = (rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for _ in range(90))
    spec = VideoSpec(320, 240, Fraction(24), codec_options={"preset": "ultrafast", "qp": "0"}, audio_rate=8000)
    write_video(str(path), spec, frames)
    return path
