"""The frame colorizer, background remover and face debugger through the whole DAG (``airflow dags test``, local
workers) on their stand-ins, chained, without and after the face swapper: a carphone clip with a tone track in two
segments. The output keeps the input's frame count, timestamps and audio packets; each frame shows every processor's
work: the background (red below one half after colouring) filled green, the rest coloured by ddcolor's flat a and
b, the face box drawn in red, and after the paint swapper the face one flat colour. The expression restorer and the
face editor after the swapper, on their LivePortrait stand-ins, move that flat colour. A transparent fill into a .mov
gives frames whose alpha is the remover's matte. The age modifier (fran) and the deep swapper after the face swapper,
one run each: the face brighter by the age change, or painted green."""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import numpy as np
import onnxruntime as ort
import pytest
from demo_airflow import dags_test, run_succeeded, swap_conf
from people import carphone_face_contrast, swap_inputs
from readback import checked_frames, packet_payloads, rgb_frames
from standins import COLORIZER_AB, write_standins
from standins_ageswap import DFM_PAINT, write_ageswap_standins
from standins_live_portrait import write_live_portrait_standins

from facefusion_provider.engine.models import matte_facts
from facefusion_provider.engine.processors.background_remover import foreground_mask, model_input
from facefusion_provider.engine.store import MODELS_CACHE_ENV, MODELS_DIR_ENV
from facefusion_provider.worker import cli

pytestmark = pytest.mark.slow

