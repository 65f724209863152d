"""A transparent background end to end through ``facefusion-worker run``: the background remover's stand-in (foreground
where the red is above one half) with a fill of alpha 0, into a .mov encoded with prores_ks (ProRes 4444) and into a
.webm encoded with libvpx-vp9 (VP9 with alpha, lossless here). Every decoded output frame's alpha plane is the matte the
stand-in gives for that frame, within a level (ProRes: 8-bit alpha through its 10-bit input and 12-bit decode); the
colour is the input's (an alpha-0 fill mixes nothing in). Three segments are merged by remuxing, keeping the alpha, the
frame count, timestamps (a .webm's to its milliseconds) and, in the .mov, the sound (a .webm cannot hold the target's
AAC: the remux leaves it out). A span started mid-video gives the same frames. Any other output for a transparent fill
is refused before any work is written, naming the field; so is a work prepared for an encoder without alpha."""

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
from facefusion_provider.exceptions import EXIT_INVALID_OPTION, InvalidOptionError
from facefusion_provider.media.images import encode_output_image, read_picture
from facefusion_provider.work.layout import WorkLayout, output_marker_uri
from facefusion_provider.work.records import OutputMarker
from facefusion_provider.worker import cli

FRAMES, SEGMENT = 8, 3  # segments of 3, 3 and 2 frames
MODEL = "modnet"
# (extension, encoder): most levels a decoded alpha differs from the matte, mean levels the colour from the input's
ALPHA_OUTPUTS = {
    ("mov", "prores_ks"): (1, 2.0),  # 4:4:4 at 10 bits
    ("webm", "libvpx-vp9"): (1, 3.0),  # lossless (its alpha within a level of the RGBA given), its colour at 4:2:0
}
FLAGS = ["--processors", "background_remover", "--background-remover-model", MODEL]
FLAGS += ["--background-remover-fill-color", "0", "0", "0", "0", "--segment-size", str(SEGMENT)]
FLAGS += ["--output-video-quality", "100"]


def transparent(encoder: str) -> dict[str, Any]:
    return {
        "processors": ["background_remover"],
        "background_remover_model": MODEL,
        "background_remover_fill_color": (0, 0, 0, 0),
        "output_video_encoder": encoder,
        "output_video_quality": 100,
        "segment_size": SEGMENT,
    }


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(models folder, target clip with a tone track)."""
    folder = tmp_path_factory.mktemp("transparent")
    background_remover_standin(folder / "models", MODEL)
    return folder / "models", carphone(folder / "carphone.mp4", frames=FRAMES, audio_rate=48000)


def rgba_frames(path: Path) -> list[npt.NDArray[np.uint8]]:
    """Every frame as RGBA; VP9 by libvpx's decoder, which decodes the alpha that FFmpeg's own vp9 decoder ignores."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.codec_context.name != "vp9":
            frames = list(container.decode(stream))
        else:
            decoder = av.CodecContext.create("libvpx-vp9", "r")
            frames = [frame for packet in container.demux(stream) if packet.size for frame in decoder.decode(packet)]
            frames += decoder.decode(None)
    return [np.asarray(frame.to_ndarray(format="rgba"), np.uint8) for frame in frames]


def stand_in_mattes(models: Path, target: Path) -> list[npt.NDArray[np.uint8]]:
    """The stand-in's matte of every target frame, as the processor makes it from the decoded RGB frame."""
    session, facts = ort.InferenceSession(str(models / f"{MODEL}.onnx")), matte_facts(MODEL)
    mattes = []
    for frame in rgb_frames(target):
        outputs = session.run(None, {"input": model_input(frame, facts)})
        mattes.append(foreground_mask(outputs, facts, frame.shape[1], frame.shape[0]))
    return mattes


