"""S3 end to end: one moto server (its own process, IAM authentication on) and a fault-injecting proxy per session.

Every test talks to the proxy, never to moto directly, so each can count its requests and inject real HTTP failures.
Two IAM users: ``facefusion`` may do anything on S3; ``outsider`` may do nothing (access denied).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))
# The Airflow harness of tests/integration/airflow (standalone server, REST helpers) is reused here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "airflow"))

from collections.abc import Iterator

import pytest
import s3fs
from s3_servers import FaultyProxy, MotoServer
from s3_stack import S3Stack, make_clip, make_face

BUCKETS = ("videos", "work")


@pytest.fixture(scope="session")
def s3_stack() -> Iterator[S3Stack]:
    moto = MotoServer()
    proxy = FaultyProxy(moto.port)
    try:
        access_key, secret_key = moto.create_user_with_s3_access("facefusion")
        outsider_key, outsider_secret = moto.create_user_without_access("outsider")
        client = moto.client(access_key, secret_key)
        for bucket in BUCKETS:
            client.create_bucket(Bucket=bucket)
        moto.require_authentication()
        yield S3Stack(moto, proxy, access_key, secret_key, outsider_key, outsider_secret)
    finally:
        proxy.stop()
        moto.stop()


@pytest.fixture
def s3(s3_stack: S3Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Stack]:
    """The stack, with this process's environment pointing at it; faults and counts start afresh in every test."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "FACEFUSION_", "AIRFLOW__FACEFUSION__", "AIRFLOW_CONN_")):
            monkeypatch.delenv(name)
    for name, value in s3_stack.environment().items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    s3_stack.proxy.clear()
    yield s3_stack
    s3_stack.proxy.clear()
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="session")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three distinct clips, one with audio, a source face, and an upload that is not a video."""
    folder = tmp_path_factory.mktemp("s3_media")
    for index in range(4):
        make_clip(folder / f"clip{index}.mp4", seed=index, audio=index == 0)
    make_face(folder / "face.png")
    (folder / "corrupt.mp4").write_bytes(b"this upload is not a video\n" * 40)
    return folder
