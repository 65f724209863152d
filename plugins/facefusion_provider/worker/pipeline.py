"""The bounded per-span pipeline: a decode thread, batched processing, an encode thread, and small queues between
them, so memory stays flat however long the span is. Each stage's busy time is measured."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import av
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.paste import PendingFrame, YuvMatrix, changed_box, paste_into_yuv420
from facefusion_provider.media.images import rgb_array, rgb_frame, rgba_frame
from facefusion_provider.media.planes import YUV420_FORMATS, described_like, plane_bytes, writable_copy, yuv420_colour

Frame = npt.NDArray[np.uint8]  # H x W x 3 RGB, the engine's frame (x 4, RGBA, where the output is transparent)
QUEUE_BATCHES = 1  # batches of frames each queue holds at most: one ahead of the stage that takes them
PASS_THROUGH_BATCH = 8  # frames handed on together when nothing processes them
_POLL_SECONDS = 0.1


class FrameProcessor(Protocol):
    """Processes a batch of RGB frames; ``pts`` are their timestamps in the target (which frames they are)."""

    batch_size: int

    def process_batch(self, frames: list[Frame], pts: list[int]) -> Sequence[Frame | PendingFrame]: ...


@dataclass
class StageTimings:
    """Seconds each stage was busy (not waiting on a queue), and the wall time of the whole span."""

    decode: float = 0.0
    process: float = 0.0
    encode: float = 0.0
    wall: float = 0.0
    frames: int = 0

    def as_dict(self) -> dict[str, float]:
        return {"decode_s": self.decode, "process_s": self.process, "encode_s": self.encode, "pipeline_s": self.wall}


@dataclass
class _Pipe:
    """A bounded queue that gives up as soon as another stage failed."""

    failed: threading.Event
    items: queue.Queue[Any] = field(default_factory=queue.Queue)

    def put(self, item: Any) -> None:
        while not self.failed.is_set():
            try:
                self.items.put(item, timeout=_POLL_SECONDS)
                return
            except queue.Full:
                continue
        raise _Stopped

    def get(self) -> Any:
        while not self.failed.is_set():
            try:
                return self.items.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
        raise _Stopped


class _Stopped(Exception):
    """Another stage failed; this one stops quietly and the first error is raised."""


_END = object()


def run_pipeline(
    frames: Iterator[av.VideoFrame],
    encode: Callable[[av.VideoFrame, int], None],
    processor: FrameProcessor | None,
) -> StageTimings:
    """Decode ``frames`` in a thread, run ``processor`` on batches (or pass frames through untouched when None), and
    hand each result with its original pts to ``encode`` in another thread."""
    batch_size = processor.batch_size if processor is not None else PASS_THROUGH_BATCH
    failed = threading.Event()
    decoded = _Pipe(failed, queue.Queue(maxsize=QUEUE_BATCHES * batch_size))
    processed = _Pipe(failed, queue.Queue(maxsize=QUEUE_BATCHES * batch_size))
    timings = StageTimings()
    errors: list[BaseException] = []
    started = time.perf_counter()

    def guarded(stage: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                stage()
            except _Stopped:
                pass
            except BaseException as error:
                errors.append(error)
                failed.set()

        return run

    def decode_stage() -> None:
        while True:
            begin = time.perf_counter()
            frame = next(frames, None)
            timings.decode += time.perf_counter() - begin
            if frame is None:
                decoded.put(_END)
                return
            decoded.put(frame)

    def encode_stage() -> None:
        while (item := processed.get()) is not _END:
            frame, pts = item
            begin = time.perf_counter()
            encode(frame, pts)
            timings.encode += time.perf_counter() - begin
            timings.frames += 1

    def process_stage() -> None:
        batch: list[av.VideoFrame] = []
        while True:
            item = decoded.get()
            if item is not _END:
                batch.append(item)
            if batch and (item is _END or len(batch) >= batch_size):
                begin = time.perf_counter()
                results = _process(batch, processor)
                timings.process += time.perf_counter() - begin
                for result in results:
                    processed.put(result)
                batch = []
            if item is _END:
                processed.put(_END)
                return

    threads = [threading.Thread(target=guarded(stage), daemon=True) for stage in (decode_stage, encode_stage)]
    try:
        for thread in threads:
            thread.start()
        guarded(process_stage)()
    except BaseException:  # interrupted outside the stages (SIGTERM while a thread starts): stop the others too
        failed.set()
        raise
    finally:
        for thread in threads:
            if thread.ident is not None:  # started
                thread.join()
    timings.wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return timings


def _process(batch: list[av.VideoFrame], processor: FrameProcessor | None) -> list[tuple[av.VideoFrame, int]]:
    """Pass-through keeps the decoded frames (no colour conversion, so lossless output is bit-exact)."""
    pts = [_pts(frame) for frame in batch]
    if processor is None:
        return list(zip(batch, pts, strict=True))
    images = [rgb_array(frame) for frame in batch]
    results = processor.process_batch(images, pts)
    if len(results) != len(batch):
        raise RuntimeError(f"the frame processor returned {len(results)} frames for {len(batch)}")
    return [
        (write_back(result, image, original), p)
        for result, image, original, p in zip(results, images, batch, pts, strict=True)
    ]


def write_back(result: Frame | PendingFrame, image: Frame, original: av.VideoFrame) -> av.VideoFrame:
    """The frame to encode for ``result`` (the processor's output for ``image``, itself ``original`` as RGB).

    Unchanged: ``original`` itself, bit-exact. Pending (``PendingFrame``): a copy of ``original``'s YUV planes with
    only its patches' rectangle converted back and replaced, and its crops pasted straight in, so nothing is converted
    whole. RGBA (a transparent background) or resized (an upscaler, ``output_video_scale``): a new frame with
    ``original``'s colour description.
    Changed: ``original`` with only the changed rectangle (even-aligned) converted back and replaced in its planes, so
    every pixel outside it is the decoded one; formats other than 8-bit 4:2:0 are converted back whole, as before.
    """
    if isinstance(result, PendingFrame):
        colour = yuv420_colour(original)
        if colour is not None:
            written, planes = writable_copy(original)
            patched = result.patched_region()
            if patched is not None:
                _replace_region(planes, *patched, original)
            luma, *chroma = planes
            if len(chroma) == 1:  # NV12: U and V interleaved, one two-channel plane
                chroma = [chroma[0].reshape(chroma[0].shape[0], -1, 2)]
            for paste in result.pastes:
                paste_into_yuv420(luma, chroma, paste, YuvMatrix(*colour))
            return written
        result = result.rgb()  # a colour matrix the planes' paste does not know: written in RGB, converted back
    if result.shape[2:] == (4,):  # RGBA, a transparent output's (the encoder takes its alpha): converted whole
        return described_like(rgba_frame(result), original)
    if result.shape != image.shape:
        return described_like(rgb_frame(result), original)
    box = changed_box(image, result) if result is not image else None
    if box is None:
        return original
    if original.format.name not in YUV420_FORMATS or original.width % 2 or original.height % 2:
        return described_like(rgb_frame(result), original)
    x1, y1, x2, y2 = box
    x1, y1, x2, y2 = x1 & ~1, y1 & ~1, min(original.width, x2 + (x2 & 1)), min(original.height, y2 + (y2 & 1))
    written, planes = writable_copy(original)
    _replace_region(planes, (x1, y1, x2, y2), result[y1:y2, x1:x2], original)
    return written


def _replace_region(
    planes: list[npt.NDArray[np.uint8]], box: tuple[int, int, int, int], pixels: Frame, original: av.VideoFrame
) -> None:
    """``pixels`` (RGB, the even-aligned ``box`` of the frame) converted as ``original`` is and written into its
    ``planes``."""
    x1, y1 = box[:2]
    region = described_like(rgb_frame(pixels), original).reformat(format=original.format.name)
    for plane, patch in zip(planes, plane_bytes(region), strict=True):
        # A plane's rows and bytes are in proportion to the frame's (chroma: half the rows; half the bytes, or all
        # of them where U and V are interleaved).
        top, left = y1 * plane.shape[0] // original.height, x1 * plane.shape[1] // original.width
        plane[top : top + patch.shape[0], left : left + patch.shape[1]] = patch


def _pts(frame: av.VideoFrame) -> int:
    if frame.pts is None:
        raise RuntimeError("a decoded frame has no pts")
    return frame.pts
