"""Segments in flight: which segment a worker takes next, its frames decoded across consecutive segments without a
pause, each segment encoded to its own file, and its commit (file, then marker) in the background while the next
segment is being worked on."""

from __future__ import annotations

import base64
import bisect
import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import TracebackType
from typing import TYPE_CHECKING

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.telemetry.metrics import WorkerMetrics
from facefusion_provider.work import liveness
from facefusion_provider.work.claims import SegmentClaims, WorkState, commit_marker, longest_free_run, scan_work
from facefusion_provider.work.layout import WorkLayout, segment_file_name
from facefusion_provider.work.records import Segment, SegmentMarker, WorkSpec, segment_label
from facefusion_provider.worker.progress import Progress

if TYPE_CHECKING:
    import av

    from facefusion_provider.media.containers import MediaSource
    from facefusion_provider.media.decode import DecodeStats
    from facefusion_provider.media.encode import VideoEncoder
    from facefusion_provider.media.hardware import DecodePlan, MediaPaths
    from facefusion_provider.media.images import StillImageEncoder

logger = logging.getLogger(__name__)

PREROLLS_KEPT = 4  # pre-rolls decoded and not yet taken by the frame processor, at most
COMMITS_AHEAD = 2  # segments encoded and waiting for their upload at most: bounds the temporary disk a worker uses


