"""The engine's seam for the worker: prepare_identity (work.json's identity) and the frame processor it feeds."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from engine_onnx.builders import gfpgan_model, inswapper_model, save_model, value_info
from onnx import helper
from PIL import Image

from facefusion_provider.engine.detect import detect_faces
from facefusion_provider.engine.face import Frame
from facefusion_provider.engine.landmarks import landmark_5_from_mesh
from facefusion_provider.engine.processors import chain
from facefusion_provider.engine.processors.chain import build_frame_processor, prepare_identity
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import (
    InputMissingError,
    InvalidMediaError,
    InvalidWorkError,
    ModelMissingError,
    NoFaceError,
)
from facefusion_provider.options import Options

from .conftest import write_image


def recognizer_model(path: Path) -> Path:
    """An arcface_w600k_r50 stand-in: 1x3x112x112 -> 1x512, a fixed projection of the crop's 4x4 colour layout."""
    projection = np.random.default_rng(11).normal(size=(48, 512)).astype(np.float32)
    return save_model(
        path,
        [
            helper.make_node("AveragePool", ["input"], ["pooled"], kernel_shape=[28, 28], strides=[28, 28]),
            helper.make_node("Flatten", ["pooled"], ["layout"]),
            helper.make_node("MatMul", ["layout", "projection"], ["output"]),
        ],
        [value_info("input", [1, 3, 112, 112])],
        [value_info("output", [1, 512])],
        [projection],
        ["projection"],
    )


@pytest.fixture(scope="module")
def man_source(tmp_path_factory: pytest.TempPathFactory, carphone_frames: list[Frame]) -> str:
    """A third person (the carphone driver) as the source, so every swapped face visibly changes."""
    return write_image(tmp_path_factory.mktemp("man"), "man.png", carphone_frames[0])


@pytest.fixture(scope="module")
def pair(astronaut: Frame, grace_hopper: Frame) -> Frame:
    """Two people side by side: the astronaut (smaller face, left) and Grace Hopper (larger face, right)."""
    return np.ascontiguousarray(np.hstack([astronaut, grace_hopper[:512]]))


@pytest.fixture(scope="module")
def user_models(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("user-models")
    recognizer_model(folder / "arcface_w600k_r50.onnx")
    inswapper_model(folder / "inswapper_128.onnx", kind="flat", colour=(1.0, 0.0, 1.0))
    gfpgan_model(folder / "gfpgan_1.4.onnx", kind="flat", colour=(-1.0, 1.0, -1.0))
    return str(folder)


def changed(before: Frame, after: Frame, box: np.ndarray) -> float:
    """Mean absolute change inside the central half of a face box."""
    x1, y1, x2, y2 = box.astype(int)
    dx, dy = (x2 - x1) // 4, (y2 - y1) // 4
    region = (slice(y1 + dy, y2 - dy), slice(x1 + dx, x2 - dx))
    return float(np.abs(after[region].astype(int) - before[region].astype(int)).mean())


# --- prepare_identity -----------------------------------------------------------------------------------------------


def test_classic_identity_is_json_with_the_source_face(image_files: dict[str, str]) -> None:
    identity = prepare_identity([image_files["astronaut"]], None, Options(), None)
    restored = json.loads(json.dumps(identity))
    assert restored["face_swapper_model"] == "classic"
    assert restored["sources"] == ["astronaut.png"]
    assert len(restored["classic"]["landmarks_468"]) == 468
    assert restored["classic"]["image_png_base64"].startswith("iVBOR")  # PNG magic, base64
    assert "reference_embedding" not in restored


def test_a_phone_photo_stored_sideways_is_read_upright(astronaut: Frame, tmp_path: Path) -> None:
    """Phones store portraits sideways with an EXIF orientation tag; the source face must come out upright."""
    sideways = Image.fromarray(np.ascontiguousarray(np.rot90(astronaut, k=1)))  # stored turned left ...
    exif = sideways.getexif()
    exif[0x0112] = 6  # ... and tagged "turn right to display"
    path = tmp_path / "portrait.jpg"
    sideways.save(path, "JPEG", quality=95, exif=exif.tobytes())
    identity = prepare_identity([str(path)], None, Options(), None)
    eyes = landmark_5_from_mesh(np.asarray(identity["classic"]["landmarks_468"], np.float32))[:2]
    dx, dy = eyes[1] - eyes[0]
    assert dx > 4 * abs(dy), "the eyes lie level, left to right"


def test_a_source_without_a_face_is_named(image_files: dict[str, str]) -> None:
    with pytest.raises(NoFaceError, match=r"coffee\.png"):
        prepare_identity([image_files["astronaut"], image_files["coffee"]], None, Options(), None)


def test_a_source_that_is_not_an_image_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "face.jpg"
    fake.write_text("this is not a JPEG")
    with pytest.raises(InvalidMediaError, match=r"face\.jpg"):
        prepare_identity([str(fake)], None, Options(), None)
    assert InvalidMediaError.retryable is False and NoFaceError.exit_code != InvalidMediaError.exit_code


def test_a_missing_source_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputMissingError, match=r"gone\.png"):
        prepare_identity([str(tmp_path / "gone.png")], None, Options(), None)


