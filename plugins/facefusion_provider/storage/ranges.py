"""Ranged reads ahead of a demuxer: byte ranges fetched in pieces, several at once, and a file object that serves
the demuxer's reads from them (the merge reads only the audio samples of a remote target this way)."""

from __future__ import annotations

import bisect
import io
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from fsspec.spec import AbstractBufferedFile

from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.storage.filesystems import storage_errors

ByteRange = tuple[int, int]  # bytes [start, end) of a file

# FFmpeg reads through a forward gap up to its 32 KiB buffer plus its 32 KiB short-seek threshold instead of seeking,
# so planned ranges closer than this are fetched as one.
RANGE_GAP_BYTES = 64 * 1024
RANGE_PIECE_BYTES = 4 * 1024 * 1024  # a planned range is fetched in pieces of at most this size (bounds memory)
# Ranges closer than their file's size allows at this many bytes per GET on average are joined: a request costs about
# as much time as a megabyte, so a file whose audio sits between every large frame is read whole, not frame by frame.
RANGE_BYTES_PER_GET = 1024 * 1024
# Ranged GETs in flight ahead of the reader: with the merge's segment downloads (MERGE_PREFETCH) and its part uploads
# (UPLOADS_AT_ONCE), within S3_POOL_CONNECTIONS.
RANGE_FETCHES_AT_ONCE = 6


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
        with storage_errors(uri, fs):
            data = bytes(handle._fetch_range(start, end))
        if len(data) != end - start:
            raise InvalidWorkError(
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
