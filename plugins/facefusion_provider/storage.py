"""Every URI the project touches goes through here: fsspec filesystems, atomic commits and the job folder layout.

Plain paths and ``file://`` URIs are the embedded default; ``s3://`` is production. No Airflow, no numpy.

S3: the endpoint comes from ``FACEFUSION_S3_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL``), credentials from the standard
``AWS_*`` environment or the instance role, or, in the Airflow process, from ``using_s3_credentials`` (an Airflow AWS
connection). Every request is retried with capped, jittered exponential backoff; what is still failing afterwards
becomes a ``RetryableError``, while access denied, bad credentials and missing buckets become a ``StorageDeniedError``
that names the bucket and key.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import hashlib
import io
import json
import os
import posixpath
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlparse

import fsspec
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from facefusion_provider.exceptions import (
    FaceFusionError,
    InputMissingError,
    InvalidJobError,
    InvalidOptionError,
    RetryableError,
    StorageDeniedError,
)
from facefusion_provider.options import Options
from facefusion_provider.types import JOB_FORMAT_VERSION

ALLOWED_SCHEMES = frozenset({"file", "s3", "memory"})
_HASH_BLOCK = 8 * 1024 * 1024

S3_ENDPOINT_VARIABLE = "FACEFUSION_S3_ENDPOINT_URL"
S3_MAX_ATTEMPTS_VARIABLE = "FACEFUSION_S3_MAX_ATTEMPTS"
INPUT_CACHE_DIR_VARIABLE = "FACEFUSION_INPUT_CACHE_DIR"
INPUT_CACHE_MAX_BYTES_VARIABLE = "FACEFUSION_INPUT_CACHE_MAX_BYTES"
READ_BLOCK_VARIABLE = "FACEFUSION_S3_READ_BLOCK_BYTES"
MERGE_PREFETCH_VARIABLE = "FACEFUSION_MERGE_PREFETCH"
DEFAULT_S3_MAX_ATTEMPTS = 6  # per request, first try included; botocore's standard mode caps each wait at 20 s
DEFAULT_INPUT_CACHE_MAX_BYTES = 50 * 1024**3
DEFAULT_READ_BLOCK_BYTES = 4 * 1024 * 1024  # one ranged GET per block; blocks a seek returns to stay cached
DEFAULT_MERGE_PREFETCH = 4  # chunks the merge fetches at once, ahead of the one it remuxes
_DOWNLOAD_BLOCK = 16 * 1024 * 1024
_S3FS_ROUNDS = 2
# Ranged reads ahead of a demuxer (``RangeReader``): FFmpeg reads through a forward gap up to its 32 KiB buffer plus
# its 32 KiB short-seek threshold instead of seeking, so planned ranges closer than this are fetched as one.
RANGE_GAP_BYTES = 64 * 1024
RANGE_PIECE_BYTES = 4 * 1024 * 1024  # a planned range is fetched in pieces of at most this size (bounds memory)
# Ranges closer than their file's size allows at this many bytes per GET on average are joined: a request costs about
# as much time as a megabyte, so a file whose audio sits between every large frame is read whole, not frame by frame.
RANGE_BYTES_PER_GET = 1024 * 1024
# Ranged GETs in flight ahead of the reader: with the merge's chunk downloads (DEFAULT_MERGE_PREFETCH) and its part
# uploads (UPLOADS_AT_ONCE), within S3_POOL_CONNECTIONS.
RANGE_FETCHES_AT_ONCE = 6
UPLOADS_AT_ONCE = 4
S3_POOL_CONNECTIONS = 16
UPLOAD_MIN_PART_BYTES = 5 * 1024 * 1024  # S3's smallest part but the last
UPLOAD_MAX_PARTS = 10_000  # S3's most parts of one object

ByteRange = tuple[int, int]  # bytes [start, end) of a file


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
        return Path(unquote(parsed.path)).absolute().as_uri()  # as_uri() percent-encodes; decode first, never twice
    if ".." in parsed.path.split("/"):
        raise InvalidOptionError(f"{field}: '..' is not allowed in {uri!r}")
    return uri


@dataclass(frozen=True)
class S3Credentials:
    """S3 credentials and endpoint (from an Airflow AWS connection, for example). The repr never shows the secrets."""

    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoint_url: str | None = None
    region_name: str | None = None

    def environment(self) -> dict[str, str]:
        """The environment variables that hand these credentials to a worker process (boto3's standard names)."""
        names = {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_SESSION_TOKEN": self.session_token,
            S3_ENDPOINT_VARIABLE: self.endpoint_url,
            "AWS_DEFAULT_REGION": self.region_name,
        }
        return {name: value for name, value in names.items() if value}


_S3_CREDENTIALS: ContextVar[S3Credentials | None] = ContextVar("facefusion_s3_credentials", default=None)


@contextlib.contextmanager
def using_s3_credentials(credentials: S3Credentials | None) -> Iterator[None]:
    """Use these credentials for every ``s3://`` access in this context (the Airflow side; workers use the environment)."""
    token = _S3_CREDENTIALS.set(credentials)
    try:
        yield
    finally:
        _S3_CREDENTIALS.reset(token)


def filesystem(uri: str) -> tuple[AbstractFileSystem, str]:
    if urlparse(uri).scheme == "file":  # fsspec would keep percent-escapes ("a%20b.mp4") in the path
        return fsspec.filesystem("file"), str(local_path(uri))
    fs, path = fsspec.core.url_to_fs(uri, **storage_options(uri))
    if urlparse(uri).scheme == "s3":
        # s3fs wraps botocore's retries in a loop of its own (5 rounds by default): keep the product bounded.
        setattr(fs, "retries", _S3FS_ROUNDS)  # noqa: B010 - a class attribute of S3FileSystem, not typed
    return fs, path


def storage_options(uri: str) -> dict[str, Any]:
    """Extra fsspec options per scheme. S3 credentials come from ``using_s3_credentials``, the environment or the role."""
    if urlparse(uri).scheme != "s3":
        return {}
    credentials = _S3_CREDENTIALS.get()
    endpoint = (credentials and credentials.endpoint_url) or os.environ.get(S3_ENDPOINT_VARIABLE)
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL")
    client_kwargs: dict[str, Any] = {"endpoint_url": endpoint} if endpoint else {}
    options: dict[str, Any] = {
        # botocore retries throttling, 5xx, timeouts and dropped connections; s3fs's own loop adds one more round.
        "config_kwargs": {
            "retries": {"mode": "standard", "total_max_attempts": _s3_max_attempts()},
            "connect_timeout": 10,
            "max_pool_connections": S3_POOL_CONNECTIONS,
            "read_timeout": 60,
        },
        "use_listings_cache": False,  # markers are written by other processes: never trust a cached listing
    }
    if credentials is not None:
        if credentials.region_name:
            client_kwargs["region_name"] = credentials.region_name
        if credentials.access_key_id:
            options.update(
                key=credentials.access_key_id, secret=credentials.secret_access_key, token=credentials.session_token
            )
    if client_kwargs:
        options["client_kwargs"] = client_kwargs
    return options


def _s3_max_attempts() -> int:
    return _positive_setting(S3_MAX_ATTEMPTS_VARIABLE, DEFAULT_S3_MAX_ATTEMPTS)


def merge_prefetch() -> int:
    """How many chunks the merge downloads (and checks) at once, ahead of the one it is remuxing."""
    return _positive_setting(MERGE_PREFETCH_VARIABLE, DEFAULT_MERGE_PREFETCH)


def _positive_setting(variable: str, default: int) -> int:
    value = os.environ.get(variable, "")
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise InvalidOptionError(f"{variable}: expected a whole number >= 1, got {value!r}")
    return int(value)


def _bucket_and_key(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def _bucket_exists(fs: AbstractFileSystem, bucket: str) -> bool:
    """Only asked after a "not found": a 404 on HEAD does not say whether the bucket or the key is missing."""
    try:
        fs.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:
        return False
    except Exception:  # denied or unreachable: the bucket may well exist; report the original error
        return True
    return True


def _error_code(error: BaseException) -> str:
    response = getattr(error.__cause__, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "")
    return ""


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, (OSError, TimeoutError)):
        return True
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:  # no S3 support installed: nothing of botocore's can be raised
        return False
    return isinstance(error, BotoCoreError)


@contextlib.contextmanager
def _storage_errors(uri: str, fs: AbstractFileSystem | None = None, *, missing_is_input: bool = True) -> Iterator[None]:
    """Translate what fsspec raises into the project's failure classes, naming the URI (and the bucket on S3)."""
    try:
        yield
    except FaceFusionError:
        raise
    except FileNotFoundError as error:
        if urlparse(uri).scheme == "s3":
            bucket, key = _bucket_and_key(uri)
            if _error_code(error) == "NoSuchBucket" or (fs is not None and not _bucket_exists(fs, bucket)):
                raise StorageDeniedError(
                    f"{uri}: bucket {bucket!r} does not exist (or these credentials cannot see it); key {key!r}"
                ) from None
        if missing_is_input:
            raise InputMissingError(f"{uri}: no such file") from None
        raise
    except PermissionError as error:
        raise StorageDeniedError(_denied_message(uri, error)) from None
    except Exception as error:
        if urlparse(uri).scheme != "s3":
            raise
        if type(error).__name__ == "FileExpired":
            raise InvalidJobError(f"{uri}: the object changed while it was being read; start a new run") from error
        if _is_transient(error):
            raise RetryableError(f"{uri}: storage still failing after retries: {error}") from error
        raise


def _denied_message(uri: str, error: PermissionError) -> str:
    if urlparse(uri).scheme != "s3":
        return f"{uri}: permission denied: {error}"
    bucket, key = _bucket_and_key(uri)
    code = _error_code(error) or "AccessDenied"
    hint = {
        "InvalidAccessKeyId": "the access key id is not known: check the AWS connection or AWS_ACCESS_KEY_ID",
        "SignatureDoesNotMatch": "the secret key does not match the access key: check the credentials",
        "ExpiredToken": "the session token has expired: refresh the credentials",
    }.get(code, "check the credentials and the bucket policy")
    return f"{uri}: access denied to bucket {bucket!r}, key {key!r} ({code}: {error}); {hint}"


def local_path(uri: str) -> str | None:
    """The filesystem path of a ``file://`` URI, or None for remote storage."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path) if parsed.scheme else uri
    return None


def join(uri: str, *parts: str) -> str:
    return uri.rstrip("/") + "/" + "/".join(p.strip("/") for p in parts)


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    with _storage_errors(uri, fs):
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
    with _storage_errors(uri, fs):
        return bytes(fs.cat_file(path))


def read_json(uri: str) -> Any:
    return json.loads(read_bytes(uri))


def write_bytes_atomic(uri: str, data: bytes) -> None:
    """Readers see the old object or the whole new one, never a part."""
    fs, path = filesystem(uri)
    if _is_local(fs):
        _write_local_atomic(path, data)
        return
    with _storage_errors(uri, fs):
        fs.pipe_file(path, data)  # an object store PUT is atomic: the key appears only when complete


def _is_local(fs: AbstractFileSystem) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return "file" in protocols or "local" in protocols


def write_json_atomic(uri: str, value: Any) -> None:
    write_bytes_atomic(uri, json.dumps(value, indent=2, sort_keys=True).encode())


def write_bytes_exclusive(uri: str, data: bytes) -> bool:
    """Create ``uri`` with ``data`` only if nothing is there yet: True if this call created it, False if it existed.

    Atomic against every other writer: S3's conditional PUT (``If-None-Match: *``), a hard link on a local disk. Two
    processes that race for one key cannot both win, so it can hold a claim.
    """
    fs, path = filesystem(uri)
    if _is_local(fs):
        return _write_local_exclusive(path, data)
    with _storage_errors(uri, fs, missing_is_input=False):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
    return True


def _write_local_exclusive(path: str, data: bytes) -> bool:
    temp = _write_local_temp(path, data)
    try:
        os.link(temp, path)  # fails if path exists: readers only ever see the complete file
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    return True


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
    with _storage_errors(prefix_uri, fs, missing_is_input=False):
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
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
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
    temp = _write_local_temp(path, data)
    try:
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def put_file_atomic(local: str | os.PathLike[str], uri: str) -> None:
    """Publish a finished local file at ``uri``: a temporary name first, then a rename (or one PUT on S3)."""
    fs, path = filesystem(uri)
    if _is_local(fs):
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
    # One PUT, or a multipart upload that s3fs completes only after every part (and aborts on error): the key
    # never shows a partial object.
    with _storage_errors(uri, fs, missing_is_input=False):
        fs.put_file(os.fspath(local), path)


class MultipartUpload:
    """One S3 object written as numbered parts, from any thread and in any order; the key shows nothing until
    ``complete``, and ``abort`` discards every part. Each request is retried and its errors classified like the rest.

    A part uploaded again under the same number replaces the earlier one. Every part but the last must hold at least
    ``UPLOAD_MIN_PART_BYTES``.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._fs, _ = filesystem(uri)
        self._bucket, self._key = _bucket_and_key(uri)
        self._etags: dict[int, str] = {}
        with _storage_errors(uri, self._fs, missing_is_input=False):
            started = self._fs.call_s3("create_multipart_upload", Bucket=self._bucket, Key=self._key)
        self.upload_id: str = started["UploadId"]

    def put_part(self, number: int, data: bytes) -> None:
        with _storage_errors(self.uri, self._fs, missing_is_input=False):
            answer = self._fs.call_s3(
                "upload_part",
                Bucket=self._bucket,
                Key=self._key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=data,
            )
        self._etags[number] = answer["ETag"]

    def complete(self, part_count: int) -> None:
        """The object becomes parts ``1..part_count``; any part uploaded beyond them is dropped."""
        parts = [{"PartNumber": number, "ETag": self._etags[number]} for number in range(1, part_count + 1)]
        with _storage_errors(self.uri, self._fs, missing_is_input=False):
            self._fs.call_s3(
                "complete_multipart_upload",
                Bucket=self._bucket,
                Key=self._key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": parts},
            )

    def abort(self) -> None:
        with _storage_errors(self.uri, self._fs, missing_is_input=False):
            self._fs.call_s3("abort_multipart_upload", Bucket=self._bucket, Key=self._key, UploadId=self.upload_id)


def multipart_upload(uri: str) -> MultipartUpload | None:
    """A new multipart upload to ``uri`` on S3; None for any other store (publish a finished file there instead)."""
    return MultipartUpload(uri) if urlparse(uri).scheme == "s3" else None


def get_file(uri: str, local: str | os.PathLike[str]) -> None:
    fs, path = filesystem(uri)
    with _storage_errors(uri, fs):
        fs.get_file(path, os.fspath(local))


def get_file_sha256(uri: str, local: str | os.PathLike[str]) -> str:
    """Download ``uri`` to ``local`` and return the sha256 of what was written: one read of the object, hashed on the
    way. Errors are classified like ``get_file``'s; a failed download leaves no file at ``local``."""
    fs, path = filesystem(uri)
    digest = hashlib.sha256()
    try:
        with (
            _storage_errors(uri, fs),
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


@contextlib.contextmanager
def open_input(uri: str) -> Iterator[str | IO[bytes]]:
    """A local path where there is one (fastest for PyAV), else a seekable remote file read by ranges.

    With ``FACEFUSION_INPUT_CACHE_DIR`` set, a remote input is downloaded once per node into that folder, keyed by its
    ETag, and every later open on the node reads the local copy (see ``docs/s3.md`` for when that pays).
    """
    path = local_path(uri)
    if path is not None:
        if not os.path.isfile(path):
            raise InputMissingError(f"{uri}: no such file")
        yield path
        return
    cache_dir = os.environ.get(INPUT_CACHE_DIR_VARIABLE)
    if cache_dir:
        yield cached_input(uri, cache_dir)
        return
    fs, remote = filesystem(uri)
    with _storage_errors(uri, fs):
        # blockcache keeps the blocks a seek returns to (the index at the end of an MP4, a chunk's keyframe).
        block_size = _positive_setting(READ_BLOCK_VARIABLE, DEFAULT_READ_BLOCK_BYTES)
        handle = fs.open(remote, "rb", block_size=block_size, cache_type="blockcache")
    with handle:  # errors while the caller reads are the caller's to classify (a corrupt video is not transient)
        yield handle


def cached_input(uri: str, cache_dir: str) -> str:
    """The local path of a node-local copy of ``uri``, downloaded once and keyed by the object's ETag and size.

    Chunks running side by side on one node wait for the first one's download (a lock per copy) instead of each
    fetching the whole file.
    """
    fs, remote = filesystem(uri)
    with _storage_errors(uri, fs):
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
                raise InvalidJobError(f"{uri}: the object changed while it was being read; start a new run")
            shutil.copyfileobj(src, out, _DOWNLOAD_BLOCK)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _evict_input_cache(cache_dir: str, *, keep_free: int) -> None:
    """Remove least recently used copies until ``keep_free`` more bytes fit under the cache's limit."""
    limit = int(os.environ.get(INPUT_CACHE_MAX_BYTES_VARIABLE) or DEFAULT_INPUT_CACHE_MAX_BYTES)
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


def range_fetcher(uri: str, handle: IO[bytes]) -> Callable[[int, int], bytes] | None:
    """A function that fetches bytes ``[start, end)`` of the open remote file ``handle`` in one ranged read, past its
    cache and safe to call from several threads; None where ``handle`` is not a remote fsspec file.

    On S3 each read is checked against the version the file was opened at and retried like every request; what still
    fails is raised as this module's errors, naming ``uri``.
    """
    if not isinstance(handle, AbstractBufferedFile):
        return None
    fs = handle.fs

    def fetch(start: int, end: int) -> bytes:
        with _storage_errors(uri, fs):
            data = bytes(handle._fetch_range(start, end))
        if len(data) != end - start:
            raise InvalidJobError(
                f"{uri}: bytes {start}-{end - 1} came back as {len(data)} bytes; the object changed while it was "
                "being read; start a new run"
            )
        return data

    return fetch


def range_pieces(ranges: Sequence[ByteRange], piece_bytes: int = RANGE_PIECE_BYTES) -> list[ByteRange]:
    """``ranges`` (sorted, disjoint) cut into pieces of at most ``piece_bytes``: the units fetched ahead."""
    return [
        (start, min(start + piece_bytes, end))
        for range_start, end in ranges
        for start in range(range_start, end, piece_bytes)
    ]


class RangeReader(io.RawIOBase):
    """A read-only file over ``fallback`` whose reads inside ``pieces`` are served from ``fetched``.

    ``pieces`` are sorted, disjoint byte ranges of the file; ``fetched`` yields their bytes in that order, made ahead
    of the reader by the caller (several at once, e.g. from ``range_fetcher``). A read inside a piece returns at most
    the rest of that piece: a short read, as a raw file may return, and never an empty one before the end of the file.
    A read anywhere else (the header, a gap, a piece already passed) goes to ``fallback`` and stops at the next piece.
    The bytes are the file's either way: only where they come from differs. Closing it leaves ``fallback`` open.
    """

    def __init__(self, fallback: IO[bytes], pieces: Sequence[ByteRange], fetched: Iterator[bytes], size: int) -> None:
        super().__init__()
        self._fallback, self._pieces, self._fetched, self._size = fallback, pieces, fetched, size
        self._starts = [start for start, _ in pieces]
        self._position = 0
        self._held: tuple[int, bytes] | None = None  # the piece in use: its index and bytes
        self._next_piece = 0  # the index of the piece ``fetched`` yields next
        self._failure: Exception | None = None  # what ``fetched`` raised, if anything
        self.fetched_bytes = 0  # of the pieces taken from ``fetched``
        self.fallback_bytes = 0  # read from ``fallback``
        self.fallback_reads = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        origins = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}
        if whence not in origins or origins[whence] + offset < 0:
            raise ValueError(f"invalid seek to {offset} from {whence}")
        origin = origins[whence]
        self._position = origin + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("read of a closed file")
        position = self._position
        wanted = self._size - position if size is None or size < 0 else min(size, self._size - position)
        if wanted <= 0:
            return b""
        index = bisect.bisect_right(self._starts, position) - 1
        start, end = self._pieces[index] if index >= 0 else (0, 0)
        data = self._piece(index) if start <= position < end else None
        if data is not None:
            chunk = data[position - start : position - start + wanted]
        else:
            following = self._starts[index + 1] if index + 1 < len(self._starts) else self._size
            chunk = self._read_fallback(position, min(wanted, following - position))
        self._position += len(chunk)
        return chunk

    def _piece(self, index: int) -> bytes | None:
        """The bytes of piece ``index``, taking (and dropping) the pieces before it; None once it has been passed."""
        if self._held is not None and self._held[0] == index:
            return self._held[1]
        if index < self._next_piece:
            return None
        if self._failure is not None:  # a demuxer may retry a failed read: it gets the same error, not a later one
            raise self._failure
        while self._next_piece <= index:
            try:
                data = next(self._fetched)
            except Exception as error:
                self._failure = error
                raise
            self._held = (self._next_piece, data)
            self._next_piece += 1
            self.fetched_bytes += len(data)
        return data

    def _read_fallback(self, position: int, size: int) -> bytes:
        self._fallback.seek(position)
        chunk = self._fallback.read(size)
        self.fallback_reads += 1
        self.fallback_bytes += len(chunk)
        return chunk


def remove_tree(uri: str) -> None:
    fs, path = filesystem(uri)
    with _storage_errors(uri, fs, missing_is_input=False):
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
    with _storage_errors(uri, fs):
        info = fs.info(remote)
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
