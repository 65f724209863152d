"""URI rules: every path or URI a user gives becomes a normalised URI here, or an error that names the field.

Plain absolute paths and ``file://`` URIs are the embedded default; ``s3://`` is production. ``..`` is refused in every
scheme (a run must not climb out of the folder it names), a relative path is refused where the caller asks for it
(a conf is read by processes whose working directory the user does not know), and optional allow-lists of prefixes
confine where runs may read and write. A local path is compared with the lists by its real path (symbolic links and
mounts resolved), and a symbolic link in an output's folders below its allowed prefix is refused: the worker writes
there through folder handles that never follow one (``storage.objects``).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from facefusion_provider import contract
from facefusion_provider.exceptions import InvalidOptionError

ALLOWED_SCHEMES = frozenset({"file", "s3", "memory"})
MAX_URI_BYTES = 4096  # Linux's PATH_MAX; an S3 URI is shorter still (its key holds 1,024 bytes)
MAX_S3_KEY_BYTES = 1024
MAX_NAME_BYTES = 255  # one file or folder name, on every common local filesystem


def normalize_uri(uri: str, *, field: str = "uri", relative: bool = True) -> str:
    """A path becomes an absolute ``file://`` URI; other schemes are checked against the allowed ones.

    ``relative``: whether a relative path is resolved against the working directory (the CLI) or refused (a conf).
    """
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidOptionError(f"{field}: expected a path or URI, got {uri!r}")
    size = _utf8_bytes(uri)
    if size > MAX_URI_BYTES:  # before anything echoes the value
        raise InvalidOptionError(f"{field}: the path or URI is {size} bytes long; at most {MAX_URI_BYTES} are allowed")
    if "\x00" in uri or "\n" in uri or "\r" in uri:
        raise InvalidOptionError(f"{field}: control characters are not allowed in {uri!r}")
    normalized = _normalize(uri, field=field, relative=relative)
    _check_name_lengths(normalized, field)
    return normalized


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _check_name_lengths(uri: str, field: str) -> None:
    parsed = urlparse(uri)
    path = unquote(parsed.path) if parsed.scheme == "file" else parsed.path
    if parsed.scheme == "s3" and _utf8_bytes(path.lstrip("/")) > MAX_S3_KEY_BYTES:
        raise InvalidOptionError(
            f"{field}: the S3 key is {_utf8_bytes(path.lstrip('/'))} bytes long; S3 allows at most {MAX_S3_KEY_BYTES}"
        )
    for name in path.split("/"):
        if _utf8_bytes(name) > MAX_NAME_BYTES:
            raise InvalidOptionError(
                f"{field}: the name {name[:32]!r}... is {_utf8_bytes(name)} bytes long; "
                f"a file or folder name holds at most {MAX_NAME_BYTES}"
            )


def _normalize(uri: str, *, field: str, relative: bool) -> str:
    parsed = urlparse(uri)
    if len(parsed.scheme) <= 1:  # no scheme, or a Windows drive letter
        path = Path(uri).expanduser()
        if not path.is_absolute() and not relative:
            raise InvalidOptionError(
                f"{field}: {uri!r} is a relative path; give an absolute path or a file:// or s3:// URI "
                "(workers do not share a working directory)"
            )
        _refuse_parent(str(path), uri, field)
        return path.absolute().as_uri()
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise InvalidOptionError(
            f"{field}: scheme {parsed.scheme!r} is not supported in {uri!r}; use one of {', '.join(sorted(ALLOWED_SCHEMES))}"
        )
    if parsed.scheme == "s3" and not parsed.netloc:
        raise InvalidOptionError(f"{field}: {uri!r} names no bucket")
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidOptionError(
                f"{field}: {uri!r} names host {parsed.netloc!r}; a file:// URI is local: file:///path"
            )
        local = unquote(parsed.path)
        _refuse_parent(local, uri, field)
        return Path(local).absolute().as_uri()  # as_uri() percent-encodes: decoded first, so never twice
    _refuse_parent(parsed.path, uri, field)
    return uri


def _refuse_parent(path: str, uri: str, field: str) -> None:
    if ".." in path.split("/"):
        raise InvalidOptionError(f"{field}: '..' is not allowed in {uri!r}; name the file itself")


def require_file_uri(uri: str, *, field: str) -> str:
    """``uri`` names a file, not a bucket or a folder (an S3 key, a path that does not end with a slash)."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3" and not parsed.path.strip("/"):
        raise InvalidOptionError(
            f"{field}: {uri!r} names a bucket, not a file; add the key, e.g. s3://bucket/video.mp4"
        )
    if uri.endswith("/") or not posixpath.basename(parsed.path):
        raise InvalidOptionError(f"{field}: {uri!r} names a folder, not a file")
    return uri


