"""The S3 stack of tests/integration/s3 (a moto server behind a fault-injecting proxy, two IAM users) and the tiny
clips its tests upload. The fixtures that start it live in tests/integration/s3/conftest.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

_S3 = Path(__file__).resolve().parents[1] / "integration" / "s3"
if str(_S3) not in sys.path:  # the moto server and the proxy live beside their tests
    sys.path.insert(0, str(_S3))

from s3_servers import REGION, FaultyProxy, MotoServer  # noqa: E402
from synth import VideoSpec, pattern_frames, write_video  # noqa: E402

from facefusion_provider.media.images import encode_image  # noqa: E402

WORKER = [sys.executable, "-m", "facefusion_provider.worker"]


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
        return str(self.proxy.url)  # s3_servers sits outside mypy_path: its types read as Any here

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

    def run_worker(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """``facefusion-worker *args`` in its own process on this S3 (``env`` added), its output captured."""
        return subprocess.run(
            [*WORKER, *args],
            env={**os.environ, **self.environment(), **env},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

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
