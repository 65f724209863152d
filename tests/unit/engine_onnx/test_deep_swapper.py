"""The deep swapper on DeepFaceLab stand-ins (``standins_ageswap.py``): the crop on dfl_whole_face at the size the
file's ``in_face:0`` says (a catalogue model and a user's own ``custom/<name>``), the tensors fed (sharpened BGR 0..1
NHWC, ``morph_value:0`` from ``deep_swapper_morph`` only where the model has it), the face painted by the morph, and
the model names a FaceFusion user gives: catalogue ones, ``custom/<name>`` in the models folder, nothing else. A file
whose inputs are not a DeepFaceLab model's is refused in prepare, in one line naming the file and the inputs expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from mask_standins import COVERING_RGB, occluder_standin
from standins_ageswap import DFM_PAINT, dfm_standin, mismatched_dfm

from facefusion_provider.engine.models import MODELS, model_spec
from facefusion_provider.engine.processors import deep_swapper
from facefusion_provider.engine.processors.base import FaceStats
from facefusion_provider.engine.processors.registry import PROCESSORS
from facefusion_provider.exceptions import InvalidOptionError, ModelIncompatibleError, ModelMissingError
from facefusion_provider.options import DEEP_SWAPPER_MODELS, Options, parse_options

from .builders import StoreFactory, face_at
from .recording import Recorder

# DeepFaceLab's whole-face template as FaceFusion holds it, written out again so the test does not reuse the code.
DFL_WHOLE_FACE = [(0.35342, 0.39286), (0.62798, 0.39286), (0.48661, 0.54018), (0.38839, 0.68750), (0.59821, 0.68750)]
FACE = face_at((160.0, 120.0), 110.0, -5.0)
INTERIOR = (slice(105, 135), slice(145, 175))


def swapped(frame: np.ndarray, models_dir: Path, store_for: StoreFactory, **chosen: Any) -> np.ndarray:
    options = Options(processors=["deep_swapper"], **chosen)
    store = store_for(models_dir)
    assert PROCESSORS["deep_swapper"].prepare([], options, store) == {}
    step = PROCESSORS["deep_swapper"].load(options, {}, store, FaceStats())
    (result,) = step([frame], [[FACE]], None)
    assert isinstance(result, np.ndarray)
    return result


@pytest.mark.parametrize(
    ("model", "size", "morph"),
    [("iperov/elon_musk_224", 224, 100), ("druuzil/henry_cavill_448", 448, 30), ("custom/my_face", 192, 0)],
)
def test_the_face_is_cut_on_dfl_whole_face_at_the_files_size_and_fed_sharpened_bgr_with_the_morph(
    model: str,
    size: int,
    morph: int,
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dfm_standin(models_dir, model, size)
    recorder = Recorder(monkeypatch, deep_swapper)

    result = swapped(textured_frame, models_dir, store_for, deep_swapper_model=model, deep_swapper_morph=morph)

    (warp,) = recorder.warps
    template, used_size, matrix, crop = warp.template, warp.size, warp.matrix, warp.crop
    assert (template, used_size) == ("dfl_whole_face", size)
    reference, _ = cv2.estimateAffinePartial2D(
        FACE.landmark_5, np.asarray(DFL_WHOLE_FACE, np.float32) * size, method=cv2.RANSAC, ransacReprojThreshold=100
    )
    np.testing.assert_allclose(matrix, reference, atol=2e-3 * size)
    (feeds,) = recorder.feeds
    assert set(feeds) == {"in_face:0", "morph_value:0"}
    face = feeds["in_face:0"]
    assert face.shape == (1, size, size, 3) and face.dtype == np.float32
    bgr = crop[:, :, ::-1]
    sharpened = cv2.addWeighted(bgr, 1.75, cv2.GaussianBlur(bgr, (0, 0), 2), -0.75, 0)  # FaceFusion's, on 8 bits
    np.testing.assert_allclose(face[0], sharpened / 255.0, atol=1e-6)
    assert feeds["morph_value:0"].shape == (1,) and feeds["morph_value:0"].dtype == np.float32
    np.testing.assert_allclose(feeds["morph_value:0"], [morph / 100.0])
    # the stand-in paints the face green by the morph; the colour matching pulls part of it back, as in FaceFusion
    change = result[INTERIOR].astype(float).mean(axis=(0, 1)) - textured_frame[INTERIOR].astype(float).mean(axis=(0, 1))
    paint = np.asarray(DFM_PAINT[::-1]) * 255 - textured_frame[INTERIOR].astype(float).mean(axis=(0, 1))
    if morph == 0:
        assert np.abs(change).max() < 4
    else:
        assert np.all(np.sign(change) == np.sign(paint)) and np.all(np.abs(change) > 0.2 * morph / 100 * np.abs(paint))
    assert not (result[:, :40] != textured_frame[:, :40]).any()  # nothing outside the face's crop moves


def test_a_model_without_a_morph_input_gets_only_the_face(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    dfm_standin(models_dir, "rumateus/taylor_swift_224", morph=False)
    recorder = Recorder(monkeypatch, deep_swapper)

    result = swapped(textured_frame, models_dir, store_for, deep_swapper_model="rumateus/taylor_swift_224")

    (feeds,) = recorder.feeds
    assert set(feeds) == {"in_face:0"}
    paint = np.asarray(DFM_PAINT[::-1]) * 255  # RGB
    before, after = (np.abs(image[INTERIOR].astype(float) - paint).mean() for image in (textured_frame, result))
    assert after < 0.7 * before  # nearer the paint


@pytest.mark.parametrize("model", ["iperov/elon_musk_224", "custom/mine"])
def test_a_file_that_is_not_a_deepfacelab_model_is_refused_in_prepare_naming_the_file_and_the_inputs(
    model: str, models_dir: Path, store_for: StoreFactory
) -> None:
    mismatched_dfm(models_dir, model)
    options = Options(processors=["deep_swapper"], deep_swapper_model=model)

    with pytest.raises(ModelIncompatibleError) as refused:
        PROCESSORS["deep_swapper"].prepare([], options, store_for(models_dir))

    message = str(refused.value)
    assert "\n" not in message and f"{model}.dfm" in message and str(models_dir) in message
    assert "expected inputs in_face:0 1xSxSx3" in message and "morph_value:0 1" in message
    assert "found inputs input 1x3x224x224" in message


def test_a_missing_model_names_the_file_and_where_it_was_looked_for(models_dir: Path, store_for: StoreFactory) -> None:
    options = Options(processors=["deep_swapper"], deep_swapper_model="custom/absent")
    with pytest.raises(ModelMissingError, match=r"custom/absent\.dfm was not found \(looked in .*models/custom"):
        PROCESSORS["deep_swapper"].prepare([], options, store_for(models_dir))


def test_the_model_names_are_facefusions_157_or_custom_names_of_one_file() -> None:
    assert len(DEEP_SWAPPER_MODELS) == 157 and Options().deep_swapper_model == "iperov/elon_musk_224"
    sizes = {name: MODELS[name].inputs[0][1][1] for name in DEEP_SWAPPER_MODELS}
    assert sizes["druuzil/henry_cavill_448"] == 448 and sizes["mats/yu_jimin_352"] == 352
    assert set(sizes.values()) == {224, 256, 288, 320, 352, 384, 448}
    assert all(MODELS[name].file_name == f"{name}.dfm" for name in DEEP_SWAPPER_MODELS)
    assert model_spec("custom/my-face.v2").file_name == "custom/my-face.v2.dfm"
    for bad in ("custom/../secret", "custom/a/b", "custom/", "iperov/someone_else_224", "elon_musk_224", "/etc/x"):
        with pytest.raises(InvalidOptionError, match=r"options\.deep_swapper_model: .*custom/<name>"):
            parse_options({"processors": ["deep_swapper"], "deep_swapper_model": bad})
    with pytest.raises(InvalidOptionError, match=r"deep_swapper_morph.*less than or equal to 100"):
        parse_options({"deep_swapper_morph": 101})


def test_the_deep_swapper_reads_faces_and_the_dense_points_only_for_the_area_mask() -> None:
    processor = PROCESSORS["deep_swapper"]
    plain = Options(processors=["deep_swapper"])
    assert processor.analysis(plain).faces and processor.analysis(plain).landmarks == "none"
    area = Options(processors=["deep_swapper"], face_mask_types=["box", "area", "occlusion"])
    assert processor.analysis(area).landmarks == "mesh"
    assert processor.model_names(area) == ("iperov/elon_musk_224", "xseg_1", "face_mesh_468")
    assert processor.output_size(plain, 1920, 1080) == (1920, 1080)


def test_the_masks_combine_by_their_minimum_what_covers_the_face_keeps_its_pixels(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory
) -> None:
    """The occluder stand-in's covering colour (blue) on the face stays with the occlusion mask, and is painted without
    it; the rest of the face is painted either way (box, model masks and occlusion: their minimum)."""
    dfm_standin(models_dir, "iperov/elon_musk_224")
    occluder_standin(models_dir / "xseg_1.onnx")
    frame = textured_frame.copy()
    frame[100:130, 135:165] = COVERING_RGB
    centre = (slice(109, 121), slice(144, 156))
    lower = (slice(135, 150), slice(145, 175))

    plain = swapped(frame, models_dir, store_for)
    occluded = swapped(frame, models_dir, store_for, face_mask_types=["box", "occlusion"])

    assert np.abs(occluded[centre].astype(int) - frame[centre]).max() <= 3
    assert np.abs(plain[centre].astype(int) - frame[centre]).max() > 40
    assert (
        np.abs(occluded[lower].astype(float).mean(axis=(0, 1)) - plain[lower].astype(float).mean(axis=(0, 1))).max() < 3
    )
    assert np.abs(occluded[lower].astype(int) - frame[lower]).mean() > 20