@pytest.mark.parametrize(("extension", "encoder"), list(ALPHA_OUTPUTS), ids=["prores-mov", "vp9-webm"])
def test_a_transparent_fill_gives_an_output_whose_alpha_is_the_matte(
    extension: str, encoder: str, inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models, target = inputs
    output = tmp_path / f"cut-out.{extension}"
    argv = ["run", "--target", str(target), "--output", str(output), "--work-root", str(tmp_path / "work")]
    argv += ["--models-dir", str(models), "--output-video-encoder", encoder, *FLAGS]

    assert cli.main(argv) == 0

    assert json.loads(capsys.readouterr().out.splitlines()[-1])["segment_count"] == 3
    marker = OutputMarker.model_validate_json(
        Path(storage.local_path(output_marker_uri(str(output))) or "").read_text()
    )
    assert marker.method == "remux"
    with av.open(str(output)) as container:
        tags = {key.lower(): value for key, value in container.streams.video[0].metadata.items()}
    assert extension != "webm" or tags.get("alpha_mode") == "1", "players read Matroska's AlphaMode to show the alpha"
    alpha_tolerance, colour_tolerance = ALPHA_OUTPUTS[extension, encoder]
    processed, original = rgba_frames(output), rgb_frames(target)
    mattes = stand_in_mattes(models, target)
    assert len(processed) == len(original) == FRAMES
    for after, before, matte in zip(processed, original, mattes, strict=True):
        assert 0.2 < (matte < 128).mean() < 0.9, "the stand-in finds foreground and background"
        assert np.abs(after[:, :, 3].astype(int) - matte).max() <= alpha_tolerance
        assert np.abs(after[:, :, :3].astype(float) - before).mean() < colour_tolerance
    times, target_times = (
        [d.seconds for d in frame_digests(str(output))],
        [d.seconds for d in frame_digests(str(target))],
    )
    precision = 0.0005 if extension == "webm" else 0.0  # Matroska keeps milliseconds
    assert len(times) == FRAMES and np.abs(np.subtract(times, target_times)).max() <= precision
    audio = packet_payloads(str(target))
    assert audio and packet_payloads(str(output)) == (audio if extension == "mov" else [])


@pytest.mark.parametrize(("extension", "encoder"), list(ALPHA_OUTPUTS), ids=["prores-mov", "vp9-webm"])
def test_a_span_started_mid_video_gives_the_frames_of_a_run_from_frame_0(
    extension: str, encoder: str, inputs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models, target = inputs
    monkeypatch.setenv("FACEFUSION_MODELS_DIR", str(models))
    options = transparent(encoder)
    whole = tmp_path / f"whole.{extension}"
    worker.run([], str(target), str(whole), str(tmp_path / "whole-work"), **options)
    work_root = str(tmp_path / "pieces-work")
    work_uri = work_uri_for(work_root, [], str(target), **options)
    spec = worker.prepare(work_uri, [], str(target), **options)
    assert len(spec.segments) == 3
    worker.swap_span(work_uri, str(target), 1, 3, span=1)  # frames 3-7 first, reached by a seek
    worker.swap_span(work_uri, str(target), 0, 1, span=0)
    pieces = tmp_path / f"pieces.{extension}"
    worker.merge(work_uri, str(target), str(pieces))

    merged = rgba_frames(pieces)
    assert len(merged) == FRAMES and all(np.array_equal(a, b) for a, b in zip(merged, rgba_frames(whole), strict=True))
    assert (merged[4][:, :, 3] < 128).any(), "the merged pieces keep the alpha"


@pytest.mark.parametrize(
    ("output", "encoder", "message"),
    [
        ("out.mp4", "libx264", "output: file://{tmp}/out.mp4 is a .mp4 file, which cannot carry a transparent"),
        ("out.mkv", "libvpx-vp9", "output: file://{tmp}/out.mkv is a .mkv file, which cannot carry a transparent"),
        ("out.mov", "libx264", "options.output_video_encoder: libx264 cannot carry a transparent background"),
    ],
    ids=["mp4", "mkv", "mov-libx264"],
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
    assert "use a .mov output with output_video_encoder prores_ks (ProRes 4444) or a .webm with libvpx-vp9" in errors
    assert not (tmp_path / output).exists() and not (tmp_path / "work").exists()


def test_a_transparent_work_prepared_for_an_encoder_without_alpha_is_refused_at_prepare(
    inputs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``prepare`` alone (no output to check: the CLI's prepare command) still refuses it, naming the field."""
    models, target = inputs
    monkeypatch.setenv("FACEFUSION_MODELS_DIR", str(models))
    options = transparent("libx264")
    work_uri = work_uri_for(str(tmp_path / "work"), [], str(target), **options)
    with pytest.raises(InvalidOptionError, match=r"^output_video_encoder: libx264 cannot carry a transparent") as no:
        worker.prepare(work_uri, [], str(target), **options)
    assert "use prores_ks or libvpx-vp9" in str(no.value) and not no.value.retryable
    assert not storage.exists(WorkLayout(work_uri).work_json)


@pytest.mark.parametrize("extension", ["png", "webp"])
def test_an_image_target_with_a_transparent_fill_gives_an_image_whose_alpha_is_the_matte(
    extension: str, inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    """FaceFusion's image workflow with its default fill (0 0 0 0): a PNG or WebP whose alpha is the matte."""
    models, target = inputs
    picture = tmp_path / "still.png"
    picture.write_bytes(encode_output_image(rgb_frames(target)[0], ".png", 100))
    output = tmp_path / f"cut-out.{extension}"
    argv = ["run", "--target", str(picture), "--output", str(output), "--work-root", str(tmp_path / "work")]

    assert cli.main([*argv, "--models-dir", str(models), *FLAGS]) == 0

    image = read_picture(str(output), str(output))
    assert image.shape[2] == 4, "the alpha is kept"
    matte = stand_in_mattes(models, target)[0]
    assert 0.2 < (matte < 128).mean() < 0.9
    assert np.abs(image[:, :, 3].astype(int) - matte).max() <= (0 if extension == "png" else 2)


def test_an_image_target_with_a_transparent_fill_refuses_a_jpeg_output_naming_the_field(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models, target = inputs
    picture = tmp_path / "still.png"
    picture.write_bytes(encode_output_image(rgb_frames(target)[0], ".png", 100))
    argv = ["run", "--target", str(picture), "--output", str(tmp_path / "cut-out.jpg"), "--work-root"]

    assert cli.main([*argv, str(tmp_path / "work"), "--models-dir", str(models), *FLAGS]) == EXIT_INVALID_OPTION

    errors = capsys.readouterr().err
    assert "output: " in errors and "cannot carry a transparent background" in errors and ".png or .webp" in errors
    assert not (tmp_path / "cut-out.jpg").exists() and not (tmp_path / "work").exists()
