"""Content checks on every store: a file published with its sha256 (S3 stores it as the object's own checksum and
refuses a PUT whose bytes do not match it), and a stored object's sha256 read back from the store's checksum (one
HEAD, no transfer) or, where the store has none, from the object's bytes.

S3 returns a checksum only for an object written with one, and a multipart upload's is composite (a checksum of the
parts' checksums, ``…-N``): neither says anything about the whole object's sha256, so both count as "no checksum".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from urllib.parse import urlparse

from facefusion_provider.storage.filesystems import filesystem, storage_errors
from facefusion_provider.storage.objects import file_sha256, put_file_atomic
from facefusion_provider.storage.uris import local_path

SINGLE_PUT_BYTES = 64 * 1024 * 1024  # a file up to this size goes up in one PUT that carries its sha256
_READ_BLOCK = 8 * 1024 * 1024


def put_file_checked(local: str | os.PathLike[str], uri: str, sha256: str) -> None:
    """``put_file_atomic``, with the file's sha256 (hex) stored by the store as the object's checksum where it keeps
    one (S3: ``x-amz-checksum-sha256``, verified on arrival). A larger file goes up as a multipart upload without it:
    its reader then hashes the bytes (``object_sha256``)."""
    if urlparse(uri).scheme != "s3" or os.path.getsize(local) > SINGLE_PUT_BYTES:
        put_file_atomic(local, uri)
        return
    fs, path = filesystem(uri)
    bucket, key = path.split("/", 1)
    with storage_errors(uri, fs, missing_is_input=False), open(local, "rb") as source:
        body, checksum = source.read(), _base64_of(sha256)
        fs.call_s3("put_object", Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm="SHA256", ChecksumSHA256=checksum)
    fs.invalidate_cache(path)


def stored_sha256(uri: str) -> str | None:
    """The sha256 (hex) the store keeps for the whole object at ``uri`` (one HEAD on S3); None where it keeps none
    (a local file, an object written without one, a multipart upload's composite checksum)."""
    if urlparse(uri).scheme != "s3":
        return None
    fs, path = filesystem(uri)
    bucket, key = path.split("/", 1)
    with storage_errors(uri, fs):
        head = fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    value = head.get("ChecksumSHA256")
    if not isinstance(value, str) or "-" in value or head.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
        return None
    try:
        return base64.b64decode(value, validate=True).hex()
    except binascii.Error:
        return None


def object_sha256(uri: str) -> str:
    """The sha256 (hex) of the bytes at ``uri``: hashed in place for a local file, read through once on a remote store
    (nothing written to disk)."""
    path = local_path(uri)
    if path is not None:
        with storage_errors(uri):
            return file_sha256(path)
    fs, remote = filesystem(uri)
    digest = hashlib.sha256()
    with storage_errors(uri, fs), fs.open(remote, "rb", block_size=_READ_BLOCK, cache_type="none") as source:
        while block := source.read(_READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def content_sha256(uri: str) -> str:
    """The sha256 of the object at ``uri``: the store's own checksum where it keeps one (no transfer), else its bytes
    hashed (``object_sha256``)."""
    return stored_sha256(uri) or object_sha256(uri)


def _base64_of(sha256: str) -> str:
    return base64.b64encode(bytes.fromhex(sha256)).decode()
