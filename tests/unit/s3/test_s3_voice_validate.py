"""``validate`` of S3 voices on a real S3 endpoint (moto's server behind a proxy that records every request): each
voice's first bytes come in one ranged GET of 64 bytes through the storage hook, never the whole file; a voice that is
not the format its name says, or an empty one, is refused naming ``source_uris[i]`` and what its bytes are."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from s3_servers import FaultyProxy, MotoServer
from voices import write_voice

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.params import swap_params
from facefusion_provider.operators.validate import StorageChecks, validate_conf
from facefusion_provider.work.audio_signatures import HEAD_BYTES

VOICE_SECONDS = 20.0  # a WAV of about 1.9 MB: what a whole read would fetch


@pytest.fixture(scope="module")
def proxy(moto_server: MotoServer) -> Iterator[FaultyProxy]:
    proxy = FaultyProxy(moto_server.port)
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def s3(
    proxy: FaultyProxy, moto_server: MotoServer, use_s3_endpoint: Callable[[str], None], tmp_path: Path
) -> Iterator[FaultyProxy]:
    """The storage layer pointed at the proxy; a face, a target and a long voice uploaded to ``videos/in/``."""
    use_s3_endpoint(proxy.url)
    fsspec.filesystem("s3").clear_instance_cache()
    client = moto_server.client()
    for key, body in {"face.png": b"face", "in.mp4": b"video"}.items():
        client.put_object(Bucket="videos", Key=f"in/{key}", Body=body)
    client.upload_file(str(write_voice(tmp_path / "voice.wav", 1.0, VOICE_SECONDS - 1.0)), "videos", "in/voice.wav")
    proxy.forget_exchanges()
    try:
        yield proxy
    finally:
        fsspec.filesystem("s3").clear_instance_cache()


def _validate(voice: str) -> dict[str, Any]:
    hook = FaceFusionStorageHook()
    conf = {
        "source_uris": ["s3://videos/in/face.png", f"s3://videos/in/{voice}"],
        "target_uri": "s3://videos/in/in.mp4",
        "output_uri": "s3://videos/out/spoken.mp4",
        "processors": ["face_swapper", "lip_syncer"],
    }
    defaults = {name: param.value for name, param in swap_params().items()}
    checks = StorageChecks(
        content_id=hook.content_id,
        check_writable=lambda uri: hook.check_writable(uri, field="output_uri"),
        read_range=hook.read_range,
    )
    return validate_conf({**defaults, **conf}, conf, work_root="s3://work/root", checks=checks)


def _gets(proxy: FaultyProxy, key: str) -> list[tuple[int | str, str | None, int]]:
    """(status, Range header, bytes answered) of every GET of ``videos/key``."""
    path = re.compile(rf"^/videos/{re.escape(key)}(\?|$)")
    return [
        (e.status, e.request_range, e.body_bytes)
        for e in proxy.exchanges()
        if e.method == "GET" and path.search(e.path)
    ]


def test_a_long_voice_is_checked_by_one_ranged_read_of_its_first_bytes(s3: FaultyProxy) -> None:
    ticket = _validate("voice.wav")
    assert ticket["source_uris"][1] == "s3://videos/in/voice.wav"
    assert _gets(s3, "in/voice.wav") == [(206, f"bytes=0-{HEAD_BYTES - 1}", HEAD_BYTES)]


def test_an_s3_voice_of_another_format_is_refused_naming_its_field(s3: FaultyProxy, moto_server: MotoServer) -> None:
    client = moto_server.client()
    client.copy_object(Bucket="videos", Key="in/voice.opus", CopySource={"Bucket": "videos", "Key": "in/voice.wav"})
    with pytest.raises(InvalidMediaError, match=r"^source_uris\[1\]: s3://videos/in/voice\.opus is not the Ogg file "):
        _validate("voice.opus")
    assert [get[1] for get in _gets(s3, "in/voice.opus")] == [f"bytes=0-{HEAD_BYTES - 1}"]


def test_an_empty_s3_voice_is_refused_as_empty(s3: FaultyProxy, moto_server: MotoServer) -> None:
    moto_server.client().put_object(Bucket="videos", Key="in/voice.mp3", Body=b"")
    with pytest.raises(
        InvalidMediaError, match=r"^source_uris\[1\]: s3://videos/in/voice\.mp3 .* holds an empty file;"
    ):
        _validate("voice.mp3")


def test_an_s3_voice_cut_inside_its_id3_tag_is_refused_as_truncated(s3: FaultyProxy, moto_server: MotoServer) -> None:
    tag = b"ID3\x04\x00\x00\x00\x00\x08\x00"  # an ID3v2.4 tag that says 1024 bytes follow its header; none do
    moto_server.client().put_object(Bucket="videos", Key="in/voice.flac", Body=tag)
    with pytest.raises(InvalidMediaError, match=r" holds nothing after 1034 bytes of ID3v2 tags \(a truncated file\);"):
        _validate("voice.flac")
    assert [get[1] for get in _gets(s3, "in/voice.flac")] == [
        f"bytes=0-{HEAD_BYTES - 1}",
        f"bytes=1034-{1034 + HEAD_BYTES - 1}",
    ]