@dataclass
class SegmentPicker:
    """Chooses and claims the segments this worker works on: its own span in order; then (helping) the back half of
    the longest run of free segments anywhere, which is the tail of the span with the most work left, worked forward
    so the decoder seeks once per run it helps with while the span's owner keeps the front half."""

    spec: WorkSpec
    own: range
    claims: SegmentClaims
    layout: WorkLayout
    scan: Callable[[WorkLayout], WorkState] = scan_work
    deadline: float | None = (
        None  # liveness.clock.monotonic() after which it hands out no more segments (helping other runs)
    )
    guard: Callable[[], None] | None = None  # raises to stop the worker before its next claim (its run's lease lost)
    stop: threading.Event | None = None  # set: hand out no more segments (a standing worker told to stop drains)
    helped: set[int] = field(default_factory=set)  # segments taken outside its own span

    def has_free(self, state: WorkState) -> bool:
        return any(self.claims.is_free(segment.index, state) for segment in self.spec.segments)

    def past_deadline(self) -> bool:
        stopping = self.stop is not None and self.stop.is_set()
        return stopping or (self.deadline is not None and liveness.clock.monotonic() >= self.deadline)

    def take(self, after: int | None) -> Segment | None:
        """Claim and return the next segment to work on (the one after ``after`` when it is free), or None."""
        while not self.past_deadline():
            if self.guard is not None:
                self.guard()
            state = self.scan(self.layout)
            candidates = self._candidates(state, after)
            if not candidates:
                return None
            for index in candidates:
                if self.claims.take(index, state):
                    if storage.exists(self.layout.segment_marker(index, state.incarnation(index))):  # committed since
                        self.claims.release(index)
                        continue
                    if index not in self.own:
                        self.helped.add(index)
                        if self.own:
                            logger.info("segment %d: taken from another span's tail (helping)", index)
                    return self.spec.segments[index]
            # Every candidate was claimed by someone else since the listing: look again.
        return None

    def _candidates(self, state: WorkState, after: int | None) -> list[int]:
        def free(index: int) -> bool:
            return self.claims.is_free(index, state)

        helping = after is not None and after not in self.own
        following = None if after is None or after + 1 >= len(self.spec.segments) else after + 1
        if following is not None and (following in self.own or helping) and free(following):
            return [following]  # the decoder is there already: no seek
        own = [index for index in self.own if free(index)]
        if own:
            return own[:1]
        run = longest_free_run(range(len(self.spec.segments)), free)
        return run[len(run) // 2 :][:1]


def chosen_media_paths(spec: WorkSpec, metrics: WorkerMetrics) -> MediaPaths:
    """This machine's decode and encode paths for the work (NVDEC/NVENC or software), chosen once per span and
    counted; an NVENC encoder on a GPU known to lack NVENC raises ``InvalidOptionError`` before any frame."""
    from facefusion_provider.media.decode import opened_decode_plan
    from facefusion_provider.media.hardware import media_paths

    probe = spec.probe
    encoder = "png" if probe.still_image else spec.options.output_video_encoder  # an image work's lossless segment
    paths = media_paths(probe, encoder, frame_size(spec), os.environ)
    paths = replace(paths, decode=opened_decode_plan(paths.decode, probe.codec))
    metrics.media_path("decode", paths.decode.path)
    metrics.media_path("encode", paths.encode.path)
    return paths


class SegmentFrames:
    """The frames of the segments ``picker`` hands out, decoded by seeking only where the next segment does not
    follow the last one; a segment's frames are asked for only once its predecessor's last frame has been handed on.

    The original of each preview frame is kept for its thumbnail pair.
    """

    def __init__(
        self,
        picker: SegmentPicker,
        target: MediaSource,
        name: str,
        *,
        stats: DecodeStats,
        preview_frames: Sequence[int],
        metrics: WorkerMetrics,
        decode_plan: DecodePlan | None = None,
        preroll: int = 0,
    ) -> None:
        self._picker, self._target, self._name, self._stats = picker, target, name, stats
        self._preroll = preroll  # frames decoded before a segment reached by a seek (the face tracker's seed)
        self.prerolls: dict[int, list[av.VideoFrame]] = {}  # segment start -> its pre-roll, until taken
        self._metrics = metrics
        self._decode_plan = decode_plan
        self._preview = frozenset(preview_frames)
        self.originals: dict[int, av.VideoFrame] = {}  # preview frame number -> its original
        self.taken: list[int] = []

    def take_preroll(self, start: int) -> list[av.VideoFrame]:
        """The frames decoded before the segment starting at ``start`` (none when it followed its predecessor)."""
        return self.prerolls.pop(start, [])

    def stream(self) -> Generator[av.VideoFrame, None, None]:
        """The frames; closing the generator closes the decoder."""
        from facefusion_provider.media.decode import decode_frames

        spec = self._picker.spec
        decoder: Generator[av.VideoFrame, None, None] | None = None
        previous: int | None = None
        try:
            while (segment := self._picker.take(previous)) is not None:
                self.taken.append(segment.index)
                if decoder is None or previous is None or segment.index != previous + 1:
                    if decoder is not None:
                        decoder.close()
                    first = max(0, segment.start - self._preroll)
                    decoder = decode_frames(
                        self._target,
                        spec.probe,
                        first,
                        spec.frame_end,
                        self._name,
                        stats=self._stats,
                        plan=self._decode_plan,
                    )
                    if first < segment.start:  # handed over before the segment's first frame is yielded
                        self.prerolls[segment.start] = [next(decoder) for _ in range(first, segment.start)]
                        while len(self.prerolls) > PREROLLS_KEPT:  # segments read from stored faces take none
                            del self.prerolls[next(iter(self.prerolls))]  # the oldest
                for number in range(segment.start, segment.end):
                    began = time.perf_counter()
                    frame = next(decoder)
                    self._metrics.stage_seconds("decode", time.perf_counter() - began)
                    self._metrics.frames("decode")
                    if number in self._preview:
                        self.originals[number] = frame
                    yield frame
                previous = segment.index
        finally:
            if decoder is not None:
                decoder.close()


@dataclass
class CommitStats:
    committed: int = 0  # segments whose marker this worker created
    discarded: int = 0  # segments another worker committed first: this worker's file was deleted
    upload_seconds: float = 0.0
    bytes_written: int = 0


class Committer:
    """Commits finished segment files in a background thread, in order: the file under this writer's name, then the
    marker, created exclusively; a segment another worker committed first loses nothing but this worker's file.

    At most ``COMMITS_AHEAD`` segments wait at once (``submit`` blocks beyond that); a failed commit is raised by the
    next ``submit`` or by ``close``.
    """

    def __init__(
        self,
        spec: WorkSpec,
        layout: WorkLayout,
        claims: SegmentClaims,
        on_commit: Callable[[Segment], None],
        metrics: WorkerMetrics,
        *,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.spec, self.layout, self.claims, self._on_commit = spec, layout, claims, on_commit
        self._guard = guard
        self._metrics = metrics
        self.stats = CommitStats()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="facefusion-commit")
        self._pending: list[Future[None]] = []
        self._slots = threading.Semaphore(COMMITS_AHEAD)

    def submit(
        self, segment: Segment, path: str, frame_count: int, thumbnails: dict[int, bytes], encode_s: float
    ) -> None:
        self._raise_failed()
        self._slots.acquire()
        future = self._executor.submit(self._commit, segment, path, frame_count, thumbnails, encode_s)
        future.add_done_callback(lambda _: self._slots.release())
        self._pending.append(future)

    def wait(self) -> None:
        """Wait for every submitted commit; raise the first failure."""
        for future in self._pending:
            future.result()
        self._pending = []

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Committer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        else:  # the worker is failing: stop what has not started, finish what has (a half-done commit harms nobody)
            self._executor.shutdown(wait=True, cancel_futures=True)

    def _raise_failed(self) -> None:
        for future in self._pending:
            if future.done():
                future.result()
        self._pending = [future for future in self._pending if not future.done()]

    def _commit(
        self, segment: Segment, path: str, frame_count: int, thumbnails: dict[int, bytes], encode_s: float
    ) -> None:
        began = time.perf_counter()
        try:
            if frame_count != segment.frame_count:
                raise InvalidWorkError(
                    f"segment {segment.index}: encoded {frame_count} frames, expected {segment.frame_count}"
                )
            extension = os.path.splitext(path)[1]
            name = segment_file_name(segment.index, self.claims.holder, extension)
            size, digest = os.path.getsize(path), storage.file_sha256(path)
            index = _segment_moov(path) if extension == ".mp4" else None
            storage.put_file_checked(path, self.layout.segment_file(name), digest)  # S3 checks and keeps the sha256
            for number, thumbnail in thumbnails.items():
                storage.write_bytes_atomic(self.layout.frame_preview(number), thumbnail)
            upload_s = time.perf_counter() - began
            marker = SegmentMarker(
                work_id=self.spec.work_id,
                index=segment.index,
                start=segment.start,
                end=segment.end,
                frame_count=frame_count,
                file=name,
                sha256=digest,
                size=size,
                writer=self.claims.holder,
                timings={"encode_s": round(encode_s, 3), "upload_s": round(upload_s, 3)},
                moov=None if index is None else base64.b64encode(index[0]).decode(),
                incarnation=self.claims.incarnation(segment.index),
            )
            if self._guard is not None:
                self._guard()
            won = commit_marker(
                self.layout,
                segment.index,
                marker_bytes(marker),
                file=name,
                writer=self.claims.holder,
                incarnation=marker.incarnation,
            )
        finally:
            os.unlink(path)
        self.claims.release(segment.index)
        self.stats.upload_seconds += time.perf_counter() - began
        self._metrics.stage_seconds("upload", time.perf_counter() - began)
        if won:
            self.stats.committed += 1
            self.stats.bytes_written += size
            self._metrics.io_bytes("write", size)
            logger.info("segment %d (%s) committed", segment.index, segment.label)
            self._on_commit(segment)
        else:
            self.stats.discarded += 1
            logger.info(
                "segment %d: another worker committed it first; this worker's file was discarded", segment.index
            )


def marker_bytes(marker: SegmentMarker) -> bytes:
    return marker.model_dump_json(indent=2).encode()


class SegmentWriter:
    """The pipeline's encode stage: each frame goes into its segment's own file, which is handed to the committer
    the moment its last frame is encoded."""

    def __init__(
        self,
        spec: WorkSpec,
        folder: str,
        committer: Committer,
        frames: SegmentFrames,
        *,
        preview_frames: Sequence[int],
        metrics: WorkerMetrics,
        progress: Progress,
        own: range,
    ) -> None:
        self.spec, self.folder, self.committer, self.frames = spec, folder, committer, frames
        self._metrics, self._progress, self._own = metrics, progress, own
        self._preview = frozenset(preview_frames)
        self._frame_numbers = {pts: number for number, pts in enumerate(spec.probe.pts)}
        self._starts = [segment.start for segment in spec.segments]
        self._size = frame_size(spec)
        self._encoder: VideoEncoder | StillImageEncoder | None = None
        self._still: StillImageEncoder | None = None  # the encoder, where it writes an image work's segment
        self._path = ""
        self._segment: Segment | None = None
        self._thumbnails: dict[int, bytes] = {}  # the open segment's preview frames
        self._opened = 0.0
        self.frames_encoded = 0

    def encode(self, frame: av.VideoFrame, pts: int) -> None:
        number = self._frame_numbers[pts]
        segment = self.spec.segments[bisect.bisect_right(self._starts, number) - 1]
        if self._segment is None:
            self._open(segment)
        elif segment.index != self._segment.index:
            raise InvalidWorkError(
                f"frame {number} of segment {segment.index} arrived before segment {self._segment.index} was complete"
            )
        assert self._encoder is not None
        if self._still is not None and number in self.frames.originals:
            self._still.keep_alpha(self.frames.originals[number])
        if number in self._preview and (thumbnail := self._thumbnail(number, frame)) is not None:
            self._thumbnails[number] = thumbnail
        began = time.perf_counter()
        self._encoder.encode(frame, pts)
        self._metrics.stage_seconds("encode", time.perf_counter() - began)
        self._metrics.frames("encode")
        self.frames_encoded += 1
        if segment.index in self._own:
            self._progress.frames_done(1)
        if self._encoder.frame_count == segment.frame_count:
            self._finish()

    def abort(self) -> None:
        """Close a segment left half-written by a failure (its file goes with the temporary folder)."""
        if self._encoder is not None:
            self._encoder.abort()
            self._encoder = self._still = self._segment = None

    def _open(self, segment: Segment) -> None:
        from facefusion_provider.media.encode import VideoEncoder, encoder_settings
        from facefusion_provider.media.images import STILL_SEGMENT_EXTENSION, StillImageEncoder
        from facefusion_provider.output.remux import segment_pts_offset

        probe = self.spec.probe
        self._segment, self._thumbnails, self._opened = segment, {}, time.perf_counter()
        extension = STILL_SEGMENT_EXTENSION if probe.still_image else ".mp4"
        self._path = os.path.join(self.folder, f"{segment.index:05d}{extension}")
        if probe.still_image:
            self._encoder = self._still = StillImageEncoder(self._path)
            return
        self._encoder = VideoEncoder(
            self._path,
            encoder_settings(self.spec.options, probe, self._size),
            width=self._size[0],
            height=self._size[1],
            frame_rate=Fraction(probe.frame_rate),
            time_base=Fraction(probe.time_base),
            pts_offset=segment_pts_offset(probe, segment.start),
            label=segment_label(self.spec, segment),
        )

    def _finish(self) -> None:
        assert self._encoder is not None and self._segment is not None
        count = self._encoder.close()
        path = self._path
        encode_s = time.perf_counter() - self._opened
        segment, thumbnails = self._segment, self._thumbnails
        self._encoder = self._still = self._segment = None
        self.committer.submit(segment, path, count, thumbnails, encode_s)

    def _thumbnail(self, number: int, output: av.VideoFrame) -> bytes | None:
        from facefusion_provider.media.preview import thumbnail_pair

        original = self.frames.originals.pop(number, None)
        probe = self.spec.probe
        return None if original is None else thumbnail_pair(original, output, probe.rotation, beside=probe.still_image)


def frame_size(spec: WorkSpec) -> tuple[int, int]:
    """The size of the work's output frames, as its processors and ``output_video_scale`` (an image's
    ``output_image_scale``) make them."""
    from facefusion_provider.engine.processors.registry import output_size

    return output_size(spec.frame_options(), spec.probe.width, spec.probe.height)


def _segment_moov(path: str) -> tuple[bytes, int] | None:
    """The encoded segment's moov, for its marker (imported here: the CLI's help loads no numpy)."""
    from facefusion_provider.media.mp4index import read_moov

    return read_moov(path)
