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

import json
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest
import s3fs
from s3_servers import REGION, FaultyProxy, MotoServer
from synth import VideoSpec, pattern_frames, write_video

from facefusion_provider.media.images import encode_image

BUCKETS = ("videos", "work")


@dataclass(frozen=True)
class S3Stack:
    moto: MotoServer
    proxy: FaultyProxy
    access_key: str
    secret_key: str
    outsider_key: str
    outsider_secret: str

    @property
    def endpoint(self) -> str:
        return self.proxy.url

    def client(self) -> Any:
        return self.moto.client(self.access_key, self.secret_key, endpoint=self.moto.url)

    def environment(self) -> dict[str, str]:
        """What a worker process needs to reach this S3 as user ``facefusion``."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": REGION,
            "FACEFUSION_S3_ENDPOINT_URL": self.endpoint,
        }

    def connection(self) -> str:
        """An Airflow AWS connection (JSON) for the same user, with the endpoint in its extra."""
        return json.dumps(
            {
                "conn_type": "aws",
                "login": self.access_key,
                "password": self.secret_key,
                "extra": {"endpoint_url": self.endpoint, "region_name": REGION},
            }
        )

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


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


def make_clip(path: Path, frames: int = 24, *, seed: int = 0, audio: bool = False, gop: int = 250) -> Path:
    """A tiny H.264 clip (64x48, 25 fps) whose frames all differ, with a keyframe every ``gop`` frames."""
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = VideoSpec(
        width=64,
        height=48,
        frame_rate=Fraction(25),
        audio_rate=8000 if audio else None,
        codec_options={"preset": "ultrafast", "crf": "18", "g": str(gop)},
    )
    write_video(str(path), spec, pattern_frames(frames, 64, 48, seed))
    return path


def make_face(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_image(next(pattern_frames(1, 32, 32, 7)), codec="png"))
    return path


@pytest.fixture(scope="session")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three distinct clips, one with audio, a source face, and an upload that is not a video."""
    folder = tmp_path_factory.mktemp("s3_media")
    for index in range(4):
        make_clip(folder / f"clip{index}.mp4", seed=index, audio=index == 0)
    make_face(folder / "face.png")
    (folder / "corrupt.mp4").write_bytes(b"this upload is not a video\n" * 40)
    return folder