def bucket_and_key(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def local_path(uri: str) -> str | None:
    """The filesystem path of a ``file://`` URI, or None for remote storage."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path) if parsed.scheme else uri
    return None


def join(uri: str, *parts: str) -> str:
    return uri.rstrip("/") + "/" + "/".join(p.strip("/") for p in parts)


def parse_prefixes(text: str, *, field: str) -> tuple[str, ...]:
    """A comma-separated list of folder URIs (``s3://in/, /data/in``), normalised, each ending with a slash."""
    return normalize_prefixes(contract.split_prefixes(text), field=field)


def normalize_prefixes(prefixes: Sequence[str], *, field: str) -> tuple[str, ...]:
    """Folder URIs, normalised, each ending with a slash."""
    return tuple(normalize_uri(prefix, field=field, relative=False).rstrip("/") + "/" for prefix in prefixes)


def check_allowed(uri: str, prefixes: Sequence[str], *, field: str, kind: str) -> None:
    """``uri`` lies under one of ``prefixes`` (no list: anywhere). ``kind`` says which list, for the message.

    A local path counts by its real path, compared with the prefixes' real paths: a symbolic link under an allowed
    prefix that points elsewhere is outside. An output (``kind`` ``output``) also may not have a symbolic link in its
    folders below the prefix, nor be one: a link swapped in after this check could redirect the write.
    """
    if not prefixes:
        return
    path = local_path(uri) if urlparse(uri).scheme == "file" else None
    if path is None:
        if any(uri.startswith(prefix) for prefix in prefixes):
            return
    else:
        real = os.path.realpath(path)
        for prefix in prefixes:
            root = local_path(prefix) if urlparse(prefix).scheme == "file" else None
            if root is None or not is_within(real, os.path.realpath(root)):
                continue
            if kind != "output":
                return
            link = symlink_below(root, path)
            if link is None:
                return
            raise InvalidOptionError(
                f"{field}: {uri} passes through the symbolic link {link}; symbolic links are refused in output "
                "folders: give the real path"
            )
        if any(uri.startswith(prefix) for prefix in prefixes):
            raise InvalidOptionError(
                f"{field}: {uri} resolves, through a symbolic link, outside the allowed {kind} locations "
                f"({', '.join(prefixes)}); see the [facefusion] allowed_{kind}_prefixes setting"
            )
    raise InvalidOptionError(
        f"{field}: {uri} is outside the allowed {kind} locations ({', '.join(prefixes)}); "
        f"see the [facefusion] allowed_{kind}_prefixes setting"
    )


def is_within(path: str, folder: str) -> bool:
    """Whether the absolute ``path`` is ``folder`` or lies inside it (both already resolved)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def symlink_below(root: str, path: str) -> str | None:
    """The first symbolic link among ``path`` and its folders below ``root`` (the prefix as configured), or None.

    A ``path`` that does not start with ``root`` as written reaches it some other way, so its first link is named.
    """
    start = root.rstrip("/") if is_within(path, root.rstrip("/") or "/") else ""
    current = start
    for name in path[len(start) :].strip("/").split("/"):
        current = f"{current}/{name}"
        if os.path.islink(current):
            return current
        if not os.path.lexists(current):
            return None  # the merge creates the rest, through handles that refuse links
    return None


def allowed_prefixes(kind: str) -> tuple[str, ...]:
    """The worker's copy of the allow-list of ``kind`` (``input`` or ``output``), from its settings."""
    settings = contract.worker_settings()
    if kind == "input":
        return normalize_prefixes(settings.allowed_input_prefixes, field=contract.ALLOWED_INPUT_PREFIXES_VARIABLE)
    return normalize_prefixes(settings.allowed_output_prefixes, field=contract.ALLOWED_OUTPUT_PREFIXES_VARIABLE)
