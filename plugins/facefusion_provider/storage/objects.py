"""Whole objects on any fsspec store: exists, read, atomic and exclusive writes, listings, deletes and checksums.

An atomic write shows readers the old object or the whole new one; an exclusive write creates an object only if
nothing is there (S3's conditional PUT, a hard link on a local disk), so of two writers exactly one wins.

A local write under an allowed output prefix (``FACEFUSION_ALLOWED_OUTPUT_PREFIXES``) goes through folder handles
opened without following symbolic links below the prefix (``confined_folder``): a link swapped into an output's
folders after ``validate`` checked them cannot redirect the output, its preview or its marker.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlparse

from fsspec.spec import AbstractFileSystem

from facefusion_provider.exceptions import InputMissingError, InvalidOptionError, StorageDeniedError
from facefusion_provider.storage.filesystems import (
    error_code,
    filesystem,
    is_local,
    naming_a_full_disk,
    storage_errors,
)
from facefusion_provider.storage.uris import allowed_prefixes, is_within, local_path

_HASH_BLOCK = 8 * 1024 * 1024
_FOLDER_ATTEMPTS = 20  # a folder emptied and removed by another process between our makedirs and our file, again
_DOWNLOAD_BLOCK = 16 * 1024 * 1024
_CONFLICT_ATTEMPTS = 4  # of a conditional create that S3 answered with 409 ConditionalRequestConflict
_CONFLICT_BACKOFF_SECONDS = 0.2


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    with storage_errors(uri, fs):
        if urlparse(uri).scheme == "s3":
            return _s3_exists(fs, path)
        return bool(fs.exists(path))


def _s3_exists(fs: AbstractFileSystem, path: str) -> bool:
    """One HEAD: s3fs's own ``exists`` hides a denied request behind False, and its ``info`` lists after a 404."""
    bucket, key = path.split("/", 1) if "/" in path else (path, "")
    try:
        fs.call_s3("head_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return False
    return True


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)
    with storage_errors(uri, fs):
        return bytes(fs.cat_file(path))


