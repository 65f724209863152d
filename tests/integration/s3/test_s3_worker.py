"""The worker CLI on S3: real processes, real HTTP failures injected while segments and the output are uploaded, and
the claims and markers as real conditional PUTs.

Lossless passthrough (``processors`` empty, quality 100) makes "no loss" exact: every output frame must equal the
input's. Each test uses its own work root and output key.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from committed import work_uri_for
from readback import frame_digests, packet_payloads
from s3_servers import Fault
from s3_stack import S3Stack, make_clip

from facefusion_provider import storage
from facefusion_provider.exceptions import EXIT_RETRYABLE, EXIT_STORAGE_DENIED
from facefusion_provider.work.claims import SegmentClaims, scan_work
from facefusion_provider.work.layout import WorkLayout, segment_claim_name

LOSSLESS = ["--processors", "--output-video-quality", "100"]
LOSSLESS_OPTIONS: dict[str, Any] = {"processors": [], "output_video_quality": 100}


def failure_report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return dict(json.loads(result.stderr.strip().splitlines()[-1]))


def upload(s3: S3Stack, local: Path, key: str) -> str:
    s3.client().upload_file(str(local), "videos", key)
    return f"s3://videos/{key}"


def prepare(s3: S3Stack, media: Path, root: str, target: str, segment_size: int = 8) -> tuple[str, int]:
    """The work folder of these inputs under ``root``, prepared: ``(work URI, segments)``."""
    face = upload(s3, media / "face.png", "faces/face.png")
    work = work_uri_for(root, [face], target, segment_size=segment_size, **LOSSLESS_OPTIONS)
    args = ["--work-uri", work, "--source", face, "--target", target, "--segment-size", str(segment_size)]
    result = s3.run_worker("prepare", *args, *LOSSLESS)
    assert result.returncode == 0, result.stderr
    return work, int(json.loads(result.stdout.strip().splitlines()[-1])["segments"])


def key_of(work: str) -> str:
    """The work folder's key prefix in its bucket (``work/{root}/work/{id}``)."""
    return work.removeprefix("s3://")


def download(s3: S3Stack, key: str, local: Path) -> Path:
    s3.client().download_file("videos", key, str(local))
    return local


def test_transient_failures_during_segment_upload_and_merge_lose_nothing(
    s3: S3Stack, media: Path, tmp_path: Path
) -> None:
    target = upload(s3, media / "clip0.mp4", "in/flaky.mp4")
    work, segments = prepare(s3, media, "s3://work/flaky", target)
    assert segments == 3
    folder = re.escape(key_of(work))
    faults = [
        Fault("PUT", rf"/{folder}/segments/00000\.\w+\.mp4", 503, times=2),
        Fault("PUT", rf"/{folder}/segments/00001\.\w+\.mp4", "reset"),
        Fault("PUT", rf"/{folder}/segments/00002\.json", "lost"),  # stored, but the worker never hears so
        Fault("PUT", rf"/{folder}/claims/00001\.0001\.json", "lost"),  # the same for a claim
        Fault("GET", rf"/{folder}/segments/00001\.\w+\.mp4", 500),  # merge fetching a segment
        # merge publishing the output: a multipart upload (a part, then the completion)
        Fault("PUT", r"/videos/out/flaky\.mp4\?.*partNumber=1\b", 503),
        Fault("POST", r"/videos/out/flaky\.mp4\?uploadId=", "reset"),
    ]
    s3.proxy.inject(*faults)
    result = s3.run_worker("swap-span", "--work-uri", work, "--target", target, "--segments", "0:3")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["committed"] == 3  # the lost answers were its own
    result = s3.run_worker("merge", "--work-uri", work, "--target", target, "--output", "s3://videos/out/flaky.mp4")
    assert result.returncode == 0, result.stderr
    assert [fault.hits for fault in faults] == [fault.times for fault in faults]  # every failure really happened
    output = download(s3, "out/flaky.mp4", tmp_path / "out.mp4")
    assert [d.md5 for d in frame_digests(str(output))] == [d.md5 for d in frame_digests(str(media / "clip0.mp4"))]
    assert packet_payloads(str(output)) == packet_payloads(str(media / "clip0.mp4"))  # audio, byte for byte
    assert "out/.flaky.mp4.facefusion.json" in s3.keys("videos", "out/")


