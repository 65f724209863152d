"""Inputs as PyAV reads them: a local path where there is one, else a seekable remote file read by ranges, or a
node-local copy kept in an input cache shared by the workers of one node."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO

from fsspec.spec import AbstractFileSystem

from facefusion_provider import contract
from facefusion_provider.exceptions import InputMissingError, InvalidWorkError
from facefusion_provider.storage.filesystems import filesystem, storage_errors
from facefusion_provider.storage.uris import local_path

DEFAULT_INPUT_CACHE_MAX_BYTES = 50 * 1024**3
DEFAULT_READ_BLOCK_BYTES = 4 * 1024 * 1024  # one ranged GET per block; blocks a seek returns to stay cached
_DOWNLOAD_BLOCK = 16 * 1024 * 1024


@contextlib.contextmanager
def open_input(uri: str, *, block_size: int | None = None) -> Iterator[str | IO[bytes]]:
    """A local path where there is one (fastest for PyAV), else a seekable remote file read by ranges (of
    ``block_size`` bytes, by default ``FACEFUSION_S3_READ_BLOCK_BYTES``). With ``block_size`` the caller reads a few
    small pieces (an MP4's index): never through the input cache.

    With ``FACEFUSION_INPUT_CACHE_DIR`` set, a remote input is downloaded once per node into that folder, keyed by its
    ETag, and every later open on the node reads the local copy (see ``docs/s3.md`` for when that pays).
    """
    path = local_path(uri)
    if path is not None:
        if not os.path.isfile(path):
            raise InputMissingError(f"{uri}: no such file")
        yield path
        return
    settings = contract.worker_settings()
    if settings.input_cache_dir and block_size is None:
        yield cached_input(uri, settings.input_cache_dir)
        return
    fs, remote = filesystem(uri)
    with storage_errors(uri, fs):
        # blockcache keeps the blocks a seek returns to (the index at the end of an MP4, a segment's keyframe).
        block_size = block_size or settings.s3_read_block_bytes or DEFAULT_READ_BLOCK_BYTES
        handle = fs.open(remote, "rb", block_size=block_size, cache_type="blockcache")
    with handle:  # errors while the caller reads are the caller's to classify (a corrupt video is not transient)
        yield handle


def cached_input(uri: str, cache_dir: str) -> str:
    """The local path of a node-local copy of ``uri``, downloaded once and keyed by the object's ETag and size.

    Spans running side by side on one node wait for the first one's download (a lock per copy) instead of each
    fetching the whole file.
    """
    fs, remote = filesystem(uri)
    with storage_errors(uri, fs):
        info = fs.info(remote)
        etag = str(info.get("ETag") or "").strip('"')
        size = int(info.get("size") or 0)
        name = hashlib.sha256(f"{uri}\n{etag}\n{size}".encode()).hexdigest()[:32] + posixpath.splitext(remote)[1]
        target = os.path.join(cache_dir, name)
        os.makedirs(cache_dir, exist_ok=True)
        with open(os.path.join(cache_dir, f".lock-{name}"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.isfile(target) and os.path.getsize(target) == size:
                os.utime(target)  # recently used: evicted last
                return target
            _evict_input_cache(cache_dir, keep_free=size)
            _download(fs, remote, uri, etag, target)
    return target


def _download(fs: AbstractFileSystem, remote: str, uri: str, etag: str, target: str) -> None:
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".part-")
    try:
        # s3fs checks every range against the ETag it opened with: a replaced object fails here, not silently.
        with (
            os.fdopen(fd, "wb") as out,
            fs.open(remote, "rb", block_size=_DOWNLOAD_BLOCK, cache_type="none") as src,
        ):
            if str(src.details.get("ETag") or "").strip('"') != etag:
                raise InvalidWorkError(f"{uri}: the object changed while it was being read; start a new run")
            shutil.copyfileobj(src, out, _DOWNLOAD_BLOCK)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _evict_input_cache(cache_dir: str, *, keep_free: int) -> None:
    """Remove least recently used copies until ``keep_free`` more bytes fit under the cache's limit."""
    limit = contract.worker_settings().input_cache_max_bytes
    limit = DEFAULT_INPUT_CACHE_MAX_BYTES if limit is None else limit
    entries = []
    for entry in os.scandir(cache_dir):
        if entry.is_file() and not entry.name.startswith("."):  # not the locks, not downloads in progress
            stat = entry.stat()
            entries.append((stat.st_mtime, stat.st_size, entry.path))
    used = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if used + keep_free <= limit:
            break
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        used -= size