def read_range(uri: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file in one ranged read (fewer at its end, none past it), never the whole file."""
    fs, path = filesystem(uri)
    with storage_errors(uri, fs):
        try:
            return bytes(fs.cat_file(path, start=start, end=end))
        except OSError as error:
            # S3 answers a range from the end on (an empty object's too) with 416 where a file gives no bytes
            if error.errno == errno.EINVAL and fs.size(path) <= start:
                return b""
            raise


def read_json(uri: str) -> Any:
    return json.loads(read_bytes(uri))


def confining_prefix(path: str) -> str | None:
    """The allowed local output prefix (as configured) that holds ``path``, when the worker has an output allow-list."""
    for prefix in allowed_prefixes("output"):
        root = local_path(prefix) if urlparse(prefix).scheme == "file" else None
        if root is not None and is_within(path, root.rstrip("/") or "/"):
            return root.rstrip("/") or "/"
    return None


@contextlib.contextmanager
def confined_folder(root: str, folder: str) -> Iterator[int]:
    """A handle on ``folder``, opened one name at a time from ``root`` without following a symbolic link (missing
    folders are created the same way); a link on the way is an ``InvalidOptionError`` naming it."""
    os.makedirs(root, exist_ok=True)
    handle = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # the prefix itself is the administrator's: it may be a link
    try:
        current = root
        for name in [part for part in folder[len(root) :].split("/") if part]:
            current = f"{current.rstrip('/')}/{name}"
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=handle)
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=handle)
            except OSError as error:
                if os.path.islink(current) or error.errno == errno.ELOOP:
                    raise InvalidOptionError(
                        f"output: {current} is a symbolic link; symbolic links are refused in output folders"
                    ) from None
                raise
            os.close(handle)
            handle = inner
        yield handle
    finally:
        os.close(handle)


def replace_confined(temp: str, destination: str) -> None:
    """``os.replace(temp, destination)`` for a temporary file beside ``destination``; under an allowed output prefix
    through a folder handle that follows no symbolic link, and never onto a link."""
    root = confining_prefix(destination)
    if root is None:
        os.replace(temp, destination)
        return
    folder, name = os.path.split(destination)
    if os.path.dirname(temp) != folder:
        raise ValueError(f"{temp} is not beside {destination}")
    with confined_folder(root, folder) as handle:
        os.replace(os.path.basename(temp), name, src_dir_fd=handle, dst_dir_fd=handle)


def _write_local_confined(root: str, path: str, data: bytes | IO[bytes]) -> None:
    """``data`` (bytes, or a file to copy) written to ``path`` by name inside a confined folder handle."""
    folder, name = os.path.split(path)
    temp = f".tmp-{uuid.uuid4().hex[:12]}"
    with confined_folder(root, folder) as handle:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _NEW_FILE_MODE, dir_fd=handle)
        try:
            with os.fdopen(fd, "wb") as out:
                if isinstance(data, bytes):
                    out.write(data)
                else:
                    shutil.copyfileobj(data, out, _HASH_BLOCK)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, name, src_dir_fd=handle, dst_dir_fd=handle)  # a link at ``name`` is replaced, not followed
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=handle)
            raise


def write_bytes_atomic(uri: str, data: bytes) -> None:
    """Readers see the old object or the whole new one, never a part."""
    fs, path = filesystem(uri)
    with storage_errors(uri, fs, missing_is_input=False):
        root = confining_prefix(path) if is_local(fs) else None
        if root is not None:
            _write_local_confined(root, path, data)
        elif is_local(fs):
            _write_local_atomic(path, data)
        else:
            fs.pipe_file(path, data)  # an object store PUT is atomic: the key appears only when complete


def write_bytes_if_unchanged(uri: str, data: bytes, version: str) -> bool:
    """Replace the object at ``uri`` with ``data`` only while it is still ``version`` (``stat``): True if replaced,
    False if it is gone or was replaced since. On S3 one conditional PUT (``If-Match``); locally a look then a rename
    (a window of microseconds between them, where a replace or delete by another process can be missed)."""
    fs, path = filesystem(uri)
    with storage_errors(uri, fs, missing_is_input=False):
        if is_local(fs):
            found = stat(uri)
            if found is None or found.version != version:
                return False
            try:  # in the folder as it is: a folder a sweep removed meanwhile is not made again
                fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=os.path.basename(path))
            except FileNotFoundError:
                return False
            try:
                os.fchmod(fd, _NEW_FILE_MODE)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(temp, path)
            except FileNotFoundError:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
                return False
            return True
        bucket, key = path.split("/", 1)
        try:
            fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfMatch=f'"{version}"')
        except FileNotFoundError:
            return False
        except OSError as error:
            if error_code(error) in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                return False
            raise
        fs.invalidate_cache(path)
        return True


def write_json_atomic(uri: str, value: Any) -> None:
    write_bytes_atomic(uri, json.dumps(value, indent=2, sort_keys=True).encode())


def write_bytes_exclusive(uri: str, data: bytes) -> bool:
    """Create ``uri`` with ``data`` only if nothing is there yet: True if this call created it, False if it existed.

    Atomic against every other writer: S3's conditional PUT (``If-None-Match: *``), a hard link on a local disk. Two
    processes that race for one key cannot both win, so it can hold a claim.
    """
    fs, path = filesystem(uri)
    with storage_errors(uri, fs, missing_is_input=False):
        if is_local(fs):
            return _write_local_exclusive(path, data)
        return _write_s3_exclusive(fs, path, data)


def _write_s3_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    for attempt in range(1, _CONFLICT_ATTEMPTS + 1):
        try:
            fs.pipe_file(path, data, mode="create")
            return True
        except FileExistsError:
            return False
        except OSError as error:
            code = error_code(error)
            if code == "PreconditionFailed":  # a store that names no condition in its answer (MinIO): it exists
                return False
            if code != "ConditionalRequestConflict" or attempt == _CONFLICT_ATTEMPTS:
                raise
            # S3 answers 409 while another conditional write to the key is in flight: ask again, as AWS advises.
            time.sleep(_CONFLICT_BACKOFF_SECONDS * attempt)
    raise AssertionError("unreachable")


def _write_local_exclusive(path: str, data: bytes) -> bool:
    for attempt in range(_FOLDER_ATTEMPTS):
        temp = _write_local_temp(path, data)
        try:
            os.link(temp, path)  # fails if path exists: readers only ever see the complete file
            return True
        except FileExistsError:
            return False
        except FileNotFoundError:  # a cleanup removed our temporary file or its folder before the link: again
            if attempt == _FOLDER_ATTEMPTS - 1:
                raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class StoredObject:
    """One file under a prefix: its URI, a version that changes whenever its content does, its size and mtime."""

    uri: str
    version: str  # the ETag on S3; size and modification time in nanoseconds for local files
    size: int
    modified: float  # seconds since the epoch


def list_files(prefix_uri: str) -> list[StoredObject]:
    """Every file under ``prefix_uri`` (recursively), sorted by URI; an absent prefix lists nothing."""
    fs, path = filesystem(prefix_uri)
    scheme = urlparse(prefix_uri).scheme
    with storage_errors(prefix_uri, fs, missing_is_input=False):
        try:
            found = fs.find(path, detail=True)
        except FileNotFoundError:
            if scheme == "s3":
                raise
            return []
    objects = []
    for name, info in sorted(found.items()):
        if info.get("type") != "file":
            continue
        uri = f"{scheme}://{name}" if scheme == "s3" else fs.unstrip_protocol(name)
        objects.append(_stored_object(uri, info))
    return objects


def list_folders(prefix_uri: str) -> list[str]:
    """The URIs of the folders directly under ``prefix_uri`` (one delimited listing on S3), sorted; an absent prefix
    lists nothing."""
    fs, path = filesystem(prefix_uri)
    scheme = urlparse(prefix_uri).scheme
    with storage_errors(prefix_uri, fs, missing_is_input=False):
        try:
            found = fs.ls(path, detail=True, refresh=True) if scheme == "s3" else fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
    names = sorted(str(info["name"]).rstrip("/") for info in found if info.get("type") == "directory")
    return [f"{scheme}://{name}" if scheme == "s3" else fs.unstrip_protocol(name) for name in names]


def _stored_object(uri: str, info: dict[str, Any]) -> StoredObject:
    size = int(info.get("size") or 0)
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    modified = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
    seconds = modified.timestamp() if hasattr(modified, "timestamp") else float(modified)
    version = etag or f"{size}-{int(seconds * 1e9)}"
    return StoredObject(uri=uri, version=version, size=size, modified=seconds)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_NEW_FILE_MODE = 0o666 & ~_umask()


def _write_local_temp(path: str, data: bytes) -> str:
    """A new temp file beside ``path`` holding ``data``, synced to disk, for the caller to publish; removed on failure."""
    directory = os.path.dirname(path)
    for attempt in range(_FOLDER_ATTEMPTS):
        os.makedirs(directory, exist_ok=True)
        try:
            fd, temp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
            break
        except FileNotFoundError:  # a cleanup removed the empty folder between the two calls: make it again
            if attempt == _FOLDER_ATTEMPTS - 1:
                raise
    try:
        os.fchmod(fd, _NEW_FILE_MODE)  # mkstemp makes 0600; a published file gets the usual mode, like open() would
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return temp


def _write_local_atomic(path: str, data: bytes) -> None:
    for attempt in range(_FOLDER_ATTEMPTS):
        temp = _write_local_temp(path, data)
        try:
            os.replace(temp, path)
            return
        except FileNotFoundError:  # a cleanup removed our temporary file or its folder before the rename: again
            if attempt == _FOLDER_ATTEMPTS - 1:
                raise
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise


def put_file_atomic(local: str | os.PathLike[str], uri: str) -> None:
    """Publish a finished local file at ``uri``: a temporary name first, then a rename (or one PUT on S3)."""
    fs, path = filesystem(uri)
    if is_local(fs):
        with storage_errors(uri, fs, missing_is_input=False):
            root = confining_prefix(path)
            if root is not None:
                with open(local, "rb") as source:
                    _write_local_confined(root, path, source)
            else:
                _copy_local_atomic(local, path)
        return
    # One PUT, or a multipart upload that s3fs completes only after every part (and aborts on error): the key
    # never shows a partial object.
    with storage_errors(uri, fs, missing_is_input=False):
        fs.put_file(os.fspath(local), path)


def get_file(uri: str, local: str | os.PathLike[str]) -> None:
    fs, path = filesystem(uri)
    with storage_errors(uri, fs), naming_a_full_disk(f"{os.fspath(local)} (downloading {uri})"):
        fs.get_file(path, os.fspath(local))


def get_file_sha256(uri: str, local: str | os.PathLike[str]) -> str:
    """Download ``uri`` to ``local`` and return the sha256 of what was written: one read of the object, hashed on the
    way. Errors are classified like ``get_file``'s; a failed download leaves no file at ``local``."""
    fs, path = filesystem(uri)
    digest = hashlib.sha256()
    try:
        with (
            storage_errors(uri, fs),
            naming_a_full_disk(f"{os.fspath(local)} (downloading {uri})"),
            fs.open(path, "rb", block_size=_DOWNLOAD_BLOCK, cache_type="none") as source,
            open(local, "wb") as out,
        ):
            while block := source.read(_DOWNLOAD_BLOCK):
                digest.update(block)
                out.write(block)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local)
        raise
    return digest.hexdigest()


