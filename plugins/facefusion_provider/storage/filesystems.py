"""Filesystems and what they raise: fsspec per URI, S3 credentials and endpoint, and the project's failure classes.

S3: the endpoint comes from ``FACEFUSION_S3_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL``), credentials from the standard
``AWS_*`` environment or the instance role, or, in the Airflow process, from ``using_s3_credentials`` (an Airflow AWS
connection). Every request is retried with capped, jittered exponential backoff; what is still failing afterwards
becomes a ``RetryableError``, while access denied, bad credentials and missing buckets become a ``StorageDeniedError``
that names the bucket and key.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import fsspec
from fsspec.spec import AbstractFileSystem

from facefusion_provider import contract
from facefusion_provider.exceptions import (
    FaceFusionError,
    InputMissingError,
    InvalidWorkError,
    RetryableError,
    StorageDeniedError,
    StorageFullError,
    is_no_space,
)
from facefusion_provider.storage.uris import bucket_and_key, local_path

DEFAULT_S3_MAX_ATTEMPTS = 6  # per request, first try included; botocore's standard mode caps each wait at 20 s
S3_POOL_CONNECTIONS = 64  # the merge has this many part copies in flight (S3 copies; they hold no memory here)
_S3FS_ROUNDS = 2


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
            contract.S3_ENDPOINT_VARIABLE: self.endpoint_url,
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
    settings = contract.worker_settings()
    endpoint = (credentials and credentials.endpoint_url) or settings.s3_endpoint_url
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL")  # boto3's standard variable
    client_kwargs: dict[str, Any] = {"endpoint_url": endpoint} if endpoint else {}
    options: dict[str, Any] = {
        # botocore retries throttling, 5xx, timeouts and dropped connections; s3fs's own loop adds one more round.
        "config_kwargs": {
            "retries": {"mode": "standard", "total_max_attempts": settings.s3_max_attempts or DEFAULT_S3_MAX_ATTEMPTS},
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


def is_local(fs: AbstractFileSystem) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return "file" in protocols or "local" in protocols


def _bucket_exists(fs: AbstractFileSystem, bucket: str) -> bool:
    """Only asked after a "not found": a 404 on HEAD does not say whether the bucket or the key is missing."""
    try:
        fs.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:
        return False
    except Exception:  # denied or unreachable: the bucket may well exist; report the original error
        return True
    return True


def error_code(error: BaseException) -> str:
    """S3's error code (``NoSuchBucket``, ``PreconditionFailed``, ...) behind what s3fs raised; empty if none."""
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
def storage_errors(uri: str, fs: AbstractFileSystem | None = None, *, missing_is_input: bool = True) -> Iterator[None]:
    """Translate what fsspec raises into the project's failure classes, naming the URI (and the bucket on S3)."""
    try:
        yield
    except FaceFusionError:
        raise
    except FileNotFoundError as error:
        if urlparse(uri).scheme == "s3":
            bucket, key = bucket_and_key(uri)
            if error_code(error) == "NoSuchBucket" or (fs is not None and not _bucket_exists(fs, bucket)):
                raise StorageDeniedError(
                    f"{uri}: bucket {bucket!r} does not exist (or these credentials cannot see it); key {key!r}"
                ) from None
        if missing_is_input:
            raise InputMissingError(f"{uri}: no such file") from None
        if local_path(uri) is not None:  # a write whose folder cannot exist (under /proc, say)
            raise StorageDeniedError(f"{uri}: cannot be written: {error.strerror or error}") from None
        raise
    except PermissionError as error:
        raise StorageDeniedError(_denied_message(uri, error)) from None
    except Exception as error:
        if isinstance(error, OSError) and is_no_space(error):  # a local write, or a download's local copy
            full = StorageFullError.naming(uri, error) if local_path(uri) is not None else StorageFullError.of(error)
            raise full from None
        local = isinstance(error, OSError) and local_path(uri) is not None
        if local and getattr(error, "errno", None) in (errno.EROFS, errno.ENOTDIR, errno.EISDIR):
            raise StorageDeniedError(f"{uri}: cannot be written: {getattr(error, 'strerror', None) or error}") from None
        if urlparse(uri).scheme != "s3":
            raise
        if type(error).__name__ == "FileExpired":
            raise InvalidWorkError(f"{uri}: the object changed while it was being read; start a new run") from error
        if _is_transient(error):
            raise RetryableError(f"{uri}: storage still failing after retries: {error}") from error
        raise


@contextlib.contextmanager
def naming_a_full_disk(where: str) -> Iterator[None]:
    """A full disk (ENOSPC, EDQUOT) met inside is a ``StorageFullError`` naming ``where``: the path written, and what
    it is where the path alone does not say."""
    try:
        yield
    except OSError as error:
        if not is_no_space(error):
            raise
        raise StorageFullError.naming(where, error) from None


def _denied_message(uri: str, error: PermissionError) -> str:
    if urlparse(uri).scheme != "s3":
        return f"{uri}: permission denied: {error}"
    bucket, key = bucket_and_key(uri)
    code = error_code(error) or "AccessDenied"
    hint = {
        "InvalidAccessKeyId": "the access key id is not known: check the AWS connection or AWS_ACCESS_KEY_ID",
        "SignatureDoesNotMatch": "the secret key does not match the access key: check the credentials",
        "ExpiredToken": "the session token has expired: refresh the credentials",
    }.get(code, "check the credentials and the bucket policy")
    return f"{uri}: access denied to bucket {bucket!r}, key {key!r} ({code}: {error}); {hint}"
