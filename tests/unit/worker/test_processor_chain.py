"""The worker runs whatever the engine's registry holds: a processor registered by a test, which reads no faces, goes
through prepare, the segments and the merge with no change to the worker, in the user's order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_processors import Darkener, Inverter, register

from facefusion_provider import worker
from facefusion_provider.engine.processors import chain
from facefusion_provider.media.decode import decode_frame
from facefusion_provider.media.images import encode_image, rgb_array
from facefusion_provider.media.probe import probe_video

from .conftest import MakeVideo


def _no_detection(*args: Any) -> None:
    raise AssertionError("no processor of the chain reads faces: the detector must not run")


def test_a_registered_processor_runs_through_the_worker_in_the_given_order(
    make_video: MakeVideo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch, face_swapper=Inverter(), face_enhancer=Darkener())
    monkeypatch.setattr(chain, "detect_faces", _no_detection)
    target = make_video(frames=11)
    source = tmp_path / "face.png"  # the inputs check wants a source for the name face_swapper: unused here
    source.write_bytes(encode_image(np.full((16, 16, 3), 90, np.uint8), "png"))
    output = tmp_path / "out.mp4"
    result = worker.run(
        [str(source)],
        target,
        str(output),
        str(tmp_path / "work"),
        processors=["face_swapper", "face_enhancer"],
        output_video_quality=100,
        segment_size=4,
    )
    assert (result.frame_count, result.segment_count) == (11, 3)
    assert not (tmp_path / "work" / "analysis").exists()  # nothing analysed, nothing stored
    probe, processed = probe_video(target, target), probe_video(str(output), str(output))
    assert processed.pts == probe.pts
    for number in range(11):
        before = rgb_array(decode_frame(target, probe, number, target)).astype(int)
        after = rgb_array(decode_frame(str(output), processed, number, str(output))).astype(int)
        # Through 4:2:0 and back: a level or two on average; the other order would be about 128 levels away.
        assert np.abs(after - (255 - before) // 2).mean() < 2, number
        assert np.abs(after - (255 - before // 2)).mean() > 60, number
