"""Occlusion (xseg) and region (bisenet) masks on their stand-ins: what the models receive, what the masks keep, and
how they combine with the box mask in a real swap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mask_standins import (
    COVERING_RGB,
    MOUTH_RGB,
    OCCLUDER_NAMES,
    PARSER_NAMES,
    occluder_standin,
    parser_standin,
    write_mask_standins,
)

from facefusion_provider.engine.face_masks import (
    occluder_input,
    occlusion_mask,
    parser_input,
    region_mask,
)
from facefusion_provider.engine.processors.chain import build_frame_processor
from facefusion_provider.engine.swap_models import swap_faces
from facefusion_provider.exceptions import InvalidOptionError, ModelIncompatibleError, ModelMissingError
from facefusion_provider.options import Options, parse_options

from .builders import StoreFactory, face_at, inswapper_model

RED = (1.0, 0.0, 0.0)  # the flat stand-in swapper's face: the parser stand-in calls it mouth


def model_options(**values: object) -> Options:
    return Options.model_validate(
        {
            "face_swapper_model": "inswapper_128",
            "face_swapper_color_correction": False,  # the flat swapper's colour shows as it is
            "face_swapper_blend": 100,
            **values,
        }
    )


@pytest.fixture
def mask_models(models_dir: Path) -> Path:
    write_mask_standins(models_dir)
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat", colour=RED)
    return models_dir


def test_the_occluder_gets_a_bgr_nhwc_crop_and_the_parser_an_rgb_imagenet_nchw_crop() -> None:
    crop = np.zeros((128, 128, 3), np.uint8)
    crop[:, :] = (10, 20, 30)
    occluder = occluder_input(crop)
    assert occluder.shape == (1, 256, 256, 3) and occluder.dtype == np.float32
    assert np.allclose(occluder[0, 100, 100], np.array([30, 20, 10]) / 255.0), "BGR, 0..1, as FaceFusion feeds it"
    parser = parser_input(crop)
    assert parser.shape == (1, 3, 512, 512) and parser.dtype == np.float32
    expected = (np.array([10, 20, 30]) / 255.0 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    assert np.allclose(parser[0, :, 300, 300], expected, atol=1e-5), "RGB with ImageNet mean and std"


def test_the_occlusion_mask_is_zero_on_what_covers_the_face(
    mask_models: Path, store_for: StoreFactory, textured_frame: np.ndarray
) -> None:
    crop = textured_frame[:128, :128].copy()
    crop[40:90, 20:70] = COVERING_RGB
    for name in OCCLUDER_NAMES:
        mask = occlusion_mask(crop, store_for(mask_models), model_options(face_occluder_model=name))
        assert mask.shape == (128, 128)
        assert mask[48:82, 28:62].max() == 0.0, f"{name}: the covered part is masked out"
        assert mask[100:, 90:].min() > 0.99, f"{name}: the face away from it is kept"


def test_the_region_mask_keeps_only_the_chosen_regions(
    mask_models: Path, store_for: StoreFactory, textured_frame: np.ndarray
) -> None:
    crop = np.full((128, 128, 3), (200, 160, 140), np.uint8)  # skin
    crop[70:120, 30:100] = MOUTH_RGB
    store = store_for(mask_models)
    mouth = region_mask(crop, store, model_options(face_mask_regions=["mouth"]))
    assert mouth[85:105, 45:85].min() > 0.95 and mouth[:50].max() == 0.0
    skin = region_mask(
        crop, store, model_options(face_mask_regions=["skin", "nose"], face_parser_model=PARSER_NAMES[1])
    )
    assert skin[:50].min() > 0.99 and skin[75:115, 35:95].max() == 0.0
    every = region_mask(crop, store, model_options())
    assert every.min() > 0.99, "by default every region is kept"


def test_a_swap_leaves_the_covered_pixels_as_the_target_s(
    mask_models: Path, store_for: StoreFactory, textured_frame: np.ndarray
) -> None:
    face = face_at((160.0, 120.0), 110.0)
    target = textured_frame.copy()
    target[95:140, 115:150] = COVERING_RGB  # a blue glove over the face's left cheek
    store = store_for(mask_models)
    covered = (slice(100, 135), slice(120, 145))
    open_face = (slice(100, 130), slice(170, 195))
    (box_only,) = swap_faces([target], [[face]], np.ones(512), model_options(), store)
    assert np.abs(box_only[covered].astype(int) - target[covered]).mean() > 50, "the box mask alone swaps the glove"
    options = model_options(face_mask_types=["box", "occlusion"])
    (occluded,) = swap_faces([target], [[face]], np.ones(512), options, store)
    assert np.array_equal(occluded[covered], target[covered]), "the glove stays the target's, pixel for pixel"
    assert np.abs(occluded[open_face].astype(int) - target[open_face]).mean() > 50, "the rest of the face is swapped"


def test_the_region_mask_is_drawn_on_the_swapped_face(
    mask_models: Path, store_for: StoreFactory, textured_frame: np.ndarray
) -> None:
    face = face_at((160.0, 120.0), 110.0)
    store = store_for(mask_models)
    centre = (slice(105, 135), slice(145, 175))
    swapped = {
        regions: swap_faces(
            [textured_frame],
            [[face]],
            np.ones(512),
            model_options(face_mask_types=["box", "region"], face_mask_regions=list(regions)),
            store,
        )[0]
        for regions in (("mouth",), ("skin",))
    }
    # The stand-in swapper paints the whole face red, which the stand-in parser calls mouth (the target has none).
    assert np.abs(swapped["mouth",][centre].astype(int) - textured_frame[centre]).mean() > 50
    assert np.array_equal(swapped["skin",], textured_frame), "no skin on the swapped face: nothing is pasted"


def test_a_missing_or_wrong_mask_model_fails_before_any_frame(
    models_dir: Path, store_for: StoreFactory, tmp_path: Path
) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat")
    identity = {"face_swapper_model": "inswapper_128", "source_embedding": [1.0] * 512}
    options = model_options(face_mask_types=["box", "occlusion"], face_occluder_model="xseg_2")
    with pytest.raises(ModelMissingError, match="xseg_2"):
        build_frame_processor(options, identity, str(models_dir))
    parser_standin(models_dir / "xseg_2.onnx")  # a parser where the occluder should be
    with pytest.raises(ModelIncompatibleError, match=r"expected inputs.*input"):
        build_frame_processor(options, identity, str(models_dir))
    occluder_standin(models_dir / "bisenet_resnet_34.onnx")
    with pytest.raises(ModelIncompatibleError, match="bisenet_resnet_34"):
        build_frame_processor(model_options(face_mask_types=["region"]), identity, str(models_dir))


def test_mask_options_are_checked_and_errors_name_the_field() -> None:
    with pytest.raises(InvalidOptionError, match=r"face_mask_types.*classic"):
        parse_options({"face_mask_types": ["box", "occlusion"]})  # the default swapper is classic
    with pytest.raises(InvalidOptionError, match="face_mask_regions"):
        parse_options({"face_swapper_model": "inswapper_128", "face_mask_regions": []})
    with pytest.raises(InvalidOptionError, match="face_mask_regions"):
        parse_options({"face_swapper_model": "inswapper_128", "face_mask_regions": ["ears"]})
    with pytest.raises(InvalidOptionError, match="face_occluder_model"):
        parse_options({"face_swapper_model": "inswapper_128", "face_occluder_model": "xseg_9"})
    with pytest.raises(InvalidOptionError, match="face_tracker_score"):
        parse_options({"face_tracker_score": 0.6})
    assert Options().face_tracker_score == 0.0, "FaceFusion's default: the tracker is off"
