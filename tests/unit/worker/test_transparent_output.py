"""A transparent background end to end through ``facefusion-worker run``: the background remover's stand-in (foreground
where the red is above one half) with a fill of alpha 0, into a .mov encoded with prores_ks (ProRes 4444). Every
decoded output frame's alpha plane is the matte the stand-in gives for that frame, within a level (8-bit alpha through
ProRes's 10-bit input and 12-bit decode); the colour is the input's (an alpha-0 fill mixes nothing in). Three segments
are merged by remuxing, keeping the alpha, the frame count, timestamps and sound; a span started mid-video gives the
same frames. Any other output for a transparent fill is refused before any work is written, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
from committed import work_uri_for
from people import carphone
from readback import frame_digests, packet_payloads, rgb_frames
from standins import background_remover_standin

from facefusion_provider import storage, worker
from facefusion_provider.engine.models import matte_facts
from facefusion_provider.engine.processors.background_remover import foreground_mask, model_input
from facefusion_provider.exceptions import EXIT_INVALID_OPTION
from facefusion_provider.work.layout import output_marker_uri
from facefusion_provider.work.records import OutputMarker
from facefusion_provider.worker import cli

FRAMES, SEGMENT = 8, 3  # segments of 3, 3 and 2 frames
MODEL = "modnet"
ALPHA_TOLERANCE = 1  # levels: 8-bit alpha scaled to ProRes's 10 bits, decoded at 12 and scaled back
COLOUR_TOLERANCE = 2.0  # mean levels: the input's RGB through ProRes's 4:4:4 10-bit YUV and back
TRANSPARENT: dict[str, Any] = {
    "processors": ["background_remover"],
    "background_remover_model": MODEL,
    "background_remover_fill_color": (0, 0, 0, 0),
    "output_video_encoder": "prores_ks",
    "segment_size": SEGMENT,
}
FLAGS = ["--processors", "background_remover", "--background-remover-model", MODEL]
FLAGS += ["--background-remover-fill-color", "0", "0", "0", "0", "--segment-size", str(SEGMENT)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(models folder, target clip with a tone track)."""
    folder = tmp_path_factory.mktemp("transparent")
    background_remover_standin(folder / "models", MODEL)
    return folder / "models", carphone(folder / "carphone.mp4", frames=FRAMES, audio_rate=48000)


def rgba_frames(path: Path) -> list[npt.NDArray[np.uint8]]:
    with av.open(str(path)) as container:
        return [np.asarray(frame.to_ndarray(format="rgba"), np.uint8) for frame in container.decode(video=0)]


def stand_in_mattes(models: Path, target: Path) -> list[npt.NDArray[np.uint8]]:
    """The stand-in's matte of every target frame, as the processor makes it from the decoded RGB frame."""
    session, facts = ort.InferenceSession(str(models / f"{MODEL}.onnx")), matte_facts(MODEL)
    mattes = []
    for frame in rgb_frames(target):
        outputs = session.run(None, {"input": model_input(frame, facts)})
        mattes.append(foreground_mask(outputs, facts, frame.shape[1], frame.shape[0]))
    return mattes


def test_a_transparent_fill_gives_a_prores_4444_mov_whose_alpha_is_the_matte(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models, target = inputs
    output = tmp_path / "cut-out.mov"
    argv = ["run", "--target", str(target), "--output", str(output), "--work-root", str(tmp_path / "work")]
    argv += ["--models-dir", str(models), "--output-video-encoder", "prores_ks", *FLAGS]

    assert cli.main(argv) == 0

    with av.open(str(output)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.codec_context.pix_fmt) == ("prores", "yuva444p10le")
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["segment_count"] == 3
    marker = OutputMarker.model_validate_json(
        Path(storage.local_path(output_marker_uri(str(output))) or "").read_text()
    )
    assert marker.method == "remux"
    processed, original = rgba_frames(output), rgb_frames(target)
    mattes = stand_in_mattes(models, target)
    assert len(processed) == len(original) == FRAMES
    for after, before, matte in zip(processed, original, mattes, strict=True):
        assert 0.2 < (matte < 128).mean() < 0.9, "the stand-in finds foreground and background"
        assert np.abs(after[:, :, 3].astype(int) - matte).max() <= ALPHA_TOLERANCE
        assert np.abs(after[:, :, :3].astype(float) - before).mean() < COLOUR_TOLERANCE
    assert [(d.pts, d.seconds) for d in frame_digests(str(output))] == [
        (d.pts, d.seconds) for d in frame_digests(str(target))
    ]
    audio = packet_payloads(str(target))
    assert audio and packet_payloads(str(output)) == audio


def test_a_span_started_mid_video_gives_the_frames_of_a_run_from_frame_0(
    inputs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models, target = inputs
    monkeypatch.setenv("FACEFUSION_MODELS_DIR", str(models))
    whole = tmp_path / "whole.mov"
    worker.run([], str(target), str(whole), str(tmp_path / "whole-work"), **TRANSPARENT)
    work_root = str(tmp_path / "pieces-work")
    work_uri = work_uri_for(work_root, [], str(target), **TRANSPARENT)
    spec = worker.prepare(work_uri, [], str(target), **TRANSPARENT)
    assert len(spec.segments) == 3
    worker.swap_span(work_uri, str(target), 1, 3, span=1)  # frames 3-7 first, reached by a seek
    worker.swap_span(work_uri, str(target), 0, 1, span=0)
    pieces = tmp_path / "pieces.mov"
    worker.merge(work_uri, str(target), str(pieces))

    digests = [d.md5 for d in frame_digests(str(pieces))]
    assert len(digests) == FRAMES and digests == [d.md5 for d in frame_digests(str(whole))]
    assert (rgba_frames(pieces)[4][:, :, 3] < 128).any(), "the merged pieces keep the alpha"


@pytest.mark.parametrize(
    ("output", "encoder", "message"),
    [
        ("out.mp4", "libx264", "output: file://{tmp}/out.mp4 is a .mp4 file, which cannot carry a transparent"),
        ("out.webm", "libvpx-vp9", "output: file://{tmp}/out.webm is a .webm file, which cannot carry a transparent"),
        ("out.mov", "libx264", "options.output_video_encoder: libx264 cannot carry a transparent background"),
    ],
    ids=["mp4", "webm", "mov-libx264"],
)
def test_a_transparent_fill_with_another_output_is_refused_naming_the_field(
    output: str,
    encoder: str,
    message: str,
    inputs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, target = inputs
    argv = ["run", "--target", str(target), "--output", str(tmp_path / output), "--work-root", str(tmp_path / "work")]
    argv += ["--output-video-encoder", encoder, *FLAGS]

    assert cli.main(argv) == EXIT_INVALID_OPTION

    errors = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in errors, errors
    assert "a .mov output with output_video_encoder prores_ks (ProRes 4444), or an opaque fill (alpha 255)" in errors
    assert not (tmp_path / output).exists() and not (tmp_path / "work").exists()