def test_reference_mode_without_a_recognizer_says_what_to_provide(
    image_files: dict[str, str], astronaut: Frame, tmp_path: Path
) -> None:
    options = Options(face_selector_mode="reference")
    with pytest.raises(ModelMissingError, match="reference needs arcface_w600k_r50"):
        prepare_identity([image_files["astronaut"]], astronaut, options, str(tmp_path))
    with pytest.raises(ModelMissingError, match="reference needs arcface_w600k_r50"):
        build_frame_processor(options, {"face_swapper_model": "classic"}, str(tmp_path))


def test_inswapper_identity_is_the_normalised_mean_embedding(
    image_files: dict[str, str], user_models: str, man_source: str
) -> None:
    options = Options(face_swapper_model="inswapper_128")
    one = prepare_identity([man_source], None, options, user_models)["source_embedding"]
    both = prepare_identity([man_source, image_files["grace_hopper"]], None, options, user_models)["source_embedding"]
    assert len(one) == 512 and np.linalg.norm(one) == pytest.approx(1.0, abs=1e-5)
    assert np.linalg.norm(both) == pytest.approx(1.0, abs=1e-5)
    other = prepare_identity([image_files["grace_hopper"]], None, options, user_models)["source_embedding"]
    expected = (np.asarray(one) + np.asarray(other)) / np.linalg.norm(np.asarray(one) + np.asarray(other))
    assert np.asarray(both) == pytest.approx(expected, abs=1e-5)


# --- the frame processor ----------------------------------------------------------------------------------------------


def test_classic_processor_swaps_faces_and_passes_other_frames_untouched(
    man_source: str, astronaut: Frame, no_face: Frame, options: Options, store: ModelStore
) -> None:
    processor = build_frame_processor(options, prepare_identity([man_source], None, options, None), None)
    assert processor.batch_size == 1
    frames = [astronaut.copy(), no_face.copy()]
    swapped, untouched = processor.process_batch(frames)
    assert np.array_equal(untouched, no_face)
    assert np.array_equal(frames[0], astronaut), "the input frame is not modified in place"
    (face,) = detect_faces(astronaut, options, store)
    assert changed(astronaut, swapped, face.bbox) > 5


@pytest.mark.parametrize(("mode", "expect_left", "expect_right"), [("one", False, True), ("many", True, True)])
def test_selector_modes_one_and_many(
    mode: str, expect_left: bool, expect_right: bool, man_source: str, pair: Frame, store: ModelStore
) -> None:
    options = Options(face_selector_mode=mode)
    processor = build_frame_processor(options, prepare_identity([man_source], None, options, None), None)
    (result,) = processor.process_batch([pair])
    left, right = sorted(detect_faces(pair, options, store), key=lambda face: float(face.bbox[0]))
    assert (changed(pair, result, left.bbox) > 5) is expect_left
    assert (changed(pair, result, right.bbox) > 5) is expect_right


def test_reference_mode_swaps_only_the_reference_person(
    man_source: str, pair: Frame, astronaut: Frame, user_models: str, store: ModelStore
) -> None:
    options = Options(face_selector_mode="reference", reference_face_distance=0.1)
    identity = prepare_identity([man_source], astronaut, options, user_models)
    assert len(identity["reference_embedding"]) == 512
    (result,) = build_frame_processor(options, identity, user_models).process_batch([pair])
    left, right = sorted(detect_faces(pair, options, store), key=lambda face: float(face.bbox[0]))
    assert changed(pair, result, left.bbox) > 5, "the astronaut is the reference person"
    assert changed(pair, result, right.bbox) == 0


def test_inswapper_processor_paints_the_swapper_output(
    man_source: str, astronaut: Frame, no_face: Frame, user_models: str, store: ModelStore
) -> None:
    options = Options(
        face_swapper_model="inswapper_128",
        face_swapper_blend=100,
        face_mask_blur=0.0,
        face_swapper_color_correction=False,  # the stand-in's flat colour itself shows in the frame
    )
    processor = build_frame_processor(options, prepare_identity([man_source], None, options, user_models), user_models)
    swapped, untouched = processor.process_batch([astronaut, no_face])
    assert np.array_equal(untouched, no_face)
    (face,) = detect_faces(astronaut, options, store)
    nose = np.round(face.landmark_5[2]).astype(int)
    assert swapped[nose[1], nose[0]].tolist() == pytest.approx([255, 0, 255], abs=2)


