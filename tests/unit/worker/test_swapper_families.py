"""``facefusion-worker run`` end to end with each swapper family of FaceFusion's catalogue (and the enhancers), on
stand-ins with the real files' interfaces: a few frames of the carphone clip, the astronaut as the source. The paint
stand-ins turn the face a flat colour chosen by the source, so the output shows that the swap ran and was pasted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from people import carphone_face_contrast, swap_inputs
from readback import rgb_frames
from standins import write_standins

from facefusion_provider.worker import cli

FRAMES = 3
FAMILIES = [
    "inswapper_128",
    "hyperswap_1a_256",
    "simswap_256",
    "simswap_unofficial_512",
    "ghost_1_256",
    "hififace_unofficial_256",
    "blendswap_256",
    "uniface_256",
]
pytestmark = pytest.mark.usefixtures("no_model_environment")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(models folder, source image, target clip)."""
    folder = tmp_path_factory.mktemp("families")
    return swap_inputs(folder, write_standins(folder / "models"), FRAMES, audio_rate=None)


@pytest.mark.parametrize("model", FAMILIES)
def test_worker_run_swaps_with_each_family(model: str, inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    models, source, target = inputs
    output = tmp_path / "out.mp4"
    argv = ["run", "--source", str(source), "--target", str(target), "--output", str(output)]
    argv += ["--work-root", str(tmp_path / "work"), "--models-dir", str(models), "--face-swapper-model", model]
    argv += ["--face-swapper-blend", "100", "--no-face-swapper-color-correction", "--output-video-quality", "100"]

    assert cli.main(argv) == 0

    original, swapped = rgb_frames(target), rgb_frames(output)
    assert len(swapped) == len(original) == FRAMES
    for before, after in zip(original, swapped, strict=True):
        assert carphone_face_contrast(before) > 15 and carphone_face_contrast(after) < 3, (
            "the face became the stand-in's flat colour"
        )
        np.testing.assert_allclose(after[:, :20].mean(), before[:, :20].mean(), atol=3)  # far from the face: kept


def test_worker_run_with_codeformer_after_a_hyperswap(inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    models, source, target = inputs
    output = tmp_path / "out.mp4"
    argv = ["run", "--source", str(source), "--target", str(target), "--output", str(output)]
    argv += ["--work-root", str(tmp_path / "work"), "--models-dir", str(models)]
    argv += ["--processors", "face_swapper", "face_enhancer", "--face-swapper-model", "hyperswap_1b_256"]
    argv += ["--face-enhancer-model", "codeformer", "--face-enhancer-blend", "100"]

    assert cli.main(argv) == 0

    assert len(rgb_frames(output)) == FRAMES


def test_worker_run_face_swapper_weight_changes_hififaces_face(inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The paint stand-in's colour is its source vector's: the weight mixes the target face's identity into it."""
    models, source, target = inputs
    colours = {}
    for weight in ("0.0", "0.5", "1.0"):
        output = tmp_path / f"out-{weight}.mp4"
        argv = ["run", "--source", str(source), "--target", str(target), "--output", str(output)]
        argv += ["--work-root", str(tmp_path / "work"), "--models-dir", str(models), "--face-swapper-blend", "100"]
        argv += ["--face-swapper-model", "hififace_unofficial_256", "--face-swapper-weight", weight]
        argv += ["--no-face-swapper-color-correction", "--output-video-quality", "100"]

        assert cli.main(argv) == 0

        first = rgb_frames(output)[0]
        assert carphone_face_contrast(first) < 3
        colours[weight] = first[100:150, 150:200].reshape(-1, 3).mean(axis=0)
    assert np.abs(colours["0.0"] - colours["0.5"]).max() > 4 and np.abs(colours["1.0"] - colours["0.5"]).max() > 4
    # FaceFusion's mix is linear in the weight: 0.5 sits between 0 and 1
    assert np.all(np.minimum(colours["0.0"], colours["1.0"]) - 2 <= colours["0.5"])
    assert np.all(colours["0.5"] <= np.maximum(colours["0.0"], colours["1.0"]) + 2)