def test_claims_and_markers_are_conditional_puts_and_a_store_ignoring_them_is_refused(s3: S3Stack, media: Path) -> None:
    target = upload(s3, media / "clip3.mp4", "in/claimed.mp4")
    work, _ = prepare(s3, media, "s3://work/claimed", target)
    s3.proxy.forget_exchanges()
    result = s3.run_worker("swap-span", "--work-uri", work, "--target", target, "--segments", "0:3")
    assert result.returncode == 0, result.stderr
    creates = [e for e in s3.proxy.exchanges() if e.method == "PUT" and e.headers.get("if-none-match") == "*"]
    paths = {e.path.split("?")[0].rsplit("/", 2)[-2] + "/" + e.path.split("?")[0].rsplit("/", 1)[-1] for e in creates}
    assert {f"segments/0000{i}.json" for i in range(3)} | {f"claims/0000{i}.0001.json" for i in range(3)} <= paths

    other, _ = prepare(s3, media, "s3://work/unconditional", target, segment_size=12)
    s3.proxy.ignore_conditional_writes()
    result = s3.run_worker("swap-span", "--work-uri", other, "--target", target, "--segments", "0:2")
    assert result.returncode == EXIT_STORAGE_DENIED, result.stderr
    assert "ignores conditional writes" in failure_report(result)["message"]
    assert not [key for key in s3.keys("work", key_of(other).removeprefix("work/")) if "/segments/" in key]


def test_an_output_that_cannot_be_uploaded_never_appears_partially(s3: S3Stack, media: Path, tmp_path: Path) -> None:
    target = upload(s3, media / "clip1.mp4", "in/stuck.mp4")
    work, segments = prepare(s3, media, "s3://work/stuck", target, segment_size=24)
    span = s3.run_worker("swap-span", "--work-uri", work, "--target", target, "--segments", f"0:{segments}")
    assert span.returncode == 0, span.stderr
    s3.proxy.inject(Fault("PUT", r"/videos/out/stuck\.mp4\?.*partNumber=", 503, times=1000))  # every part
    started = time.monotonic()
    merge = ["merge", "--work-uri", work, "--target", target, "--output", "s3://videos/out/stuck.mp4"]
    result = s3.run_worker(*merge, FACEFUSION_S3_MAX_ATTEMPTS="2")
    assert result.returncode == EXIT_RETRYABLE, result.stderr
    report = failure_report(result)
    assert report["retryable"] is True and "s3://videos/out/stuck.mp4" in report["message"]
    assert time.monotonic() - started < 60
    assert [k for k in s3.keys("videos", "out/") if "stuck" in k] == []  # neither output nor marker nor preview
    assert s3.client().list_multipart_uploads(Bucket="videos", Prefix="out/stuck").get("Uploads", []) == []
    s3.proxy.clear()
    assert s3.run_worker(*merge).returncode == 0
    output = download(s3, "out/stuck.mp4", tmp_path / "stuck.mp4")
    assert len(frame_digests(str(output))) == 24


def test_wrong_credentials_fail_at_once_and_clearly(s3: S3Stack, media: Path) -> None:
    target = upload(s3, media / "clip2.mp4", "in/denied.mp4")
    face = upload(s3, media / "face.png", "faces/face.png")
    s3.proxy.forget_exchanges()
    started = time.monotonic()
    result = s3.run_worker(
        "prepare",
        "--work-uri",
        "s3://work/denied/work/0123456789abcdef01234567",
        "--source",
        face,
        "--target",
        target,
        AWS_SECRET_ACCESS_KEY="not-the-secret",
    )
    assert result.returncode == EXIT_STORAGE_DENIED, result.stderr
    report = failure_report(result)
    assert report["failure_class"] == "storage_denied" and report["retryable"] is False
    assert "bucket 'videos'" in report["message"] and "'in/denied.mp4'" in report["message"]
    assert len(s3.proxy.exchanges()) <= 2  # no retry storm: the first refusal ends it
    assert time.monotonic() - started < 30
    assert "not-the-secret" not in result.stderr + result.stdout


