"""The bounded decode -> process -> encode pipeline: flat memory, batches, order, and errors from any stage."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import av
import numpy as np
import pytest

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.worker.pipeline import QUEUE_BATCHES, Frame, run_pipeline


def _frames(count: int, produced: list[int], fail_at: int | None = None) -> Iterator[av.VideoFrame]:
    for number in range(count):
        if number == fail_at:
            raise InvalidMediaError("target.mp4: frame 7 is corrupt")
        frame = av.VideoFrame.from_ndarray(np.full((8, 8, 3), number % 256, np.uint8), format="rgb24")
        frame.pts = number * 512
        produced.append(number)
        yield frame


class Darken:
    def __init__(self, batch_size: int, fail: bool = False) -> None:
        self.batch_size = batch_size
        self.batches: list[int] = []
        self.fail = fail

    def process_batch(self, frames: list[Frame], pts: list[int]) -> list[Frame]:
        if self.fail:
            raise RuntimeError("processor crashed")
        self.batches.append(len(frames))
        return [frame // 2 for frame in frames]


def test_frames_in_flight_stay_bounded_however_long_the_segment() -> None:
    produced: list[int] = []
    encoded: list[int] = []
    in_flight: list[int] = []
    lock = threading.Lock()

    def slow_encode(frame: av.VideoFrame, pts: int) -> None:
        time.sleep(0.001)
        with lock:
            encoded.append(pts)
            in_flight.append(len(produced) - len(encoded))

    processor = Darken(batch_size=4)
    timings = run_pipeline(_frames(300, produced), slow_encode, processor)
    assert encoded == [n * 512 for n in range(300)]
    assert timings.frames == 300
    # Two queues of QUEUE_BATCHES batches, the batch being processed, one frame in each thread's hands.
    assert max(in_flight) <= 2 * QUEUE_BATCHES * 4 + 4 + 2
    assert processor.batches == [4] * 75
    assert timings.encode > 0 and timings.wall >= timings.encode


def test_processed_frames_keep_their_order_and_pts() -> None:
    received: list[tuple[int, int]] = []
    processor = Darken(batch_size=3)
    run_pipeline(
        _frames(10, []), lambda f, pts: received.append((pts, int(f.to_ndarray(format="rgb24")[0, 0, 0]))), processor
    )
    assert received == [(n * 512, n // 2) for n in range(10)]
    assert processor.batches == [3, 3, 3, 1]


def test_passthrough_hands_the_decoded_frames_to_the_encoder_unchanged() -> None:
    originals: list[av.VideoFrame] = []

    def frames() -> Iterator[av.VideoFrame]:
        for frame in _frames(5, []):
            originals.append(frame)
            yield frame

    received: list[av.VideoFrame] = []
    run_pipeline(frames(), lambda frame, pts: received.append(frame), None)
    assert [id(f) for f in received] == [id(f) for f in originals]


@pytest.mark.parametrize("stage", ["decode", "process", "encode"])
def test_an_error_in_any_stage_stops_the_pipeline_and_is_raised(stage: str) -> None:
    produced: list[int] = []

    def encode(frame: av.VideoFrame, pts: int) -> None:
        if stage == "encode":
            raise OSError("disk full")

    expected = {"decode": InvalidMediaError, "process": RuntimeError, "encode": OSError}[stage]
    frames = _frames(10_000, produced, fail_at=7 if stage == "decode" else None)
    with pytest.raises(expected):
        run_pipeline(frames, encode, Darken(batch_size=2, fail=stage == "process"))
    assert len(produced) < 100  # the decoder stopped instead of running to the end of the segment


def test_a_processor_that_loses_frames_is_an_error() -> None:
    class Lossy:
        batch_size = 2

        def process_batch(self, frames: list[Frame], pts: list[int]) -> list[Frame]:
            return frames[:1]

    with pytest.raises(RuntimeError, match="returned 1 frames for 2"):
        run_pipeline(_frames(4, []), lambda f, p: None, Lossy())


def test_an_interrupt_while_the_stages_start_stops_those_already_running(monkeypatch: pytest.MonkeyPatch) -> None:
    real_start = threading.Thread.start
    started: list[threading.Thread] = []

    def start(thread: threading.Thread) -> None:
        if started:
            raise SystemExit(143)  # what the worker's SIGTERM handler raises, here as the second stage starts
        started.append(thread)
        real_start(thread)

    produced: list[int] = []
    frames = _frames(10_000, produced)
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(SystemExit):
        run_pipeline(frames, lambda frame, pts: None, Darken(batch_size=4))
    monkeypatch.undo()

    assert not started[0].is_alive()  # the decode stage was stopped and joined, not left decoding
    frames.close()  # and let go of the frames: closing them works ("generator already executing" before)
    assert len(produced) < 100
