"""Storage on the local filesystem and in memory: URI rules, allow-lists, atomic writes, write probes, content ids."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidOptionError, StorageDeniedError


def test_plain_paths_become_absolute_file_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert storage.normalize_uri("in/a.mp4") == (tmp_path / "in" / "a.mp4").as_uri()
    assert storage.normalize_uri("file:///data/x.mp4") == "file:///data/x.mp4"
    assert storage.normalize_uri("s3://bucket/key.mp4") == "s3://bucket/key.mp4"
    assert storage.local_path((tmp_path / "a b.mp4").as_uri()) == str(tmp_path / "a b.mp4")
    assert storage.local_path("s3://bucket/key") is None


def test_file_uris_with_spaces_and_special_characters(tmp_path: Path) -> None:
    path = tmp_path / "take #1 (ü).mp4"
    path.write_bytes(b"data")
    uri = storage.normalize_uri(str(path))
    assert "%20" in uri and storage.normalize_uri(uri) == uri  # encoded once, and normalising again changes nothing
    assert storage.local_path(uri) == str(path)
    assert storage.exists(uri) and storage.read_bytes(uri) == b"data"
    assert storage.content_id(uri) == storage.content_id(str(path))


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "target: expected a path or URI"),
        ("http://example.com/a.mp4", "target: scheme 'http' is not supported"),
        ("s3:///key.mp4", "target: 's3:///key.mp4' names no bucket"),
        ("s3://bucket/../etc/passwd", "target: '..' is not allowed"),
        ("file:///data/out/../../x.mp4", "target: '..' is not allowed"),
        ("/data/out/../x.mp4", "target: '..' is not allowed"),
        ("file://otherhost/x.mp4", "target: 'file://otherhost/x.mp4' names host 'otherhost'"),
        ("a\nb.mp4", "target: control characters"),
    ],
)
def test_bad_uris_name_the_field(uri: str, message: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        storage.normalize_uri(uri, field="target")
    assert message in str(caught.value)


def test_atomic_writes_leave_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "deep" / "work.json"
    storage.write_json_atomic(target.as_uri(), {"a": 1})
    assert storage.read_json(target.as_uri()) == {"a": 1}

    def broken_replace(source: str, destination: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        storage.write_bytes_atomic(target.as_uri(), b"new")
    with pytest.raises(OSError, match="disk full"):
        storage.put_file_atomic(target, (tmp_path / "copy.json").as_uri())
    monkeypatch.undo()
    assert storage.read_json(target.as_uri()) == {"a": 1}
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["work.json"]
    assert not (tmp_path / "copy.json").exists()


def test_put_and_get_file(tmp_path: Path) -> None:
    local = tmp_path / "chunk.mp4"
    local.write_bytes(b"\x00\x01" * 1000)
    storage.put_file_atomic(local, (tmp_path / "jobs" / "c.mp4").as_uri())
    assert (tmp_path / "jobs" / "c.mp4").read_bytes() == local.read_bytes()
    storage.put_file_atomic(local, "memory://bucket/c.mp4")
    storage.get_file("memory://bucket/c.mp4", tmp_path / "back.mp4")
    assert (tmp_path / "back.mp4").read_bytes() == local.read_bytes()
    assert storage.exists("memory://bucket/c.mp4")
    storage.remove_tree("memory://bucket")
    assert not storage.exists("memory://bucket/c.mp4")


def test_missing_inputs_are_input_missing_errors(tmp_path: Path) -> None:
    missing = (tmp_path / "none.mp4").as_uri()
    with pytest.raises(InputMissingError, match=r"none\.mp4"):
        storage.read_bytes(missing)
    with pytest.raises(InputMissingError, match=r"none\.mp4"):
        storage.content_id(missing)
    with pytest.raises(InputMissingError, match=r"none\.mp4"), storage.open_input(missing):
        pass
    with pytest.raises(InputMissingError, match=r"none\.mp4"):
        storage.get_file("memory://bucket/none.mp4", tmp_path / "x")


def test_open_input_gives_a_path_locally_and_a_seekable_file_remotely(tmp_path: Path) -> None:
    local = tmp_path / "v.mp4"
    local.write_bytes(b"0123456789")
    with storage.open_input(local.as_uri()) as opened:
        assert opened == str(local)
    storage.write_bytes_atomic("memory://in/v.mp4", b"0123456789")
    with storage.open_input("memory://in/v.mp4") as handle:
        assert not isinstance(handle, str)
        handle.seek(5)
        assert handle.read(3) == b"567"


def test_content_id_is_the_content_not_the_name(tmp_path: Path) -> None:
    a, b = tmp_path / "a.mp4", tmp_path / "b.mp4"
    a.write_bytes(b"video one")
    b.write_bytes(b"video one")
    assert storage.content_id(a.as_uri()) == storage.content_id(b.as_uri())
    b.write_bytes(b"video two")
    assert storage.content_id(a.as_uri()) != storage.content_id(b.as_uri())


def test_atomically_written_files_get_the_usual_permissions(tmp_path: Path) -> None:
    storage.write_bytes_atomic((tmp_path / "preview.jpg").as_uri(), b"jpeg")
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")  # what open() gives under this process's umask
    assert (tmp_path / "preview.jpg").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777


def test_relative_paths_are_refused_where_no_working_directory_is_shared(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match=r"target_uri: 'in/a.mp4' is a relative path; give an absolute path"):
        storage.normalize_uri("in/a.mp4", field="target_uri", relative=False)
    assert storage.normalize_uri(str(tmp_path / "a.mp4"), relative=False) == (tmp_path / "a.mp4").as_uri()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://bucket/", "output_uri: 's3://bucket/' names a bucket, not a file; add the key"),
        ("s3://bucket", "output_uri: 's3://bucket' names a bucket, not a file"),
        ("s3://bucket/folder/", "output_uri: 's3://bucket/folder/' names a folder, not a file"),
        ("file:///data/out/", "output_uri: 'file:///data/out/' names a folder, not a file"),
    ],
)
def test_a_bucket_or_folder_is_not_a_file(uri: str, message: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        storage.require_file_uri(uri, field="output_uri")
    assert message in str(caught.value)


def test_allow_lists_confine_uris_to_their_prefixes(tmp_path: Path) -> None:
    prefixes = storage.parse_prefixes(f"s3://in/videos, {tmp_path / 'in'}", field="allowed_input_prefixes")
    assert prefixes == ("s3://in/videos/", (tmp_path / "in").as_uri() + "/")
    storage.check_allowed("s3://in/videos/a.mp4", prefixes, field="target_uri", kind="input")
    storage.check_allowed((tmp_path / "in" / "a.mp4").as_uri(), prefixes, field="target_uri", kind="input")
    storage.check_allowed("s3://anywhere/a.mp4", (), field="target_uri", kind="input")  # no list: anywhere
    for outside in ("s3://in/videos-other/a.mp4", "s3://in/a.mp4", (tmp_path / "inside.mp4").as_uri()):
        with pytest.raises(InvalidOptionError, match=r"target_uri: .* is outside the allowed input locations"):
            storage.check_allowed(outside, prefixes, field="target_uri", kind="input")


def test_a_write_probe_finds_unwritable_outputs_and_leaves_nothing(tmp_path: Path) -> None:
    storage.check_writable((tmp_path / "new" / "deeper" / "out.mp4").as_uri(), field="output_uri")
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the folders
    (tmp_path / "folder.mp4").mkdir()
    with pytest.raises(InvalidOptionError, match=r"output_uri: .* is a folder, not a file"):
        storage.check_writable((tmp_path / "folder.mp4").as_uri(), field="output_uri")
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(StorageDeniedError, match=r"output_uri: cannot write .*: .* is a file, not a folder"):
        storage.check_writable((tmp_path / "file" / "out.mp4").as_uri(), field="output_uri")
    with pytest.raises(StorageDeniedError, match=r"output_uri: cannot write file:///proc/x.mp4"):
        storage.check_writable("file:///proc/x.mp4", field="output_uri")
    storage.check_writable("memory://bucket/out/x.mp4", field="output_uri")
    assert not storage.list_files("memory://bucket/out")
