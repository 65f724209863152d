"""``facefusion-worker run`` end to end with the frame colorizer, the background remover and the face debugger, each
alone and chained after the face swapper, on their stand-ins (``standins.py``): a few frames of the carphone clip with
a tone track, two segments. The output has the input's frame count, timestamps and audio packets, and shows each
processor's work: ddcolor's flat a and b over the frame's lightness, the background (red below one half) filled with
green, the face box drawn in red; after the paint swapper the face is still its flat colour. A transparent fill into an
MP4 and a model file with other inputs are refused before any work is written (``test_transparent_output.py`` has
the transparent outputs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from people import carphone_face_contrast, swap_inputs
from readback import checked_frames
from standins import COLORIZER_AB, background_remover_standin, colorizer_standin, write_standins

from facefusion_provider.exceptions import EXIT_INVALID_OPTION, EXIT_MODEL_INCOMPATIBLE
from facefusion_provider.worker import cli

FRAMES, SEGMENT = 5, 3
GREEN = ["0", "255", "0", "255"]
PROCESSOR_FLAGS = {
    "frame_colorizer": ["--frame-colorizer-model", "ddcolor"],
    "background_remover": ["--background-remover-model", "modnet", "--background-remover-fill-color", *GREEN],
    "face_debugger": ["--face-debugger-items", "bounding-box"],
}
pytestmark = pytest.mark.usefixtures("no_model_environment")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(models folder, source image, target clip with audio)."""
    folder = tmp_path_factory.mktemp("frame-processors")
    return swap_inputs(folder, write_standins(folder / "models"), FRAMES)


def assert_shows_its_work(processor: str, before: np.ndarray, after: np.ndarray) -> None:
    if processor == "frame_colorizer":
        lab = cv2.cvtColor(after, cv2.COLOR_RGB2LAB).reshape(-1, 3).astype(float)
        assert np.abs(lab[:, 1:].mean(axis=0) - (128 + np.asarray(COLORIZER_AB))).max() < 4
        assert np.abs(lab[:, 0].mean() - cv2.cvtColor(before, cv2.COLOR_RGB2LAB)[:, :, 0].mean()) < 3
    elif processor == "background_remover":
        background, foreground = before[:, :, 0] < 90, before[:, :, 0] > 170
        green = (after[:, :, 1] > 200) & (after[:, :, 0] < 60) & (after[:, :, 2] < 60)
        assert background.sum() > 1000 and green[background].mean() > 0.9
        kept = np.abs(after.astype(int) - before).max(axis=2) < 30
        assert foreground.sum() > 1000 and kept[foreground].mean() > 0.9
    else:
        # one-pixel red lines, their chroma shared with neighbours (4:2:0): redness, over the input's, all round the face
        redness = after.astype(int)[:, :, 0] - after.max(axis=2, initial=0, where=[False, True, True])
        redder = redness - (before.astype(int)[:, :, 0] - before.max(axis=2, initial=0, where=[False, True, True]))
        rows, columns = np.nonzero(redder > 60)
        assert len(rows) > 300 and np.ptp(rows) > 80 and np.ptp(columns) > 60
        assert rows.min() > 60 and rows.max() < 230 and columns.min() > 100 and columns.max() < 250


@pytest.mark.parametrize("chained", [False, True], ids=["alone", "after-face-swapper"])
@pytest.mark.parametrize("processor", list(PROCESSOR_FLAGS))
def test_worker_run_with_each_frame_processor(
    processor: str, chained: bool, inputs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    models, source, target = inputs
    output = tmp_path / "out.mp4"
    argv = ["run", "--source", str(source), "--target", str(target), "--output", str(output)]
    argv += ["--work-root", str(tmp_path / "work"), "--models-dir", str(models), "--segment-size", str(SEGMENT)]
    argv += ["--output-video-quality", "100", "--processors", *(["face_swapper"] if chained else []), processor]
    argv += ["--face-swapper-model", "inswapper_128", "--face-swapper-blend", "100"]
    argv += ["--no-face-swapper-color-correction", *PROCESSOR_FLAGS[processor]]

    assert cli.main(argv) == 0

    original, processed = checked_frames(target, output, FRAMES)
    for before, after in zip(original, processed, strict=True):
        assert after.shape == before.shape
        assert_shows_its_work(processor, before, after)
        if chained:
            assert carphone_face_contrast(before) > 15 and carphone_face_contrast(after) < 3, "the face was swapped"


def test_worker_run_refuses_a_transparent_fill_into_an_mp4_naming_the_field(
    inputs: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, target = inputs
    argv = ["run", "--target", str(target), "--output", str(tmp_path / "out.mp4"), "--processors"]
    argv += ["background_remover", "--background-remover-fill-color", "0", "0", "0", "0"]
    assert cli.main(argv) == EXIT_INVALID_OPTION
    errors = capsys.readouterr().err
    assert errors.count("\n") == 1 and "is a .mp4 file, which cannot carry a transparent background" in errors
    assert "(background_remover_fill_color alpha 0)" in errors and "output_video_encoder prores_ks" in errors
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize(
    ("processor", "write"),
    [
        ("frame_colorizer", lambda folder: colorizer_standin(folder, "ddcolor", input_name="image")),
        ("background_remover", lambda folder: background_remover_standin(folder, "modnet", input_name="pixel_values")),
    ],
)
def test_a_model_file_with_other_inputs_is_refused_in_prepare_naming_what_it_expects(
    processor: str,
    write: Callable[[Path], Path],
    inputs: tuple[Path, Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, _, target = inputs
    write(tmp_path / "models")
    work = tmp_path / "work"
    argv = ["run", "--target", str(target), "--output", str(tmp_path / "out.mp4"), "--work-root", str(work)]
    argv += ["--models-dir", str(tmp_path / "models"), "--processors", processor]

    assert cli.main(argv) == EXIT_MODEL_INCOMPATIBLE

    report = [line for line in capsys.readouterr().err.splitlines() if line.startswith("{")][-1]
    message = json.loads(report)["message"]
    assert "expected inputs input ?x3x?x?, found" in message and "\n" not in message
    assert not list(work.glob("work/*/work.json"))  # refused in prepare: no work was written
    assert not (tmp_path / "out.mp4").exists()
