"""``facefusion-worker run`` end to end with the expression restorer and the face editor, each alone and after the
face swapper, and the chain swap -> expression_restorer -> face_enhancer, on stand-ins (``standins.py``,
``standins_live_portrait.py``: the motion extractor reads a crop's colour as its expression, the generator shifts the
crop's colour by how far the driving keypoints moved): a few frames of the carphone clip with a tone track, two
segments. The output has the input's frame count, timestamps and audio packets. The restorer alone gives the face
back (the target's expression is its own); after the paint swapper it pulls the flat face's colour back towards the
target's face; the editor's sliders move the face's colour; pixels far from the face stay."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from people import swap_inputs
from readback import checked_frames, rgb_frames
from standins import write_standins
from standins_live_portrait import retargeter_standin, write_live_portrait_standins

from facefusion_provider.exceptions import EXIT_MODEL_INCOMPATIBLE, InvalidOptionError
from facefusion_provider.options import FaceEditorOptions, parse_options
from facefusion_provider.work.run_inputs import check_conf
from facefusion_provider.worker import cli

FRAMES, SEGMENT = 5, 3
FACE = (slice(100, 170), slice(145, 205))  # the middle of the driver's face in carphone's enlarged frames
CORNER = (slice(0, 30), slice(0, 40))  # far from his face
EDITOR_FLAGS = ["--face-editor-mouth-smile", "1", "--face-editor-mouth-position-horizontal", "0.6"]
EDITOR_FLAGS += ["--face-editor-eye-open-ratio", "0.5"]  # the eye retargeter reads the face mesh's eye points
pytestmark = pytest.mark.usefixtures("no_model_environment")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(models folder, source image, target clip with audio)."""
    folder = tmp_path_factory.mktemp("live-portrait")
    return swap_inputs(folder, write_live_portrait_standins(write_standins(folder / "models")), FRAMES)


def run(inputs: tuple[Path, Path, Path], folder: Path, processors: list[str], *flags: str) -> list[np.ndarray]:
    """The worker's output frames, checked whole: every frame, the target's timestamps and audio packets."""
    models, source, target = inputs
    output = folder / "out.mp4"
    argv = ["run", "--source", str(source), "--target", str(target), "--output", str(output)]
    argv += ["--work-root", str(folder / "work"), "--models-dir", str(models), "--segment-size", str(SEGMENT)]
    argv += ["--output-video-quality", "100", "--processors", *processors]
    argv += ["--face-swapper-model", "inswapper_128", "--face-swapper-blend", "100"]
    argv += ["--no-face-swapper-color-correction", *flags]

    assert cli.main(argv) == 0

    return checked_frames(target, output, FRAMES)[1]


@pytest.fixture(scope="module")
def swapped(inputs: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """The face swapper's output alone: what a processor after it starts from."""
    return run(inputs, tmp_path_factory.mktemp("swapped"), ["face_swapper"])


def face_colour(frame: np.ndarray) -> np.ndarray:
    return np.asarray(frame[FACE].reshape(-1, 3).mean(axis=0))


def test_the_restorer_alone_gives_each_face_back(inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    original = rgb_frames(inputs[2])
    for before, after in zip(original, run(inputs, tmp_path, ["expression_restorer"]), strict=True):
        assert np.abs(face_colour(after) - face_colour(before)).max() < 3
        assert np.abs(after.astype(int) - before)[FACE].mean() < 8  # redrawn from the crop's half size


def test_the_restorer_after_the_swapper_brings_the_target_s_expression_back(
    inputs: tuple[Path, Path, Path], swapped: list[np.ndarray], tmp_path: Path
) -> None:
    original = rgb_frames(inputs[2])
    restored = run(inputs, tmp_path, ["face_swapper", "expression_restorer"], "--expression-restorer-factor", "100")
    for before, swap, after in zip(original, swapped, restored, strict=True):
        # the stand-in's expression is the face's colour: red and green move from the swapped face's towards the
        # target's own (by the stand-in's gain, not to it)
        moved, wanted = (face_colour(after) - face_colour(swap))[:2], (face_colour(before) - face_colour(swap))[:2]
        assert (np.sign(moved) == np.sign(wanted)).all() and (np.abs(moved) > 5).all(), (moved, wanted)
        assert np.abs(after.astype(int) - swap)[CORNER].max() < 6


@pytest.mark.parametrize("chained", [False, True], ids=["alone", "after-face-swapper"])
def test_the_face_editor_moves_the_face_by_its_sliders(
    chained: bool, inputs: tuple[Path, Path, Path], swapped: list[np.ndarray], tmp_path: Path
) -> None:
    starts = swapped if chained else rgb_frames(inputs[2])
    edited = run(inputs, tmp_path, [*(["face_swapper"] if chained else []), "face_editor"], *EDITOR_FLAGS)
    for before, after in zip(starts, edited, strict=True):
        assert np.abs(face_colour(after) - face_colour(before)).max() > 10, "the sliders moved the face"
        assert np.abs(after.astype(int) - before)[CORNER].mean() < 3


def test_swap_restore_enhance_keeps_every_frame_and_the_sound(
    inputs: tuple[Path, Path, Path], swapped: list[np.ndarray], tmp_path: Path
) -> None:
    chain = ["face_swapper", "expression_restorer", "face_enhancer"]
    enhanced = run(inputs, tmp_path, chain, "--face-enhancer-model", "gfpgan_1.4")
    for swap, after in zip(swapped, enhanced, strict=True):
        assert np.abs(face_colour(after) - face_colour(swap)).max() > 10, "restored and enhanced"


@pytest.mark.parametrize("slider", [name for name in FaceEditorOptions.model_fields if name != "face_editor_model"])
def test_a_slider_given_as_a_string_is_refused_at_validate_naming_it(slider: str) -> None:
    conf = {"source_uris": ["s3://in/face.jpg"], "target_uri": "s3://in/talk.mp4", "output_uri": "s3://out/talk.mp4"}
    for value, why in [("0.5", "Input should be a valid number"), (True, "Input should be a valid number"), (1.05, "")]:
        sent = {**conf, "processors": ["face_editor"], slider: value}
        with pytest.raises(InvalidOptionError, match=f"^invalid options: options.{slider}: {why}"):
            check_conf(sent, sent)
    assert parse_options({"processors": ["face_editor"], slider: -1}).model_dump()[slider] == -1.0


@pytest.mark.parametrize("processor", ["expression_restorer", "face_editor"])
def test_a_generator_file_of_another_kind_is_refused_in_prepare_naming_it(
    processor: str, inputs: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, target = inputs
    models = write_live_portrait_standins(tmp_path / "models")
    retargeter_standin(models, "generator")  # a one-input model under the generator's name
    work = tmp_path / "work"
    argv = ["run", "--target", str(target), "--output", str(tmp_path / "out.mp4"), "--work-root", str(work)]
    argv += ["--models-dir", str(models), "--processors", processor]

    assert cli.main(argv) == EXIT_MODEL_INCOMPATIBLE

    message = json.loads([line for line in capsys.readouterr().err.splitlines() if line.startswith("{")][-1])["message"]
    assert "live_portrait_generator.onnx" in message and "feature_volume ?x32x16x64x64" in message
    assert not list(work.glob("work/*/work.json"))  # refused in prepare: no work was written
