"""One object made of bytes in memory and byte ranges of other objects, published at once.

On S3 it is a multipart upload: a range of another S3 object that can be a part of its own (``UPLOAD_MIN_PART_BYTES``
or more) is copied by S3 itself (UploadPartCopy), and only the rest passes through this process, fetched by ranged
reads several at once. Elsewhere it is a file written beside the destination (ranges of local files copied by the
kernel) and renamed into place. Either way nothing shows at the destination until every byte is there.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlparse

from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.storage.filesystems import filesystem, naming_a_full_disk, storage_errors
from facefusion_provider.storage.multipart import UPLOAD_MAX_PARTS, UPLOAD_MIN_PART_BYTES, MultipartUpload
from facefusion_provider.storage.objects import put_file_atomic, replace_confined
from facefusion_provider.storage.ranges import RANGE_GAP_BYTES, RANGE_PIECE_BYTES
from facefusion_provider.storage.uris import local_path

COMPOSE_PART_BYTES = 16 * 1024 * 1024  # a part assembled here, from bytes and small ranges
UPLOAD_MAX_COPY_BYTES = 5 * 1024**3  # S3's largest part
COMPOSE_REQUESTS_AT_ONCE = 64  # part copies and uploads in flight: the S3 client's connection pool
ASSEMBLED_AT_ONCE = 4  # parts assembled here and held in memory at once (each up to COMPOSE_PART_BYTES)
FETCHES_AT_ONCE = 8  # ranged reads in flight for the parts assembled here, within the S3 client's connection pool
_COPY_BLOCK = 64 * 1024 * 1024
# copy_file_range refuses across filesystems (EXDEV) and where a filesystem cannot (the others): copy through here
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EPERM})


@dataclass(frozen=True)
class ByteSlice:
    """Bytes ``[start, end)`` of the object at ``uri``."""

    uri: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


Piece = bytes | ByteSlice


@dataclass(frozen=True)
class Composed:
    """What composing cost: the bytes the store copied itself and those read and written by this process."""

    size: int
    copied_bytes: int
    moved_bytes: int
    parts: int


@dataclass
class _Part:
    copy: ByteSlice | None = None  # a part S3 copies from another object
    pieces: list[Piece] = field(default_factory=list)  # or one assembled here

    @property
    def size(self) -> int:
        return self.copy.size if self.copy else sum(_size(piece) for piece in self.pieces)


def compose(uri: str, pieces: Sequence[Piece]) -> Composed:
    """Writes ``pieces`` one after another as the object at ``uri``, all at once (see the module's docstring)."""
    if urlparse(uri).scheme == "s3":
        return _compose_s3(uri, pieces)
    destination = local_path(uri)
    size = sum(_size(piece) for piece in pieces)
    with _local_file(destination if destination is not None else None) as path:
        with naming_a_full_disk(uri if destination is not None else f"{path} (the local copy of {uri})"):
            _write_local(path, pieces)
        if destination is None:
            put_file_atomic(path, uri)
        else:
            replace_confined(path, destination)  # never through a link swapped into an output folder
    copied = sum(piece.size for piece in pieces if isinstance(piece, ByteSlice) and local_path(piece.uri))
    return Composed(size, copied_bytes=copied, moved_bytes=size - copied, parts=1)


def plan_parts(pieces: Sequence[Piece], *, copies: bool = True, part_bytes: int = COMPOSE_PART_BYTES) -> list[_Part]:
    """The parts of a multipart upload of ``pieces``: every S3 range large enough copied by S3, a part of at least
    the minimum size assembled here from the rest (topped up from the next range when it falls short)."""
    parts: list[_Part] = []
    current = _Part()

    def flush() -> None:
        nonlocal current
        if current.pieces:
            parts.append(current)
            current = _Part()

    for piece in pieces:
        if copies and isinstance(piece, ByteSlice) and _is_s3(piece.uri) and piece.size >= UPLOAD_MIN_PART_BYTES:
            short = UPLOAD_MIN_PART_BYTES - current.size if current.pieces else 0
            if short <= 0 or piece.size - short >= UPLOAD_MIN_PART_BYTES:
                if short > 0:  # an assembled part below the minimum takes the start of this range
                    current.pieces.append(ByteSlice(piece.uri, piece.start, piece.start + short))
                flush()
                rest = ByteSlice(piece.uri, piece.start + max(short, 0), piece.end)
                count = -(-rest.size // UPLOAD_MAX_COPY_BYTES)  # equal parts, each within S3's limits
                bounds = [rest.start + rest.size * number // count for number in range(count + 1)]
                parts.extend(_Part(copy=ByteSlice(piece.uri, a, b)) for a, b in itertools.pairwise(bounds))
                continue
        for cut in _cut(piece, part_bytes):
            current.pieces.append(cut)
            if current.size >= part_bytes:
                flush()
    flush()
    return parts


def _compose_s3(uri: str, pieces: Sequence[Piece]) -> Composed:
    parts = plan_parts(pieces)
    if len(parts) > UPLOAD_MAX_PARTS:  # more copyable ranges than parts: everything through here, in larger parts
        total = sum(_size(piece) for piece in pieces)
        parts = plan_parts(
            pieces, copies=False, part_bytes=max(COMPOSE_PART_BYTES, -(-total // (UPLOAD_MAX_PARTS // 2)))
        )
    upload = MultipartUpload(uri)
    try:
        with (
            ThreadPoolExecutor(COMPOSE_REQUESTS_AT_ONCE, thread_name_prefix="facefusion-compose") as requests,
            ThreadPoolExecutor(FETCHES_AT_ONCE, thread_name_prefix="facefusion-fetch") as fetches,
        ):
            memory = threading.BoundedSemaphore(ASSEMBLED_AT_ONCE)
            futures = [
                requests.submit(_send_part, upload, number, part, fetches, memory)
                for number, part in enumerate(parts, start=1)
            ]
            for future in futures:
                future.result()
        upload.complete(len(parts))
    except BaseException:
        with contextlib.suppress(Exception):  # the failure is the story; S3's lifecycle rules reap what is left
            upload.abort()
        raise
    copied = sum(part.size for part in parts if part.copy)
    size = sum(part.size for part in parts)
    return Composed(size, copied_bytes=copied, moved_bytes=size - copied, parts=len(parts))


def _send_part(
    upload: MultipartUpload, number: int, part: _Part, fetches: ThreadPoolExecutor, memory: threading.BoundedSemaphore
) -> None:
    if part.copy is not None:
        upload.copy_part(number, part.copy.uri, part.copy.start, part.copy.end)
        return
    with memory:
        upload.put_part(number, b"".join(_read_pieces(part.pieces, fetches.submit)))


def _read_pieces(pieces: Sequence[Piece], submit: Callable[..., Future[bytes]]) -> Iterator[bytes]:
    """The bytes of ``pieces`` in order; ranges of one object closer than ``RANGE_GAP_BYTES`` are read as one, up to
    ``RANGE_PIECE_BYTES`` a read (sound interleaved between frames is read with the frames between, as a demuxer
    would, in reads of bounded size)."""
    reads: list[tuple[ByteSlice, list[int]]] = []  # one ranged read and the pieces it serves
    for index, piece in enumerate(pieces):
        if not isinstance(piece, ByteSlice):
            continue
        last = reads[-1][0] if reads else None
        if (
            last is not None
            and last.uri == piece.uri
            and 0 <= piece.start - last.end <= RANGE_GAP_BYTES
            and piece.end - last.start <= RANGE_PIECE_BYTES  # a read holds little memory, whatever the gaps
        ):
            reads[-1] = (ByteSlice(last.uri, last.start, piece.end), [*reads[-1][1], index])
        else:
            reads.append((piece, [index]))
    fetched = [submit(_read_range, read) for read, _ in reads]
    served: dict[int, bytes] = {}
    for (read, indexes), future in zip(reads, fetched, strict=True):
        data = future.result()
        for index in indexes:
            piece = pieces[index]
            assert isinstance(piece, ByteSlice)
            served[index] = data[piece.start - read.start : piece.end - read.start]
    for index, piece in enumerate(pieces):
        yield piece if isinstance(piece, bytes) else served[index]


def _read_range(piece: ByteSlice) -> bytes:
    fs, path = filesystem(piece.uri)
    with storage_errors(piece.uri, fs):
        data = bytes(fs.cat_file(path, start=piece.start, end=piece.end))
    if len(data) != piece.size:
        raise InvalidWorkError(
            f"{piece.uri}: bytes {piece.start}-{piece.end - 1} came back as {len(data)} bytes; "
            "it changed or was cut short while it was being read"
        )
    return data


@contextlib.contextmanager
def _local_file(destination: str | None) -> Iterator[str]:
    """A new file's path beside ``destination`` (or in the temporary folder), removed unless renamed away."""
    if destination is not None:
        directory, name = os.path.split(destination)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f".{name}.partial-{uuid.uuid4().hex}")
    else:
        import tempfile

        handle, path = tempfile.mkstemp(prefix="facefusion-compose-")
        os.close(handle)
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _write_local(path: str, pieces: Sequence[Piece]) -> None:
    """``pieces`` into the new file ``path``: local ranges copied by the kernel, remote ones fetched side by side in
    windows of at most ``COMPOSE_PART_BYTES`` (the memory this holds)."""
    with (
        ThreadPoolExecutor(FETCHES_AT_ONCE, thread_name_prefix="facefusion-fetch") as fetches,
        open(path, "wb") as output,
    ):
        window: list[Piece] = []
        for piece in [*pieces, b""]:  # the empty piece at the end writes the last window
            source = local_path(piece.uri) if isinstance(piece, ByteSlice) else None
            if isinstance(piece, ByteSlice) and source is None:
                window += list(_cut(piece, COMPOSE_PART_BYTES))
                if sum(_size(part) for part in window) < COMPOSE_PART_BYTES:
                    continue
            for data in _read_pieces(window, fetches.submit):
                output.write(data)
            window = []
            if isinstance(piece, bytes):
                output.write(piece)
            elif source is not None:
                output.flush()
                _copy_range(source, piece, output.fileno())
        output.flush()
        os.fsync(output.fileno())


def _copy_range(source: str, piece: ByteSlice, destination: int) -> None:
    """Bytes of a local file appended to ``destination``: by the kernel where both files' filesystems allow it
    (no copy through this process), else read and written here."""
    try:
        with open(source, "rb") as handle:
            offset, remaining = piece.start, piece.size
            while remaining:
                try:
                    copied = os.copy_file_range(handle.fileno(), destination, min(remaining, _COPY_BLOCK), offset)
                except OSError as error:
                    if error.errno not in _NO_KERNEL_COPY:
                        raise
                    handle.seek(offset)
                    copied = os.write(destination, handle.read(min(remaining, _COPY_BLOCK)))
                if copied == 0:
                    raise InvalidWorkError(f"{piece.uri}: ends before byte {piece.end - 1}; it was cut short")
                offset += copied
                remaining -= copied
    except FileNotFoundError:
        raise InvalidWorkError(f"{piece.uri}: no such file (it was removed while the output was written)") from None


def _cut(piece: Piece, most: int) -> Iterator[Piece]:
    if isinstance(piece, bytes) or piece.size <= most:
        yield piece
        return
    for start in range(piece.start, piece.end, most):
        yield ByteSlice(piece.uri, start, min(start + most, piece.end))


def _size(piece: Piece) -> int:
    return len(piece) if isinstance(piece, bytes) else piece.size


def _is_s3(uri: str) -> bool:
    return urlparse(uri).scheme == "s3"
