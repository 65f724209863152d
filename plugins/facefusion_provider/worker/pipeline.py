"""The bounded per-span pipeline: a decode thread, batched processing, an encode thread, and small queues between
them, so memory stays flat however long the span is. Each stage's busy time is measured."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import av
import numpy as np
import numpy.typing as npt

from facefusion_provider.media.images import rgb_array

if TYPE_CHECKING:
    from facefusion_provider.engine.paste import PendingFrame

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
    from facefusion_provider.worker.write_back import write_back  # OpenCV's load: only where frames are processed

    images = [rgb_array(frame) for frame in batch]
    results = processor.process_batch(images, pts)
    if len(results) != len(batch):
        raise RuntimeError(f"the frame processor returned {len(results)} frames for {len(batch)}")
    return [
        (write_back(result, image, original), p)
        for result, image, original, p in zip(results, images, batch, pts, strict=True)
    ]


def _pts(frame: av.VideoFrame) -> int:
    if frame.pts is None:
        raise RuntimeError("a decoded frame has no pts")
    return frame.pts
