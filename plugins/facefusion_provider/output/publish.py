"""The merge's output, published atomically: never a partial file at the output URI, and an MP4/MOV with its moov in
front (playable while it downloads).

An S3 output uploads while it is written: the muxer writes the MP4 with its moov last (``moov_last``), each part of
the media data goes up as a part of a multipart upload once the file has grown past it, and when the muxer has
finished, the head (ftyp, the moov moved in front by ``media.faststart``, mdat's header) and the first part go up as
part 1 and the upload completes; until then the key shows nothing, and a failure aborts the upload. Any other output
is written whole first (FFmpeg moving the moov in front in place), then renamed into place beside a local
destination, or uploaded at once to another store.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import posixpath
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.media.faststart import FASTSTART_EXTENSIONS, faststart_head, media_start, moov_at_end
from facefusion_provider.media.mp4index import UnsupportedLayoutError
from facefusion_provider.output import MergeResult
from facefusion_provider.work import leases
from facefusion_provider.work.layout import WorkLayout, output_marker_uri, preview_uri_of
from facefusion_provider.work.records import OutputMarker, RunHolder, WorkSpec

if TYPE_CHECKING:
    from facefusion_provider.media.containers import MediaSource

logger = logging.getLogger(__name__)

DEFAULT_PART_BYTES = 16 * 1024 * 1024
FOLLOW_SECONDS = 0.2  # how often the growing file is looked at while the muxer writes
HEAD_PROBE_BYTES = 64 * 1024  # the muxer's first bytes, where the media data's start is read
_READ_BYTES = 8 * 1024 * 1024  # a block of the hash


def _make_output_folder(directory: str) -> None:
    """The output's folder, made before anything is written; under an allowed output prefix without following, or
    making, a symbolic link (an ``InvalidOptionError`` names one)."""
    root = storage.confining_prefix(directory)
    if root is None:
        os.makedirs(directory, exist_ok=True)
        return
    with storage.confined_folder(root, directory):
        pass


def part_bytes(expected_bytes: int) -> int:
    """The part size for an output of about ``expected_bytes``: 16 MiB, larger where S3's part limit needs it."""
    return max(storage.UPLOAD_MIN_PART_BYTES, DEFAULT_PART_BYTES, -(-2 * expected_bytes // storage.UPLOAD_MAX_PARTS))


@dataclass(frozen=True)
class FinishedOutput:
    """The output as it will be published: ``head``, then bytes ``[start, end)`` of the local file ``path``."""

    head: bytes
    path: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return len(self.head) + self.end - self.start

    def open(self) -> IO[bytes]:
        return cast("IO[bytes]", _JoinedReader(self))  # a raw binary file; typeshed's IO[bytes] is nominal

    def sha256(self) -> str:
        digest = hashlib.sha256(self.head)
        with open(self.path, "rb") as handle:
            handle.seek(self.start)
            remaining = self.end - self.start
            while remaining and (block := handle.read(min(remaining, _READ_BYTES))):
                digest.update(block)
                remaining -= len(block)
        return digest.hexdigest()

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the published file."""
        from_head = self.head[start:end]
        if end <= len(self.head):
            return from_head
        with open(self.path, "rb") as handle:
            offset = max(start, len(self.head)) - len(self.head)
            handle.seek(self.start + offset)
            rest = handle.read(min(end, self.size) - len(self.head) - offset)
        return from_head + rest


class OutputPublisher:
    """Publishes one output at ``uri``: the muxer writes ``path``; ``finish()`` returns the file as it will be
    published (to check it); ``publish()`` makes it appear at ``uri`` at once. Leaving the ``with`` block without
    ``publish()`` leaves nothing at ``uri``: an upload is aborted, every temporary file deleted.

    ``expected_bytes`` sizes the upload's parts; ``folder`` holds the temporary files of a remote output.
    """

    def __init__(self, uri: str, folder: str, *, expected_bytes: int) -> None:
        self.uri = uri
        extension = posixpath.splitext(urlparse(uri).path)[1]
        self._destination = storage.local_path(uri)
        if self._destination is not None:
            directory, name = os.path.split(self._destination)
            _make_output_folder(directory)
            self.path = os.path.join(directory, f".{name}.partial-{uuid.uuid4().hex}{extension}")
        else:
            self.path = os.path.join(folder, "output" + extension)
        streams = extension[1:].lower() in FASTSTART_EXTENSIONS
        self._upload = storage.multipart_upload(uri) if streams else None
        self._follower = None if self._upload is None else _MediaFollower(self.path, self._upload, expected_bytes)
        self._finished: FinishedOutput | None = None
        self.published = False

    @property
    def written_where(self) -> str:
        """What a full disk while the output is written names: the output, or the scratch copy a remote one is made in."""
        return self.uri if self._destination is not None else f"{self.path} (this worker's scratch copy of {self.uri})"

    @property
    def moov_last(self) -> bool:
        """Whether the muxer must write the moov after the media data (it is moved in front when published)."""
        return self._upload is not None

    def __enter__(self) -> OutputPublisher:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._follower is not None:
            self._follower.close(abort=not self.published)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def finish(self) -> FinishedOutput:
        """Once the muxer has closed ``path``: the output as it will be published."""
        if self._follower is not None:
            self._follower.stop()
        finished = self._with_moov_first() if self.moov_last else None
        if finished is None:
            finished = FinishedOutput(b"", self.path, 0, os.path.getsize(self.path))
        self._finished = finished
        return finished

    def _with_moov_first(self) -> FinishedOutput | None:
        """The muxed file with its moov moved in front; None where it is not laid out as the muxer writes it."""
        with open(self.path, "rb") as handle:
            layout = moov_at_end(handle)
            try:
                head = None if layout is None else faststart_head(handle, layout)
            except UnsupportedLayoutError as error:
                head = None
                logger.warning("%s: %s", self.uri, error)
        if layout is None or head is None:
            logger.warning("%s: published with its moov where the muxer wrote it", self.uri)
            return None
        return FinishedOutput(head, self.path, layout.media_start, layout.media_end)

    def publish(self) -> None:
        """``uri`` becomes the finished output, all at once."""
        finished = self._finished
        if finished is None:
            raise RuntimeError("finish() the output before publishing it")
        if self._follower is not None:
            self._follower.complete(finished)
        elif self._destination is not None:
            storage.replace_confined(finished.path, self._destination)  # through no link swapped in meanwhile
        else:
            storage.put_file_atomic(finished.path, self.uri)
        self.published = True


class _MediaFollower:
    """Uploads the parts of a growing MP4's media data as the muxer finishes them, then the rest and the head.

    Parts count from the media data's start: part 1 is the head and the first ``part_bytes`` of media, part ``n``
    the media's bytes ``[(n - 1) * part_bytes, n * part_bytes)``. A part read while the muxer was closing may hold
    the moov's bytes; ``complete`` uploads it again, cut at the media's end.
    """

    def __init__(self, path: str, upload: storage.MultipartUpload, expected_bytes: int) -> None:
        self._path, self._upload = path, upload
        self.part_bytes = part_bytes(expected_bytes)
        self._executor = ThreadPoolExecutor(storage.UPLOADS_AT_ONCE, thread_name_prefix="facefusion-upload")
        self._slots = threading.BoundedSemaphore(storage.UPLOADS_AT_ONCE)  # parts held in memory at once
        self._uploads: dict[int, Future[None]] = {}
        self._media_start: int | None = None
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self.streamed_while_writing = 0
        self._thread = threading.Thread(target=self._follow, name="facefusion-follow", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            next_part = 2
            while not self._stopping.wait(FOLLOW_SECONDS):
                start = self._media_start if self._media_start is not None else self._read_media_start()
                if start is None:
                    continue
                while not self._stopping.is_set() and _size(self._path) >= start + next_part * self.part_bytes:
                    self._submit(next_part, self._read_media(start, next_part))
                    self.streamed_while_writing += 1
                    next_part += 1
        except BaseException as error:  # reported by stop(); the upload is aborted on the way out
            self._error = error

    def _read_media_start(self) -> int | None:
        with contextlib.suppress(FileNotFoundError), open(self._path, "rb") as handle:
            self._media_start = media_start(handle.read(HEAD_PROBE_BYTES))
        return self._media_start

    def _read_media(self, start: int, number: int) -> bytes:
        with open(self._path, "rb") as handle:
            handle.seek(start + (number - 1) * self.part_bytes)
            return handle.read(self.part_bytes)

    def _submit(self, number: int, data: bytes) -> None:
        earlier = self._uploads.get(number)
        if earlier is not None:
            earlier.result()  # a part sent again must land after the first: S3 keeps the one completed last
        self._slots.acquire()
        future = self._executor.submit(self._upload.put_part, number, data)
        future.add_done_callback(lambda _: self._slots.release())
        self._uploads[number] = future

    def stop(self) -> None:
        """No more parts while the muxer writes; raises what went wrong while following."""
        self._stopping.set()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def complete(self, finished: FinishedOutput) -> None:
        """Uploads the parts not uploaded yet (part 1 last of all) and completes the upload."""
        head, media, size = len(finished.head), finished.end - finished.start, self.part_bytes
        count = max(1, -(-media // size))
        # Streamed parts hold media bytes only if the media starts where the follower read it would.
        streamed = bool(finished.head) and self._media_start == finished.start
        for number in range(2, count + 1):
            end = min(number * size, media)
            if not (streamed and number in self._uploads and end == number * size):
                self._submit(number, finished.read(head + (number - 1) * size, head + end))
        self._submit(1, finished.read(0, head + min(size, media)))
        for future in list(self._uploads.values()):
            future.result()
        self._upload.complete(count)
        logger.info(
            "%s: %d parts of %d MiB, %d of them uploaded while the muxer wrote",
            self._upload.uri,
            count,
            size // 2**20,
            self.streamed_while_writing,
        )

    def close(self, *, abort: bool) -> None:
        self._stopping.set()
        self._thread.join()
        self._executor.shutdown(wait=True, cancel_futures=True)
        if abort:
            try:
                self._upload.abort()
            except Exception as error:  # the run has failed already; S3's lifecycle rules reap what is left
                logger.warning("%s: could not abort upload %s: %s", self._upload.uri, self._upload.upload_id, error)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class _JoinedReader(io.RawIOBase):
    """A read-only file of the published bytes of ``finished``: its head, then its part of the muxed file."""

    def __init__(self, finished: FinishedOutput) -> None:
        self._finished, self._position = finished, 0
        self._file = open(finished.path, "rb")  # noqa: SIM115 - closed by close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._finished.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        head, finished = self._finished.head, self._finished
        if self._position < len(head):
            data = head[self._position : self._position + len(buffer)]
        else:
            self._file.seek(finished.start + self._position - len(head))
            data = self._file.read(max(0, min(len(buffer), finished.size - self._position)))
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()


def finish_merge(
    spec: WorkSpec,
    layout: WorkLayout,
    output_uri: str,
    *,
    size: int,
    sha256: str | None,
    method: str,
    timings: dict[str, float],
    began: float,
    segment_count: int,
    how: str,
    preview: Future[bytes],
) -> MergeResult:
    """The one tail of every merge, once the output is in place: its preview (``preview``: made beside the join from
    the segments' thumbnails, ``preview_sheet``), then its marker (last: it says the output is done), the merge's
    timings in the marker and in one log line."""
    preview_uri = preview_uri_of(output_uri)
    published = time.perf_counter()
    storage.write_bytes_atomic(preview_uri, preview.result())
    finished = time.perf_counter()
    rounded = {
        key: round(value, 3)
        for key, value in {**timings, "preview_s": finished - published, "total_s": finished - began}.items()
    }
    frames = spec.frame_end - spec.frame_start
    marker = OutputMarker(
        work_id=spec.work_id,
        output_uri=output_uri,
        frame_count=frames,
        sha256=sha256,
        size=size,
        timings=rounded,
        method=method,
        run=_run_of(layout, output_uri),
        written_at=datetime.now(UTC),
    )
    storage.write_bytes_atomic(output_marker_uri(output_uri), marker.model_dump_json(indent=2).encode())
    logger.info(
        "merged %d frames from %d segments into %s (%.1f MB) %s in %.2f s; preview %s",
        frames,
        segment_count,
        output_uri,
        size / 1e6,
        how,
        finished - began,
        preview_uri,
    )
    return MergeResult(output_uri, preview_uri, frames, skipped=False, timings=rounded, method=method)


def _run_of(layout: WorkLayout, output_uri: str) -> RunHolder | None:
    """The run this output is written for: the newest lease on the work that names it (a task's, a standing worker's
    or a CLI run's merge all hold one); None when no lease names it."""
    named = [held.lease for held in leases.run_leases(layout) if held.lease.output_uri == output_uri]
    return max(named, key=lambda lease: lease.created_at).holder if named else None


def preview_sheet(spec: WorkSpec, layout: WorkLayout) -> bytes:
    """The contact sheet from the thumbnail pairs that the segments stored for the preview frames they hold."""
    from facefusion_provider.media.preview import contact_sheet, preview_frames

    columns: list[MediaSource] = []
    for number in preview_frames(spec.frame_start, spec.frame_end):
        uri = layout.frame_preview(number)
        if storage.exists(uri):
            columns.append(io.BytesIO(storage.read_bytes(uri)))
        else:
            logger.warning("preview frame %d has no thumbnail (%s); the preview leaves it out", number, uri)
    if not columns:
        raise InvalidWorkError(f"work {spec.work_id}: no preview frame has a thumbnail; rerun its segments")
    return contact_sheet(columns)