def test_inswapper_area_mask_uses_the_face_mesh(
    man_source: str, astronaut: Frame, user_models: str, store: ModelStore
) -> None:
    options = Options(
        face_swapper_model="inswapper_128",
        face_swapper_blend=100,
        face_swapper_color_correction=False,
        face_mask_types=["box", "area"],
        face_mask_areas=["mouth"],
    )
    processor = build_frame_processor(options, prepare_identity([man_source], None, options, user_models), user_models)
    (swapped,) = processor.process_batch([astronaut])
    (face,) = detect_faces(astronaut, options, store)
    nose = np.round(face.landmark_5[2]).astype(int)
    corners = face.landmark_5[3:]
    # Below the middle of her smile's corners: inside the lips' hull whatever the smile's shape.
    mouth = np.round(corners.mean(axis=0) + np.array([0.0, 0.2 * np.ptp(corners[:, 0])])).astype(int)
    assert swapped[nose[1], nose[0]].tolist() == astronaut[nose[1], nose[0]].tolist(), "the nose is not mouth"
    assert swapped[mouth[1], mouth[0]].tolist() == pytest.approx([255, 0, 255], abs=20)


def test_processors_run_in_the_given_order(
    man_source: str, astronaut: Frame, user_models: str, store: ModelStore
) -> None:
    (face,) = detect_faces(astronaut, Options(), store)
    nose = tuple(np.round(face.landmark_5[2]).astype(int)[::-1])
    original = astronaut.copy()
    flat = {
        "face_swapper_model": "inswapper_128",
        "face_swapper_blend": 100,
        "face_enhancer_blend": 100,
        "face_swapper_color_correction": False,  # else the swapper would take on the enhancer's green
    }
    swap_then_enhance = Options(processors=["face_swapper", "face_enhancer"], **flat)
    identity = prepare_identity([man_source], None, swap_then_enhance, user_models)
    (result,) = build_frame_processor(swap_then_enhance, identity, user_models).process_batch([astronaut])
    assert result[nose].tolist() == pytest.approx([0, 255, 0], abs=2), "the enhancer (green) ran last"
    enhance_then_swap = Options(processors=["face_enhancer", "face_swapper"], **flat)
    (result,) = build_frame_processor(enhance_then_swap, identity, user_models).process_batch([astronaut])
    assert result[nose].tolist() == pytest.approx([255, 0, 255], abs=2), "the swapper (magenta) ran last"
    np.testing.assert_array_equal(astronaut, original)  # each processor works on its own copy, never the caller's


def test_an_identity_for_another_swapper_is_refused(image_files: dict[str, str]) -> None:
    identity = prepare_identity([image_files["astronaut"]], None, Options(), None)
    with pytest.raises(InvalidWorkError, match="inswapper_128"):
        build_frame_processor(Options(face_swapper_model="inswapper_128"), identity, None)
    with pytest.raises(InvalidWorkError, match="classic source"):
        build_frame_processor(Options(), {"face_swapper_model": "classic"}, None)


def test_a_missing_swapper_model_fails_when_the_processor_is_built(tmp_path: Path) -> None:
    identity = {"face_swapper_model": "inswapper_128_fp16", "source_embedding": [1.0] + [0.0] * 511}
    with pytest.raises(ModelMissingError, match=r"inswapper_128_fp16\.onnx"):
        build_frame_processor(Options(face_swapper_model="inswapper_128_fp16"), identity, str(tmp_path))


def test_frames_processed_side_by_side_come_out_exactly_as_in_turn(
    man_source: str,
    pair: Frame,
    astronaut: Frame,
    no_face: Frame,
    user_models: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options = Options(
        face_swapper_model="inswapper_128",
        face_selector_mode="many",
        processors=["face_swapper", "face_enhancer"],
        face_swapper_blend=70,
    )
    identity = prepare_identity([man_source], None, options, user_models)
    frames = [pair, astronaut, no_face, pair, astronaut]
    in_turn = build_frame_processor(options, identity, user_models).process_batch(frames)
    threads: set[str] = set()
    real_detect = chain.detect_faces

    def recording_detect(*args: Any) -> Any:
        threads.add(threading.current_thread().name)
        return real_detect(*args)

    monkeypatch.setattr(chain, "detect_faces", recording_detect)
    side_by_side = build_frame_processor(options, identity, user_models)
    side_by_side.frame_threads = 3

    results = side_by_side.process_batch(frames)

    assert len(threads) > 1 and all(name.startswith("facefusion-frames") for name in threads)
    assert all(np.array_equal(a, b) for a, b in zip(results, in_turn, strict=True))
    assert not np.array_equal(results[0], pair) and np.array_equal(results[2], no_face)
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("facefusion-frames")]


def test_frames_go_side_by_side_only_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    options = Options(execution_providers=["cuda", "cpu"], execution_thread_count=6)
    assert chain._frame_threads(options) == 1  # no CUDA in this onnxruntime: the CPU runs, its threads do inference
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert chain._frame_threads(options) == 6 and chain._batch_size(options) == chain.GPU_BATCH_SIZE
