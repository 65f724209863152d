"""Bad targets fail with a clear, non-retryable error that names the file and the problem; nothing is written at the
output path (no video, no preview, no marker)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest

from facefusion_provider.exceptions import EXIT_INPUT_MISSING, EXIT_INVALID_MEDIA
from facefusion_provider.media.images import encode_image
from facefusion_provider.worker import cli

from .conftest import MakeVideo


def _text_file(folder: Path, make_video: MakeVideo) -> Path:
    path = folder / "notes.mp4"
    path.write_text("these are meeting notes, not a video\n")
    return path


def _truncated(folder: Path, make_video: MakeVideo) -> Path:
    data = Path(make_video(frames=40, audio_rate=48000, name="whole.mp4")).read_bytes()
    path = folder / "cut.mp4"
    path.write_bytes(data[: len(data) // 2])  # the index (moov) is at the end: half a download
    return path


def _truncated_faststart(folder: Path, make_video: MakeVideo) -> Path:
    whole = make_video(frames=60, name="whole.mp4")
    faststart = folder / "faststart.mp4"
    with av.open(whole) as source, av.open(str(faststart), "w", options={"movflags": "+faststart"}) as copy:
        stream = copy.add_stream_from_template(source.streams.video[0])
        for packet in source.demux(source.streams.video[0]):
            if packet.size:
                packet.stream = stream
                copy.mux(packet)
    path = folder / "cut-faststart.mp4"
    data = faststart.read_bytes()
    path.write_bytes(data[: len(data) * 6 // 10])  # index first, the last frames missing
    return path


def _image(folder: Path, make_video: MakeVideo) -> Path:
    path = folder / "photo.mp4"  # named as a video: an image target is one named as an image (test_image_targets.py)
    path.write_bytes(encode_image(np.zeros((48, 64, 3), np.uint8), "png"))
    return path


def _audio_only(folder: Path, make_video: MakeVideo) -> Path:
    path = folder / "voice.m4a"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=48000)
        stream.layout = "mono"
        for number in range(10):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 48000, number * 1024
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def _missing(folder: Path, make_video: MakeVideo) -> Path:
    return folder / "never-uploaded.mp4"


BAD_TARGETS: dict[str, tuple[Callable[[Path, MakeVideo], Path], int, str]] = {
    "text-file-named-mp4": (_text_file, EXIT_INVALID_MEDIA, r"notes\.mp4: not a readable video file"),
    "truncated": (_truncated, EXIT_INVALID_MEDIA, r"cut\.mp4: not a readable video file .*truncated"),
    "truncated-index-first": (
        _truncated_faststart,
        EXIT_INVALID_MEDIA,
        r"cut-faststart\.mp4: is truncated: the header lists 60 frames, only \d+ can be read",
    ),
    "image-named-as-a-video": (_image, EXIT_INVALID_MEDIA, r"photo\.mp4: is a still image .*not a video"),
    "audio-only": (_audio_only, EXIT_INVALID_MEDIA, r"voice\.m4a: has no video stream \(found: audio\)"),
    "missing": (_missing, EXIT_INPUT_MISSING, r"target: .*never-uploaded\.mp4 does not exist"),
}


@pytest.mark.parametrize("case", list(BAD_TARGETS))
def test_bad_target_is_a_clear_error_and_writes_nothing(
    case: str, make_video: MakeVideo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, exit_code, message = BAD_TARGETS[case]
    target = make(tmp_path, make_video)
    out = tmp_path / "out"
    argv = ["run", "--target", str(target), "--output", str(out / "result.mp4"), "--work-root", str(tmp_path / "work")]
    assert cli.main([*argv, "--processors"]) == exit_code
    captured = capsys.readouterr()
    assert captured.out == ""
    report = json.loads(captured.err.strip().splitlines()[-1])
    assert report["retryable"] is False
    assert report["failure_class"] in ("invalid_media", "input_missing")
    assert re.search(message, report["message"]), report["message"]
    assert not out.exists() or list(out.iterdir()) == []