def remove_tree(uri: str) -> None:
    fs, path = filesystem(uri)
    with storage_errors(uri, fs, missing_is_input=False):
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
    with storage_errors(uri, fs):
        info = fs.info(remote)
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    return f"etag:{etag}:{info.get('size')}" if etag else f"size-mtime:{info.get('size')}:{info.get('mtime')}"


def _copy_local_atomic(local: str | os.PathLike[str], path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        shutil.copyfile(local, temp)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def delete(uri: str) -> None:
    """Remove one object; an absent one is not an error."""
    fs, path = filesystem(uri)
    with storage_errors(uri, fs, missing_is_input=False), contextlib.suppress(FileNotFoundError):
        fs.rm_file(path)


def remove_empty_folders(uri: str) -> None:
    """Remove the empty folders at and under a local ``uri`` (object stores have none); a folder that another writer
    fills meanwhile stays."""
    root = local_path(uri)
    if root is None or not os.path.isdir(root):
        return
    for folder, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def check_writable(uri: str, *, field: str) -> None:
    """Whether a file can be written at ``uri``, found by writing and deleting a probe beside it (nothing else is
    written): the bucket exists and takes writes, or the nearest existing folder takes a new file. A problem is a
    ``StorageDeniedError`` or ``InvalidOptionError`` that starts with ``field``."""
    path = local_path(uri)
    if path is not None:
        _check_local_writable(path, uri, field)
        return
    directory, name = posixpath.split(uri)
    probe = f"{directory}/.{name}.facefusion-probe-{uuid.uuid4().hex[:12]}"
    try:
        write_bytes_atomic(probe, b"")
        delete(probe)
    except (StorageDeniedError, InputMissingError) as error:
        raise StorageDeniedError(f"{field}: cannot write there: {error}") from None


def _check_local_writable(path: str, uri: str, field: str) -> None:
    if os.path.isdir(path):
        raise InvalidOptionError(f"{field}: {uri} is a folder, not a file")
    folder = os.path.dirname(path)
    while not os.path.isdir(folder):  # the merge creates missing folders; the nearest existing one must take them
        if os.path.exists(folder):
            raise StorageDeniedError(f"{field}: cannot write {uri}: {folder} is a file, not a folder")
        folder = os.path.dirname(folder)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".facefusion-probe-")
    except OSError as error:
        raise StorageDeniedError(f"{field}: cannot write {uri}: {error.strerror or error} ({folder})") from None
    os.close(fd)
    os.unlink(probe)


def stat(uri: str) -> StoredObject | None:
    """The object at ``uri`` (version, size, the store's modification time), or None when there is none: one HEAD."""
    fs, path = filesystem(uri)
    with storage_errors(uri, fs, missing_is_input=False):
        try:
            if urlparse(uri).scheme == "s3":
                bucket, key = path.split("/", 1) if "/" in path else (path, "")
                head = fs.call_s3("head_object", Bucket=bucket, Key=key)
                info = {
                    "size": head.get("ContentLength"),
                    "ETag": head.get("ETag"),
                    "LastModified": head.get("LastModified"),
                }
            else:
                info = fs.info(path)
        except FileNotFoundError:
            return None
    return _stored_object(uri, info)
