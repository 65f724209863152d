"""``facefusion-worker run`` end to end with the age modifier (fran) and the deep swapper, each alone and after the face
swapper, on their stand-ins (``standins_ageswap.py``): a few frames of the carphone clip with a tone track, two
segments. The output has the input's frame count, timestamps and audio packets, and every frame shows the option's
value reached the model: fran's face brighter by the age change (older), the deep swapper's face painted green by its
morph. A direction out of range and a ``.dfm`` of another kind are refused before any work is written, naming them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from people import carphone_face_contrast, swap_inputs
from readback import checked_frames, rgb_frames
from standins import write_standins
from standins_ageswap import DFM_PAINT, mismatched_dfm, write_ageswap_standins

from facefusion_provider.exceptions import EXIT_INVALID_OPTION, EXIT_MODEL_INCOMPATIBLE
from facefusion_provider.worker import cli

FRAMES, SEGMENT = 5, 3
FACE = (slice(100, 150), slice(150, 200))  # the middle of the driver's face in carphone's frames
OLDER = 60  # fran's stand-in: the face classified 20-29 (24), wanted 84: +0.6, 153 levels brighter
PROCESSOR_FLAGS = {
    "age_modifier": ["--age-modifier-model", "fran", "--age-modifier-direction", str(OLDER)],
    "deep_swapper": ["--deep-swapper-model", "iperov/elon_musk_224", "--deep-swapper-morph", "100"],
}
SWAPPER_FLAGS = ["--face-swapper-model", "inswapper_128", "--face-swapper-blend", "100"]
pytestmark = pytest.mark.usefixtures("no_model_environment")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(models folder, source image, target clip with audio)."""
    folder = tmp_path_factory.mktemp("ageswap")
    return swap_inputs(folder, write_ageswap_standins(write_standins(folder / "models")), FRAMES)


def run_argv(inputs: tuple[Path, Path, Path], output: Path, work: Path, processors: list[str]) -> list[str]:
    models, source, target = inputs
    argv = ["run", "--source", str(source), "--target", str(target), "--output", str(output)]
    argv += ["--work-root", str(work), "--models-dir", str(models), "--segment-size", str(SEGMENT)]
    argv += ["--output-video-quality", "100", "--processors", *processors, *SWAPPER_FLAGS]
    return [*argv, "--no-face-swapper-color-correction"]


@pytest.fixture(scope="module")
def swapped_only(inputs: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """The paint swapper's frames alone: what the processors after it start from."""
    folder = tmp_path_factory.mktemp("swapped-only")
    output = folder / "out.mp4"
    assert cli.main(run_argv(inputs, output, folder / "work", ["face_swapper"])) == 0
    return rgb_frames(output)


def face_colour(frame: np.ndarray) -> np.ndarray:
    return np.asarray(frame[FACE].reshape(-1, 3).mean(axis=0), float)


def assert_shows_its_work(processor: str, before: np.ndarray, after: np.ndarray) -> None:
    """``after`` is ``before`` (the input, or the swapper's frame) with the processor's stand-in applied."""
    if processor == "age_modifier":
        expected = np.clip(before[FACE].astype(float) + OLDER / 100 * 255, 0, 255)
        assert np.abs(after[FACE].astype(float) - expected).mean() < 8, "older: brighter by the age change"
    else:
        paint = np.asarray(DFM_PAINT[::-1]) * 255  # the stand-in's BGR face, as RGB
        assert np.abs(face_colour(after) - paint).max() < 0.75 * np.abs(face_colour(before) - paint).max()
        assert after[FACE][:, :, 1].mean() > after[FACE][:, :, 0].mean() + 30, "painted green"


@pytest.mark.parametrize("chained", [False, True], ids=["alone", "after-face-swapper"])
@pytest.mark.parametrize("processor", list(PROCESSOR_FLAGS))
def test_worker_run_ages_or_deep_swaps_every_frame_keeping_the_sound(
    processor: str,
    chained: bool,
    inputs: tuple[Path, Path, Path],
    swapped_only: list[np.ndarray],
    tmp_path: Path,
) -> None:
    _, _, target = inputs
    output = tmp_path / "out.mp4"
    processors = [*(["face_swapper"] if chained else []), processor]

    assert cli.main([*run_argv(inputs, output, tmp_path / "work", processors), *PROCESSOR_FLAGS[processor]]) == 0

    original, processed = checked_frames(target, output, FRAMES)
    for before, swapped, after in zip(original, swapped_only, processed, strict=True):
        assert after.shape == before.shape
        assert_shows_its_work(processor, swapped if chained else before, after)
        if chained:
            assert carphone_face_contrast(before) > 15 and carphone_face_contrast(swapped) < 3, "the face was swapped"


def test_worker_run_refuses_a_direction_out_of_range_naming_the_field(
    inputs: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, target = inputs
    argv = ["run", "--target", str(target), "--output", str(tmp_path / "out.mp4"), "--processors", "age_modifier"]
    argv += ["--age-modifier-direction", "150"]
    assert cli.main(argv) == EXIT_INVALID_OPTION
    errors = capsys.readouterr().err
    assert "age_modifier_direction" in errors and "less than or equal to 100" in errors and "150" in errors
    assert not (tmp_path / "out.mp4").exists()


def test_worker_run_refuses_a_dfm_of_another_kind_in_prepare_naming_the_file(
    inputs: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, target = inputs
    models = tmp_path / "models"
    mismatched_dfm(models, "custom/not_a_face")
    work = tmp_path / "work"
    argv = ["run", "--target", str(target), "--output", str(tmp_path / "out.mp4"), "--work-root", str(work)]
    argv += ["--models-dir", str(models), "--processors", "deep_swapper", "--deep-swapper-model", "custom/not_a_face"]

    assert cli.main(argv) == EXIT_MODEL_INCOMPATIBLE

    report = [line for line in capsys.readouterr().err.splitlines() if line.startswith("{")][-1]
    message = json.loads(report)["message"]
    assert "custom/not_a_face.dfm" in message and "expected inputs in_face:0 1xSxSx3" in message
    assert "\n" not in message
    assert not list(work.glob("work/*/work.json"))  # refused in prepare: no work was written
    assert not (tmp_path / "out.mp4").exists()