def test_a_span_reads_its_range_of_the_target_not_the_whole_file(
    s3: S3Stack, media: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A keyframe at every segment's start; long enough that the header and the decoder's probe (about 48 KiB of this
    # 64x48 clip) are a small part of it.
    clip = make_clip(tmp_path / "long.mp4", 192, seed=5, gop=8)
    size = clip.stat().st_size
    target = upload(s3, clip, "in/long.mp4")
    work, segments = prepare(s3, media, "s3://work/long", target)
    block = "16384"
    assert segments == 24

    def target_bytes(segment: int, **env: str) -> int:
        s3.proxy.forget_exchanges()
        span = ["swap-span", "--work-uri", work, "--target", target, "--segments", f"{segment}:{segment + 1}"]
        # No helping for the measure: the other segments are claimed by a live holder (this test).
        result = s3.run_worker(*span, **env)
        assert result.returncode == 0, result.stderr
        return sum(e.body_bytes for e in s3.proxy.exchanges() if e.method == "GET" and "/in/long.mp4" in e.path)

    hold_all_but(work, segments, free=23)
    ranged = target_bytes(23, FACEFUSION_S3_READ_BLOCK_BYTES=block)
    assert 0 < ranged < size / 2, (ranged, size)
    cache = str(tmp_path / "cache")
    storage.delete(WorkLayout(work).claim(segment_claim_name(22), 1))
    assert target_bytes(22, FACEFUSION_INPUT_CACHE_DIR=cache) == size  # one download for the node
    storage.delete(WorkLayout(work).claim(segment_claim_name(21), 1))
    assert target_bytes(21, FACEFUSION_INPUT_CACHE_DIR=cache) == 0  # the next segment on the node reads the copy


def hold_all_but(work: str, segments: int, free: int) -> None:
    """Claim every other segment as a live worker would, so the swap-span below works its own segment alone."""
    layout = WorkLayout(work)
    claims = SegmentClaims(layout, owner="this-test", lease=3600)
    state = scan_work(layout)
    for index in range(segments):
        if index != free:
            assert claims.take(index, state)


def _flipped(data: bytes, at: int, count: int = 64) -> bytes:
    """``count`` bytes inverted from ``at`` on: the same size, other content."""
    return data[:at] + bytes(byte ^ 0xFF for byte in data[at : at + count]) + data[at + count :]


def test_damaged_segments_on_s3_are_computed_again_and_the_output_is_frame_exact(
    s3: S3Stack, media: Path, tmp_path: Path
) -> None:
    target = upload(s3, media / "clip0.mp4", "in/damaged.mp4")
    work, segments = prepare(s3, media, "s3://work/damaged", target)
    assert segments == 3
    span = s3.run_worker("swap-span", "--work-uri", work, "--target", target, "--segments", "0:3")
    assert span.returncode == 0, span.stderr
    layout, client = WorkLayout(work), s3.client()
    bucket, prefix = "work", key_of(work).removeprefix("work/")
    markers = [
        json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/segments/0000{i}.json")["Body"].read())
        for i in range(3)
    ]
    for marker in markers:  # each segment went up in one PUT carrying its sha256, which S3 keeps with the object
        head = client.head_object(Bucket=bucket, Key=f"{prefix}/segments/{marker['file']}", ChecksumMode="ENABLED")
        assert base64.b64decode(head["ChecksumSHA256"]).hex() == marker["sha256"]

    def damage(index: int, change: Callable[[bytes], bytes], **put: str) -> None:
        key = f"{prefix}/segments/{markers[index]['file']}"
        data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        client.put_object(Bucket=bucket, Key=key, Body=change(data), **put)

    # Bytes flipped, the object rewritten with a checksum of its own (S3 computes it over the damaged bytes) and
    # without one (only its bytes can tell), and one truncated: the sizes of the first two are unchanged.
    damage(0, lambda data: _flipped(data, len(data) // 2), ChecksumAlgorithm="SHA256")
    damage(1, lambda data: _flipped(data, len(data) // 3))
    damage(2, lambda data: data[: len(data) - 100])
    merge = ["merge", "--work-uri", work, "--target", target, "--output", "s3://videos/out/healed.mp4"]
    result = s3.run_worker(*merge)
    assert result.returncode == 0, result.stderr
    for index, what in enumerate(["its checksum differs", "its checksum differs", r"holds \d+ bytes, its marker"]):
        assert re.search(rf"segment {index} of work \w+ is damaged \(.*0000{index}\.\w+\.mp4: {what}", result.stderr), (
            result.stderr[-3000:]
        )
    output = download(s3, "out/healed.mp4", tmp_path / "healed.mp4")
    assert [d.md5 for d in frame_digests(str(output))] == [d.md5 for d in frame_digests(str(media / "clip0.mp4"))]
    assert json.loads(result.stdout.strip().splitlines()[-1])["method"] == "index"  # S3 copied the healed segments
    state = scan_work(layout)
    assert state.committed == {0, 1, 2} and all(state.incarnation(i) == 1 for i in range(3))
    retired = [key for key in s3.keys(bucket, prefix) if key.endswith(".retired.json")]
    assert sorted(key.rsplit("/", 1)[-1] for key in retired) == [f"0000{i}.0.retired.json" for i in range(3)]

    # Damaged again in the next incarnation, read by a remux this time (a .mov output downloads every segment).
    healed = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/segments/00001.1.json")["Body"].read())
    markers[1] = healed
    damage(1, lambda data: _flipped(data, 40))
    result = s3.run_worker("merge", "--work-uri", work, "--target", target, "--output", "s3://videos/out/healed.mov")
    assert result.returncode == 0, result.stderr
    assert re.search(r"segment 1 of work \w+ is damaged", result.stderr)
    output = download(s3, "out/healed.mov", tmp_path / "healed.mov")
    assert [d.md5 for d in frame_digests(str(output))] == [d.md5 for d in frame_digests(str(media / "clip0.mp4"))]
    assert scan_work(layout).incarnation(1) == 2
