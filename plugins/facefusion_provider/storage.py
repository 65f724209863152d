"""Every URI the project touches goes through here: fsspec filesystems, atomic commits and the job folder layout.

Plain paths and ``file://`` URIs are the embedded default; ``s3://`` is production. No Airflow, no numpy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import fsspec
from fsspec.spec import AbstractFileSystem

from facefusion_provider.exceptions import InputMissingError, InvalidOptionError
from facefusion_provider.options import Options
from facefusion_provider.types import JOB_FORMAT_VERSION

ALLOWED_SCHEMES = frozenset({"file", "s3", "memory"})
_HASH_BLOCK = 8 * 1024 * 1024


def normalize_uri(uri: str, *, field: str = "uri") -> str:
    """A plain path becomes an absolute ``file://`` URI; other schemes are checked against the allowed ones."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidOptionError(f"{field}: expected a path or URI, got {uri!r}")
    if "\x00" in uri or "\n" in uri:
        raise InvalidOptionError(f"{field}: control characters are not allowed in {uri!r}")
    parsed = urlparse(uri)
    if len(parsed.scheme) <= 1:  # no scheme, or a Windows drive letter
        return Path(uri).expanduser().absolute().as_uri()
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise InvalidOptionError(
            f"{field}: scheme {parsed.scheme!r} is not supported in {uri!r}; use one of {', '.join(sorted(ALLOWED_SCHEMES))}"
        )
    if parsed.scheme == "s3" and not parsed.netloc:
        raise InvalidOptionError(f"{field}: {uri!r} names no bucket")
    if parsed.scheme == "file":
        return Path(parsed.path).absolute().as_uri()
    if ".." in parsed.path.split("/"):
        raise InvalidOptionError(f"{field}: '..' is not allowed in {uri!r}")
    return uri


def filesystem(uri: str) -> tuple[AbstractFileSystem, str]:
    fs, path = fsspec.core.url_to_fs(uri, **storage_options(uri))
    return fs, path


def storage_options(uri: str) -> dict[str, Any]:
    """Extra fsspec options per scheme. S3 credentials come from the environment or the pod's service account only."""
    if urlparse(uri).scheme == "s3":
        endpoint = os.environ.get("FACEFUSION_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
        return {"client_kwargs": {"endpoint_url": endpoint}} if endpoint else {}
    return {}


def local_path(uri: str) -> str | None:
    """The filesystem path of a ``file://`` URI, or None for remote storage."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else uri
    return None


def join(uri: str, *parts: str) -> str:
    return uri.rstrip("/") + "/" + "/".join(p.strip("/") for p in parts)


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    return bool(fs.exists(path))


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)
    try:
        return bytes(fs.cat_file(path))
    except FileNotFoundError:
        raise InputMissingError(f"{uri}: no such file") from None


def read_json(uri: str) -> Any:
    return json.loads(read_bytes(uri))


def write_bytes_atomic(uri: str, data: bytes) -> None:
    """Readers see the old object or the whole new one, never a part."""
    fs, path = filesystem(uri)
    if fs.protocol in ("file", "local") or "file" in fs.protocol:
        _write_local_atomic(path, data)
        return
    fs.pipe_file(path, data)  # an object store PUT is atomic: the key appears only when complete


def write_json_atomic(uri: str, value: Any) -> None:
    write_bytes_atomic(uri, json.dumps(value, indent=2, sort_keys=True).encode())


def _write_local_atomic(path: str, data: bytes) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def put_file_atomic(local: str | os.PathLike[str], uri: str) -> None:
    """Publish a finished local file at ``uri``: a temporary name first, then a rename (or one PUT on S3)."""
    fs, path = filesystem(uri)
    if "file" in fs.protocol or fs.protocol == "local":
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            shutil.copyfile(local, temp)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        return
    fs.put_file(os.fspath(local), path)


def get_file(uri: str, local: str | os.PathLike[str]) -> None:
    fs, path = filesystem(uri)
    try:
        fs.get_file(path, os.fspath(local))
    except FileNotFoundError:
        raise InputMissingError(f"{uri}: no such file") from None


@contextlib.contextmanager
def open_input(uri: str) -> Iterator[str | IO[bytes]]:
    """A local path where there is one (fastest for PyAV), else a seekable remote file read by ranges."""
    path = local_path(uri)
    if path is not None:
        if not os.path.isfile(path):
            raise InputMissingError(f"{uri}: no such file")
        yield path
        return
    fs, remote = filesystem(uri)
    try:
        handle = fs.open(remote, "rb", block_size=4 * 1024 * 1024, cache_type="readahead")
    except FileNotFoundError:
        raise InputMissingError(f"{uri}: no such file") from None
    with handle:
        yield handle


def remove_tree(uri: str) -> None:
    fs, path = filesystem(uri)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def content_id(uri: str) -> str:
    """A cheap identity of a file's content: sha256 for local files, ETag and size for object stores."""
    path = local_path(uri)
    if path is not None:
        if not os.path.isfile(path):
            raise InputMissingError(f"{uri}: no such file")
        return "sha256:" + file_sha256(path)
    fs, remote = filesystem(uri)
    try:
        info = fs.info(remote)
    except FileNotFoundError:
        raise InputMissingError(f"{uri}: no such file") from None
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    return f"etag:{etag}:{info.get('size')}" if etag else f"size-mtime:{info.get('size')}:{info.get('mtime')}"


def compute_job_id(target_content_id: str, source_content_ids: list[str], options: Options) -> str:
    """Content-addressed: the same inputs and pixel options give the same job folder, and so reuse its chunks."""
    key = json.dumps(
        {
            "format": JOB_FORMAT_VERSION,
            "target": target_content_id,
            "sources": source_content_ids,
            "options": options.pixel_options(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(key.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class JobLayout:
    """Where each file of a job lives (see DESIGN.md, "The storage layout")."""

    job_uri: str

    @classmethod
    def under(cls, work_root: str, job_id: str) -> JobLayout:
        return cls(join(normalize_uri(work_root, field="work_root"), "jobs", job_id))

    @property
    def job_json(self) -> str:
        return join(self.job_uri, "job.json")

    @property
    def chunks_dir(self) -> str:
        return join(self.job_uri, "chunks")

    def chunk_video(self, index: int) -> str:
        return join(self.chunks_dir, f"{index:05d}.mp4")

    def chunk_marker(self, index: int) -> str:
        return join(self.chunks_dir, f"{index:05d}.json")


def output_marker_uri(output_uri: str) -> str:
    """The output's own marker sits beside it: it says which job made the file, so a repeat run can stop early."""
    parsed = urlparse(output_uri)
    directory, name = posixpath.split(parsed.path)
    return output_uri[: len(output_uri) - len(parsed.path)] + posixpath.join(directory, f".{name}.facefusion.json")
