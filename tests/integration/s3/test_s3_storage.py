"""``storage`` against a real S3 endpoint: error mapping, bounded retries of real HTTP failures, ranged and cached
reads, exclusive writes and listings. Every request goes through the proxy, which counts it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import s3fs
from s3_servers import Fault
from s3_stack import S3Stack

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, RetryableError, StorageDeniedError
from facefusion_provider.hooks.job_ledger import IngestLedgerHook


def test_objects_round_trip(s3: S3Stack, tmp_path: Path) -> None:
    storage.write_json_atomic("s3://work/t/round/work.json", {"a": 1})
    assert storage.read_json("s3://work/t/round/work.json") == {"a": 1}
    local = tmp_path / "blob.bin"
    local.write_bytes(os.urandom(3000))
    storage.put_file_atomic(local, "s3://work/t/round/blob.bin")
    storage.get_file("s3://work/t/round/blob.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == local.read_bytes()
    assert storage.exists("s3://work/t/round/blob.bin") and not storage.exists("s3://work/t/round/nothing.bin")
    assert storage.content_id("s3://work/t/round/blob.bin").startswith("etag:")
    assert [o.uri for o in storage.list_files("s3://work/t/round/")] == [
        "s3://work/t/round/blob.bin",
        "s3://work/t/round/work.json",
    ]
    storage.remove_tree("s3://work/t/round")
    assert storage.list_files("s3://work/t/round/") == []


def test_a_missing_key_is_missing_input(s3: S3Stack) -> None:
    with pytest.raises(InputMissingError, match=r"s3://videos/nothing\.mp4: no such file"):
        storage.read_bytes("s3://videos/nothing.mp4")


@pytest.mark.parametrize(
    ("operation", "uri"),
    [
        ("read", "s3://no-such-bucket/in/a.mp4"),
        ("write", "s3://no-such-bucket/out/a.mp4"),
        ("content_id", "s3://no-such-bucket/in/a.mp4"),
        ("list", "s3://no-such-bucket/in/"),
    ],
)
def test_a_missing_bucket_is_a_clear_non_retryable_failure(s3: S3Stack, operation: str, uri: str) -> None:
    calls = {
        "read": lambda: storage.read_bytes(uri),
        "write": lambda: storage.write_bytes_atomic(uri, b"x"),
        "content_id": lambda: storage.content_id(uri),
        "list": lambda: storage.list_files(uri),
    }
    with pytest.raises(StorageDeniedError, match="bucket 'no-such-bucket' does not exist") as raised:
        calls[operation]()
    assert raised.value.retryable is False
    assert uri.split("/", 3)[3] in str(raised.value)  # the key is named too
    assert len(s3.proxy.exchanges()) <= 3  # looked up, never retried


@pytest.mark.parametrize(
    ("credentials", "code"),
    [
        ("outsider", "AccessDenied"),
        ("wrong_secret", "SignatureDoesNotMatch"),
        ("unknown_key", "InvalidAccessKeyId"),
    ],
)
def test_denied_requests_fail_at_once_naming_bucket_and_key(
    s3: S3Stack, monkeypatch: pytest.MonkeyPatch, credentials: str, code: str
) -> None:
    key, secret = {
        "outsider": (s3.outsider_key, s3.outsider_secret),
        "wrong_secret": (s3.access_key, "not-the-secret"),
        "unknown_key": ("AKIAUNKNOWNKEY000000", s3.secret_key),
    }[credentials]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    s3fs.S3FileSystem.clear_instance_cache()
    started = time.monotonic()
    with pytest.raises(StorageDeniedError) as raised:
        storage.write_bytes_atomic("s3://work/t/denied/marker.json", b"{}")
    message = str(raised.value)
    assert "bucket 'work'" in message and "key 't/denied/marker.json'" in message and code in message
    assert [e.status for e in s3.proxy.exchanges()] == [403]  # one request: no retry storm
    assert time.monotonic() - started < 5
    with pytest.raises(StorageDeniedError, match="access denied to bucket 'videos'"):
        storage.exists("s3://videos/in/a.mp4")  # a HEAD answers 403 without a code: still denied, not "missing"


def test_transient_failures_are_retried_without_loss(s3: S3Stack) -> None:
    s3.proxy.inject(
        Fault("PUT", r"/work/t/flaky/data\.bin", 503, times=2),
        Fault("PUT", r"/work/t/flaky/data\.bin", "reset"),
        Fault("GET", r"/work/t/flaky/data\.bin", 500),
        Fault("GET", r"/work/t/flaky/data\.bin", "reset"),
    )
    payload = os.urandom(100_000)
    storage.write_bytes_atomic("s3://work/t/flaky/data.bin", payload)
    assert storage.read_bytes("s3://work/t/flaky/data.bin") == payload
    statuses = [(e.method, e.status) for e in s3.proxy.exchanges() if "data.bin" in e.path]
    assert statuses == [
        ("PUT", 503),
        ("PUT", 503),
        ("PUT", "reset"),
        ("PUT", 200),
        ("HEAD", 200),
        ("GET", 500),
        ("GET", "reset"),
        ("GET", 200),
    ]


def test_persistent_failures_stop_after_a_bounded_number_of_attempts(
    s3: S3Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FACEFUSION_S3_MAX_ATTEMPTS", "2")
    s3fs.S3FileSystem.clear_instance_cache()
    s3.proxy.inject(Fault("PUT", r"/work/t/down/", 503, times=1000))
    with pytest.raises(
        RetryableError, match=r"s3://work/t/down/out\.mp4: storage still failing after retries"
    ) as raised:
        storage.write_bytes_atomic("s3://work/t/down/out.mp4", b"video")
    assert raised.value.retryable
    assert len(s3.proxy.exchanges()) == 4  # 2 attempts by botocore, in each of s3fs's 2 rounds
    assert "t/down/out.mp4" not in s3.keys("work", "t/down/")


def test_exclusive_writes_let_exactly_one_writer_win(s3: S3Stack) -> None:
    uri = "s3://work/t/claims/video.json"
    assert storage.write_bytes_exclusive(uri, b"first")
    assert not storage.write_bytes_exclusive(uri, b"second")
    assert storage.read_bytes(uri) == b"first"
    assert [e.status for e in s3.proxy.exchanges() if e.method == "PUT"] == [200, 412]


def test_an_exclusive_write_asks_again_after_a_conflict_and_reads_a_bare_412_as_taken(s3: S3Stack) -> None:
    uri = "s3://work/t/claims/conflict.json"
    s3.proxy.inject(Fault("PUT", r"/conflict\.json", 409))  # another conditional write to the key was in flight
    assert storage.write_bytes_exclusive(uri, b"first")
    assert [(e.status, e.injected) for e in s3.proxy.exchanges() if e.method == "PUT"] == [(409, True), (200, False)]
    s3.proxy.inject(Fault("PUT", r"/conflict\.json", 412))  # a store whose 412 names no condition
    assert not storage.write_bytes_exclusive(uri, b"second")
    assert storage.read_bytes(uri) == b"first"


def test_a_claim_whose_answer_was_lost_is_still_this_runs(s3: S3Stack, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from facefusion_provider import ingest

    claim = ingest.JobAttempt(
        job_id="a" * 24,
        label="s3://videos/in/a.mp4",
        conf={"target_uri": "s3://videos/in/a.mp4", "output_uri": "s3://videos/out/a.mp4"},
        attempt=1,
        run_id=ingest.swap_run_id("a" * 24, 1),
        claimed_at=datetime.now(UTC),
        claimed_by="ingest/run-1",
    )
    hook = IngestLedgerHook()
    s3.proxy.inject(Fault("PUT", r"/attempt-001\.json", "lost"))  # S3 stores it; the answer never arrives
    assert hook.claim("s3://work/t/ledger/", claim)
    assert [(e.status, e.injected) for e in s3.proxy.exchanges() if e.method == "PUT"] == [(200, True), (412, False)]
    other = claim.model_copy(update={"claimed_by": "ingest/run-2"})
    assert not hook.claim("s3://work/t/ledger/", other)


def test_ranged_reads_fetch_only_the_blocks_read(s3: S3Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACEFUSION_S3_READ_BLOCK_BYTES", str(64 * 1024))
    payload = os.urandom(2 * 1024 * 1024)
    s3.client().put_object(Bucket="videos", Key="t/big.bin", Body=payload)
    s3.proxy.forget_exchanges()
    with storage.open_input("s3://videos/t/big.bin") as handle:
        assert not isinstance(handle, str)
        handle.seek(1_500_000)
        assert handle.read(1000) == payload[1_500_000:1_501_000]
        handle.seek(10)
        assert handle.read(10) == payload[10:20]
    fetched = sum(e.body_bytes for e in s3.proxy.exchanges() if e.method == "GET")
    assert fetched <= 4 * 64 * 1024  # two blocks and read-ahead, not 2 MiB
    assert all(e.request_range for e in s3.proxy.exchanges() if e.method == "GET")


def test_the_node_cache_downloads_once_per_etag(s3: S3Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACEFUSION_INPUT_CACHE_DIR", str(tmp_path / "cache"))
    s3.client().put_object(Bucket="videos", Key="t/cached.mp4", Body=b"version one")
    with storage.open_input("s3://videos/t/cached.mp4") as first:
        assert isinstance(first, str) and Path(first).read_bytes() == b"version one"
    with storage.open_input("s3://videos/t/cached.mp4") as second:
        assert second == first
    gets = [e for e in s3.proxy.exchanges() if e.method == "GET" and "cached.mp4" in e.path]
    assert len(gets) == 1  # the second open only asked for the ETag
    s3.client().put_object(Bucket="videos", Key="t/cached.mp4", Body=b"version two!")
    with storage.open_input("s3://videos/t/cached.mp4") as third:
        assert isinstance(third, str) and third != first and Path(third).read_bytes() == b"version two!"


def test_spans_side_by_side_on_a_node_share_one_download(
    s3: S3Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FACEFUSION_INPUT_CACHE_DIR", str(tmp_path / "cache"))
    payload = os.urandom(300_000)
    s3.client().put_object(Bucket="videos", Key="t/shared.mp4", Body=payload)
    s3.proxy.inject(Fault("GET", r"/videos/t/shared\.mp4", 503))  # a slow first download: the others must wait
    paths: list[str] = []

    def open_once() -> None:
        paths.append(storage.cached_input("s3://videos/t/shared.mp4", str(tmp_path / "cache")))

    threads = [threading.Thread(target=open_once) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(paths)) == 1 and Path(paths[0]).read_bytes() == payload
    gets = [e.status for e in s3.proxy.exchanges() if e.method == "GET" and "shared.mp4" in e.path]
    assert gets == [503, 206] or gets == [503, 200]  # one download (retried once), not three


def test_the_node_cache_evicts_the_least_recently_used_copy(
    s3: S3Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("FACEFUSION_INPUT_CACHE_MAX_BYTES", "2500")
    for name in ("old", "used", "new"):
        s3.client().put_object(Bucket="videos", Key=f"t/{name}.mp4", Body=name.encode() * 300)
    old = storage.cached_input("s3://videos/t/old.mp4", str(cache))
    used = storage.cached_input("s3://videos/t/used.mp4", str(cache))
    os.utime(used, (1, 1))  # the older copy of the two...
    os.utime(old, (2, 2))
    assert storage.cached_input("s3://videos/t/used.mp4", str(cache)) == used  # ...until a hit makes it recent
    new = storage.cached_input("s3://videos/t/new.mp4", str(cache))
    assert not Path(old).exists() and Path(used).exists() and Path(new).exists()