FRAMES, SEGMENT = 6, 3
CHAIN = ["frame_colorizer", "background_remover", "face_debugger"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(models folder, source image, target clip with audio)."""
    folder = tmp_path_factory.mktemp("dag-frame-processors")
    return swap_inputs(folder, write_ageswap_standins(write_standins(folder / "models")), FRAMES)


@pytest.mark.parametrize("swapped", [False, True], ids=["alone", "after-face-swapper"])
def test_the_dag_colours_removes_the_background_and_draws_the_faces(
    swapped: bool, inputs: tuple[Path, Path, Path], dags_test_env: dict[str, str], tmp_path: Path
) -> None:
    models, source, target = inputs
    env = {**dags_test_env, MODELS_DIR_ENV: str(models), MODELS_CACHE_ENV: str(tmp_path / "model-cache")}
    output = tmp_path / "out" / "processed.mp4"
    options = {
        "processors": [*(["face_swapper"] if swapped else []), *CHAIN],
        "face_swapper_model": "inswapper_128",
        "face_swapper_blend": 100,
        "face_swapper_color_correction": False,
        "frame_colorizer_model": "ddcolor",
        "background_remover_model": "u2netp",
        "background_remover_fill_color": [0, 255, 0, 255],
        "face_debugger_items": ["bounding-box"],
        "output_video_quality": 100,
        "segment_size": SEGMENT,
    }

    result = dags_test(swap_conf([str(source)], str(target), str(output), options), env, timeout=600)

    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    original, processed = checked_frames(target, output, FRAMES)
    for before, after in zip(original, processed, strict=True):
        green = (after[:, :, 1] > 200) & (after[:, :, 0] < 60) & (after[:, :, 2] < 60)
        assert 0.05 < green.mean() < 0.95, "the background filled, the foreground kept"
        lab = cv2.cvtColor(after, cv2.COLOR_RGB2LAB).astype(float)
        kept = ~cv2.dilate(green.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
        kept[60:210, 120:230] = False  # the face and its box
        # ddcolor's a and b, towards which every kept pixel moved (bright ones less: their colour leaves the gamut)
        shift = np.median(lab[kept][:, 1:] - cv2.cvtColor(before, cv2.COLOR_RGB2LAB).astype(float)[kept][:, 1:], axis=0)
        assert (np.sign(shift) == np.sign(COLORIZER_AB)).all() and np.abs(shift).min() > 8, "coloured"
        redness = after.astype(int)[:, :, 0] - after.astype(int)[:, :, 1:].max(axis=2)
        rows, columns = np.nonzero(redness[40:240, 90:260] > 60)
        assert len(rows) > 150 and np.ptp(rows) > 80 and np.ptp(columns) > 60, "the face box"
        if swapped:
            assert carphone_face_contrast(before) > 15 and carphone_face_contrast(after) < 3, "the face swapped"


def test_the_dag_runs_the_live_portrait_processors_after_the_swapper(
    dags_test_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the LivePortrait stand-ins (``standins_live_portrait.py``), whose generator shifts the crop's colour by how
    far the driving keypoints moved: the restorer then the editor, in one run, move the swapped face's flat colour
    (each alone: tests/unit/worker/test_live_portrait_run.py)."""
    folder = tmp_path / "inputs"
    models, source, target = swap_inputs(
        folder, write_live_portrait_standins(write_standins(folder / "models")), FRAMES
    )
    env = {**dags_test_env, MODELS_DIR_ENV: str(models), MODELS_CACHE_ENV: str(tmp_path / "model-cache")}
    output = tmp_path / "out" / "processed.mp4"
    chosen = {
        "processors": ["face_swapper", "expression_restorer", "face_editor"],
        "face_swapper_model": "inswapper_128",
        "face_swapper_blend": 100,
        "face_swapper_color_correction": False,
        "output_video_quality": 100,
        "segment_size": SEGMENT,
        "expression_restorer_factor": 100,
        "face_editor_mouth_smile": 1.0,
        "face_editor_mouth_position_horizontal": 0.6,
    }

    result = dags_test(swap_conf([str(source)], str(target), str(output), chosen), env, timeout=600)

    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    original, processed = checked_frames(target, output, FRAMES)
    monkeypatch.setenv(MODELS_CACHE_ENV, str(tmp_path / "model-cache"))
    swap_only = tmp_path / "swapped.mp4"
    argv = ["run", "--source", str(source), "--target", str(target), "--output", str(swap_only), "--models-dir"]
    argv += [str(models), "--work-root", str(tmp_path / "work"), "--face-swapper-model", "inswapper_128"]
    assert cli.main([*argv, "--face-swapper-blend", "100", "--no-face-swapper-color-correction"]) == 0
    for before, swapped, after in zip(original, rgb_frames(swap_only), processed, strict=True):
        assert carphone_face_contrast(before) > 15 and carphone_face_contrast(after) < 3, "the face swapped, flat"
        moved = np.abs(after[100:150, 150:200].astype(float) - swapped[100:150, 150:200]).mean(axis=(0, 1))
        assert moved.max() > 10, "and its colour moved by the processors"


def test_the_dag_writes_a_transparent_mov_whose_alpha_is_the_matte(
    inputs: tuple[Path, Path, Path], dags_test_env: dict[str, str], tmp_path: Path
) -> None:
    """A transparent fill through validate, the spans and the merge: ProRes 4444 segments remuxed into a .mov."""
    models, source, target = inputs
    env = {**dags_test_env, MODELS_DIR_ENV: str(models), MODELS_CACHE_ENV: str(tmp_path / "model-cache")}
    output = tmp_path / "out" / "cut-out.mov"
    options = {
        "processors": ["background_remover"],
        "background_remover_model": "modnet",
        "background_remover_fill_color": [0, 0, 0, 0],
        "output_video_encoder": "prores_ks",
        "segment_size": SEGMENT,
    }

    result = dags_test(swap_conf([str(source)], str(target), str(output), options), env, timeout=600)

    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    session, facts = ort.InferenceSession(str(models / "modnet.onnx")), matte_facts("modnet")
    with av.open(str(output)) as container:
        processed = [frame.to_ndarray(format="rgba") for frame in container.decode(video=0)]
    assert len(processed) == FRAMES
    for before, after in zip(rgb_frames(target), processed, strict=True):
        matte = foreground_mask(session.run(None, {"input": model_input(before, facts)}), facts, *before.shape[1::-1])
        assert 0.2 < (matte < 128).mean() < 0.9 and np.abs(after[:, :, 3].astype(int) - matte).max() <= 1
    assert packet_payloads(str(output)) == packet_payloads(str(target))


@pytest.mark.parametrize(
    "processor",
    [
        {"processors": ["face_swapper", "age_modifier"], "age_modifier_model": "fran", "age_modifier_direction": 60},
        {"processors": ["face_swapper", "deep_swapper"], "deep_swapper_model": "iperov/elon_musk_224"},
    ],
    ids=["age_modifier", "deep_swapper"],
)
def test_the_dag_ages_or_deep_swaps_the_swapped_face(
    processor: dict[str, object], inputs: tuple[Path, Path, Path], dags_test_env: dict[str, str], tmp_path: Path
) -> None:
    models, source, target = inputs
    env = {**dags_test_env, MODELS_DIR_ENV: str(models), MODELS_CACHE_ENV: str(tmp_path / "model-cache")}
    output = tmp_path / "out" / "processed.mp4"
    options = {
        **processor,
        "face_swapper_model": "inswapper_128",
        "face_swapper_blend": 100,
        "face_swapper_color_correction": False,
        "output_video_quality": 100,
        "segment_size": SEGMENT,
    }

    result = dags_test(swap_conf([str(source)], str(target), str(output), options), env, timeout=600)

    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    original, processed = checked_frames(target, output, FRAMES)
    for before, after in zip(original, processed, strict=True):
        face = after[100:150, 150:200].reshape(-1, 3).astype(float)
        assert carphone_face_contrast(before) > 15 and carphone_face_contrast(after) < 3, "the face swapped, flat"
        if "age_modifier" in processor["processors"]:  # type: ignore[operator]
            assert face.mean() > 200, "older: the flat face (about 100 on average) 153 levels brighter"
        else:
            paint = np.asarray(DFM_PAINT[::-1]) * 255
            assert face.mean(axis=0)[1] > face.mean(axis=0)[0] + 30 and np.abs(face.mean(axis=0) - paint).max() < 90
