"""The worker CLI on S3: real processes, real HTTP failures injected while chunks and the output are uploaded.

Lossless passthrough (``processors`` empty, quality 100) makes "no loss" exact: every output frame must equal the
input's. Each test uses its own job folder and output key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import S3Stack, make_clip
from s3_servers import Fault

from facefusion_provider.exceptions import EXIT_RETRYABLE, EXIT_STORAGE_DENIED
from facefusion_provider.media.readback import frame_digests, packet_payloads

WORKER = [sys.executable, "-m", "facefusion_provider.worker"]
LOSSLESS = ["--processors", "--output-video-quality", "100"]


def worker(s3: S3Stack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WORKER, *args],
        env={**os.environ, **s3.environment(), **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def failure_report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return dict(json.loads(result.stderr.strip().splitlines()[-1]))


def upload(s3: S3Stack, local: Path, key: str) -> str:
    s3.client().upload_file(str(local), "videos", key)
    return f"s3://videos/{key}"


def prepare(s3: S3Stack, media: Path, job: str, target: str, output: str, chunk_size: int = 8) -> list[dict[str, int]]:
    face = upload(s3, media / "face.png", "faces/face.png")
    args = ["--job-uri", job, "--source", face, "--target", target, "--output", output, "--chunk-size", str(chunk_size)]
    result = worker(s3, "prepare", *args, *LOSSLESS)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout.strip().splitlines()[-1])["chunks"])


def download(s3: S3Stack, key: str, local: Path) -> Path:
    s3.client().download_file("videos", key, str(local))
    return local


def test_transient_failures_during_chunk_upload_and_merge_lose_nothing(
    s3: S3Stack, media: Path, tmp_path: Path
) -> None:
    target = upload(s3, media / "clip0.mp4", "in/flaky.mp4")
    job = "s3://work/jobs/flaky"
    chunks = prepare(s3, media, job, target, "s3://videos/out/flaky.mp4")
    assert len(chunks) == 3
    faults = [
        Fault("PUT", r"/work/jobs/flaky/chunks/00000\.mp4", 503, times=2),
        Fault("PUT", r"/work/jobs/flaky/chunks/00001\.mp4", "reset"),
        Fault("PUT", r"/work/jobs/flaky/chunks/00002\.json", "lost"),  # stored, but the worker never hears so
        Fault("GET", r"/work/jobs/flaky/chunks/00001\.mp4", 500),  # merge fetching a chunk
        # merge publishing the output: a multipart upload (a part, then the completion)
        Fault("PUT", r"/videos/out/flaky\.mp4\?.*partNumber=1\b", 503),
        Fault("POST", r"/videos/out/flaky\.mp4\?uploadId=", "reset"),
    ]
    s3.proxy.inject(*faults)
    for chunk in chunks:
        result = worker(s3, "swap-chunk", "--job-uri", job, "--index", str(chunk["index"]))
        assert result.returncode == 0, result.stderr
    result = worker(s3, "merge", "--job-uri", job)
    assert result.returncode == 0, result.stderr
    assert [fault.hits for fault in faults] == [fault.times for fault in faults]  # every failure really happened
    output = download(s3, "out/flaky.mp4", tmp_path / "out.mp4")
    assert [d.md5 for d in frame_digests(str(output))] == [d.md5 for d in frame_digests(str(media / "clip0.mp4"))]
    assert packet_payloads(str(output)) == packet_payloads(str(media / "clip0.mp4"))  # audio, byte for byte
    assert "out/.flaky.mp4.facefusion.json" in s3.keys("videos", "out/")


def test_an_output_that_cannot_be_uploaded_never_appears_partially(s3: S3Stack, media: Path, tmp_path: Path) -> None:
    target = upload(s3, media / "clip1.mp4", "in/stuck.mp4")
    job = "s3://work/jobs/stuck"
    for chunk in prepare(s3, media, job, target, "s3://videos/out/stuck.mp4", chunk_size=24):
        assert worker(s3, "swap-chunk", "--job-uri", job, "--index", str(chunk["index"])).returncode == 0
    s3.proxy.inject(Fault("PUT", r"/videos/out/stuck\.mp4\?.*partNumber=", 503, times=1000))  # every part
    started = time.monotonic()
    result = worker(s3, "merge", "--job-uri", job, FACEFUSION_S3_MAX_ATTEMPTS="2")
    assert result.returncode == EXIT_RETRYABLE, result.stderr
    report = failure_report(result)
    assert report["retryable"] is True and "s3://videos/out/stuck.mp4" in report["message"]
    assert time.monotonic() - started < 60
    assert [k for k in s3.keys("videos", "out/") if "stuck" in k] == []  # neither output nor marker nor preview
    assert s3.client().list_multipart_uploads(Bucket="videos", Prefix="out/stuck").get("Uploads", []) == []
    s3.proxy.clear()
    assert worker(s3, "merge", "--job-uri", job).returncode == 0
    output = download(s3, "out/stuck.mp4", tmp_path / "stuck.mp4")
    assert len(frame_digests(str(output))) == 24


def test_wrong_credentials_fail_at_once_and_clearly(s3: S3Stack, media: Path) -> None:
    target = upload(s3, media / "clip2.mp4", "in/denied.mp4")
    face = upload(s3, media / "face.png", "faces/face.png")
    s3.proxy.forget_exchanges()
    started = time.monotonic()
    result = worker(
        s3,
        "prepare",
        "--job-uri",
        "s3://work/jobs/denied",
        "--source",
        face,
        "--target",
        target,
        "--output",
        "s3://videos/out/denied.mp4",
        AWS_SECRET_ACCESS_KEY="not-the-secret",
    )
    assert result.returncode == EXIT_STORAGE_DENIED, result.stderr
    report = failure_report(result)
    assert report["failure_class"] == "storage_denied" and report["retryable"] is False
    assert "bucket 'videos'" in report["message"] and "'in/denied.mp4'" in report["message"]
    assert len(s3.proxy.exchanges()) <= 2  # no retry storm: the first refusal ends it
    assert time.monotonic() - started < 30
    assert "not-the-secret" not in result.stderr + result.stdout


def test_a_chunk_reads_its_range_of_the_target_not_the_whole_file(
    s3: S3Stack, media: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = make_clip(tmp_path / "long.mp4", 96, seed=5, gop=8)  # a keyframe at every chunk's start
    size = clip.stat().st_size
    target = upload(s3, clip, "in/long.mp4")
    job = "s3://work/jobs/long"
    block = "16384"
    chunks = prepare(s3, media, job, target, "s3://videos/out/long.mp4")
    assert len(chunks) == 12

    def target_bytes(index: int, **env: str) -> int:
        s3.proxy.forget_exchanges()
        result = worker(s3, "swap-chunk", "--job-uri", job, "--index", str(index), **env)
        assert result.returncode == 0, result.stderr
        return sum(e.body_bytes for e in s3.proxy.exchanges() if e.method == "GET" and "/in/long.mp4" in e.path)

    ranged = target_bytes(11, FACEFUSION_S3_READ_BLOCK_BYTES=block)
    assert 0 < ranged < size / 2, (ranged, size)
    cache = str(tmp_path / "cache")
    assert target_bytes(10, FACEFUSION_INPUT_CACHE_DIR=cache) == size  # one download for the node
    assert target_bytes(9, FACEFUSION_INPUT_CACHE_DIR=cache) == 0  # the next chunk on the node reads the copy
