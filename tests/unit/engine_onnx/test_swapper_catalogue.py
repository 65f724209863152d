"""FaceFusion's swapper catalogue through the one parameterised path, on stand-ins with the real files' interfaces: per
family the alignment (template x size) and the tensors the model receives, pixel boost, the source identity each
source kind stores, the enhancers' I/O (CodeFormer's weight), and clear errors for a wrong file or pixel boost."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from people import people
from standins import (
    ENHANCER_COLOUR,
    converter_matrix,
    enhancer_standin,
    paint_colour,
    swapper_standin,
    write_standins,
)

from facefusion_provider.engine import enhance, swap_models
from facefusion_provider.engine.face import Face
from facefusion_provider.engine.models import MODELS, swap_facts
from facefusion_provider.engine.processors.chain import prepare_identity
from facefusion_provider.engine.recognize import normalize_embedding
from facefusion_provider.engine.swap_models import SwapIdentity, identity_from_json, swap_face
from facefusion_provider.exceptions import InvalidOptionError, ModelIncompatibleError
from facefusion_provider.options import SWAPPER_MODEL_SIZES, Options, parse_options

from .builders import StoreFactory, face_at
from .recording import Recorder

# MODELS.md's templates, written out again so the test does not reuse the code under test.
TEMPLATES = {
    "arcface_112_v1": [(0.35473, 0.45659), (0.64527, 0.45659), (0.5, 0.61154), (0.37913, 0.77688), (0.62087, 0.77688)],
    "arcface_112_v2": [
        (0.34192, 0.46157),
        (0.65653, 0.45983),
        (0.50023, 0.64051),
        (0.37098, 0.82469),
        (0.63152, 0.82325),
    ],
    "arcface_128": [(0.36168, 0.40388), (0.63697, 0.40235), (0.50020, 0.56044), (0.38710, 0.72161), (0.61508, 0.72034)],
    "ffhq_512": [(0.37692, 0.46865), (0.62286, 0.46913), (0.50124, 0.61332), (0.39309, 0.72541), (0.61150, 0.72490)],
    "mtcnn_512": [(0.36563, 0.46734), (0.63305, 0.46586), (0.50019, 0.61943), (0.39033, 0.77599), (0.61179, 0.77476)],
}
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
UNIT = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
# family model -> (template, size, (mean, std), source shape, de-normalised output)
FAMILIES: dict[str, tuple[str, int, Any, tuple[int, ...], bool]] = {
    "inswapper_128": ("arcface_128", 128, UNIT, (1, 512), False),
    "hyperswap_1a_256": ("arcface_128", 256, HALF, (1, 512), True),
    "simswap_256": ("arcface_112_v1", 256, IMAGENET, (1, 512), False),
    "simswap_unofficial_512": ("arcface_112_v1", 512, UNIT, (1, 512), False),
    "ghost_1_256": ("arcface_112_v1", 256, HALF, (1, 512), True),
    "hififace_unofficial_256": ("mtcnn_512", 256, HALF, (1, 512), True),
    "blendswap_256": ("ffhq_512", 256, UNIT, (1, 3, 112, 112), False),
    "uniface_256": ("ffhq_512", 256, HALF, (1, 3, 256, 256), True),
}


def reference_matrix(face: Face, template: str, size: int) -> np.ndarray:
    """FaceFusion's alignment: cv2.estimateAffinePartial2D of the five points onto the template (RANSAC, threshold 100)."""
    points = np.asarray(TEMPLATES[template], np.float32) * size
    matrix, _ = cv2.estimateAffinePartial2D(face.landmark_5, points, method=cv2.RANSAC, ransacReprojThreshold=100)
    return np.asarray(matrix)


def sample_identity(facts_name: str) -> SwapIdentity:
    rng = np.random.default_rng(3)
    facts = swap_facts(facts_name)
    image = None
    if facts.source == "image":
        assert facts.source_size is not None
        image = rng.integers(0, 256, (facts.source_size, facts.source_size, 3), dtype=np.uint8)
    return SwapIdentity(normalize_embedding(rng.normal(size=512)), rng.normal(size=512).astype(np.float32), image)


@pytest.mark.parametrize("model", list(FAMILIES))
def test_each_family_aligns_to_its_template_and_feeds_its_tensors(
    model: str,
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template, size, (mean, std), source_shape, _ = FAMILIES[model]
    rng = np.random.default_rng(1)
    emap = rng.normal(0, 0.05, (512, 512)).astype(np.float32)
    swapper_standin(models_dir, model, "echo", emap=emap)
    face = face_at((160.0, 120.0), 110.0, 8.0)
    identity = sample_identity(model)
    recorder = Recorder(monkeypatch, swap_models)
    options = Options(face_swapper_model=model, face_swapper_blend=100, face_swapper_color_correction=False)

    result = swap_face(textured_frame, face, identity, options, store_for(models_dir))

    (warp,) = recorder.warps
    matrix, crop = warp.matrix, warp.crop
    assert (warp.template, warp.size) == (template, size)
    np.testing.assert_allclose(matrix, reference_matrix(face, template, size), atol=2e-3 * size)
    (feeds,) = recorder.feeds
    target, source = feeds["target"], feeds["source"]
    assert target.shape == (1, 3, size, size) and target.dtype == np.float32
    expected_target = (crop.transpose(2, 0, 1)[None] / 255.0 - np.reshape(mean, (1, 3, 1, 1))) / np.reshape(
        std, (1, 3, 1, 1)
    )
    np.testing.assert_allclose(target, expected_target, atol=1e-5)
    assert source.shape == source_shape and source.dtype == np.float32
    facts = swap_facts(model)
    if facts.source == "emap":
        np.testing.assert_allclose(source[0], identity.embedding @ emap, atol=1e-5)
    elif facts.source == "embedding":
        np.testing.assert_allclose(source[0], identity.embedding, atol=1e-6)
        assert np.linalg.norm(source) == pytest.approx(1.0, abs=1e-5)
    elif facts.source == "crossface":
        assert identity.converted is not None
        np.testing.assert_allclose(source[0], identity.converted, atol=1e-6)
    else:
        assert identity.image is not None
        np.testing.assert_allclose(source[0], identity.image.transpose(2, 0, 1) / 255.0, atol=1e-6)
    # An echoing model gives the face back: the output's de-normalisation matches the input's normalisation.
    inside = cv2.warpAffine(np.ones((size, size), np.float32), cv2.invertAffineTransform(matrix), (320, 240)) > 0.999
    difference = np.abs(result.astype(np.int16) - textured_frame.astype(np.int16))[inside]
    assert inside.sum() > 3000 and difference.mean() < 2.5


@pytest.mark.parametrize("model", ["hyperswap_1b_256", "simswap_unofficial_512", "uniface_256"])
def test_pixel_boost_feeds_interleaved_tiles_of_the_model_size_and_reassembles_them(
    model: str,
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    size = swap_facts(model).size
    swapper_standin(models_dir, model, "echo")
    recorder = Recorder(monkeypatch, swap_models)
    options = Options(
        face_swapper_model=model, face_swapper_pixel_boost="1024x1024", face_swapper_blend=100, face_mask_blur=0.0
    )
    face = face_at((160.0, 120.0), 150.0)

    result = swap_face(textured_frame, face, sample_identity(model), options, store_for(models_dir))

    (warp,) = recorder.warps
    matrix, crop = warp.matrix, warp.crop
    total = 1024 // size
    assert warp.size == 1024
    targets = np.concatenate([feeds["target"] for feeds in recorder.feeds])
    assert targets.shape == (total * total, 3, size, size)
    mean, std = swap_facts(model).mean, swap_facts(model).std
    tile = targets[total + 1].transpose(1, 2, 0) * np.asarray(std) + np.asarray(mean)  # tile (a=1, b=1)
    np.testing.assert_allclose(tile * 255.0, crop[1::total, 1::total], atol=1e-3)
    inside = cv2.warpAffine(np.ones((1024, 1024), np.float32), cv2.invertAffineTransform(matrix), (320, 240)) > 0.999
    assert np.abs(result.astype(np.int16) - textured_frame.astype(np.int16))[inside].mean() < 2.5


def test_a_pixel_boost_the_model_does_not_offer_is_refused_naming_the_option(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory
) -> None:
    with pytest.raises(InvalidOptionError, match=r"face_swapper_pixel_boost.*384x384.*512x512, 1024x1024"):
        parse_options({"face_swapper_model": "simswap_unofficial_512", "face_swapper_pixel_boost": "384x384"})
    swapper_standin(models_dir, "ghost_2_256", "echo")
    unchecked = Options.model_construct(face_swapper_model="ghost_2_256", face_swapper_pixel_boost="384x384")
    with pytest.raises(InvalidOptionError, match=r"face_swapper_pixel_boost.*256x256, 512x512, 768x768, 1024x1024"):
        swap_face(
            textured_frame,
            face_at((160.0, 120.0), 100.0),
            sample_identity("ghost_2_256"),
            unchecked,
            store_for(models_dir),
        )
    # the default pixel boost means the swapper's own size, as in FaceFusion
    assert Options(face_swapper_model="simswap_unofficial_512").face_swapper_pixel_boost == "512x512"
    assert Options(face_swapper_model="inswapper_128").face_swapper_pixel_boost == "128x128"


def test_options_know_each_swappers_size_as_the_catalogue_does() -> None:
    catalogue = {name: spec.swap.size for name, spec in MODELS.items() if spec.swap is not None}
    assert catalogue == SWAPPER_MODEL_SIZES
    assert set(catalogue) | {"classic"} == set(Options.model_json_schema()["properties"]["face_swapper_model"]["enum"])


@pytest.mark.parametrize(
    ("model", "found"),
    [("blendswap_256", "source ?x512"), ("simswap_unofficial_512", "target ?x3x256x256")],
)
def test_a_file_with_other_inputs_is_refused_naming_the_expected_ones(
    model: str, found: str, models_dir: Path, store_for: StoreFactory
) -> None:
    other = "hyperswap_1a_256"
    path = swapper_standin(models_dir, other, "echo")
    path.rename(models_dir / MODELS[model].file_name)
    expected = "target ?x3x{0}x{0}".format(swap_facts(model).size)
    with pytest.raises(ModelIncompatibleError, match=rf"expected inputs {re.escape(expected)}.*{re.escape(found)}"):
        store_for(models_dir).session_for(model, Options(face_swapper_model=model))


# --- the identity each source kind stores ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def astronaut_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("source") / "astronaut.png"
    cv2.imwrite(str(path), np.ascontiguousarray(people()["astronaut"][:, :, ::-1]))
    return str(path)


@pytest.mark.parametrize(
    "model",
    ["simswap_256", "ghost_3_256", "hififace_unofficial_256", "blendswap_256", "uniface_256", "hyperswap_1c_256"],
)
def test_prepare_stores_what_the_source_kind_needs(model: str, astronaut_file: str, tmp_path: Path) -> None:
    models = write_standins(tmp_path / "models")
    options = Options(face_swapper_model=model)

    stored = prepare_identity([astronaut_file], None, options, str(models))

    identity = identity_from_json(stored, swap_facts(model))
    facts = swap_facts(model)
    assert np.linalg.norm(stored["source_embedding"]) == pytest.approx(1.0, abs=1e-5)
    if facts.source == "crossface":
        assert facts.converter is not None
        raw = np.asarray(stored["source_embedding"])  # the stand-in recogniser's raw output, up to its length
        converted = np.asarray(stored["source_converted"])
        direction = normalize_embedding(raw @ converter_matrix(facts.converter))
        assert np.abs(normalize_embedding(converted) @ direction) == pytest.approx(1.0, abs=1e-4)
        normalised = abs(float(np.linalg.norm(converted)) - 1.0) < 1e-4
        assert normalised is facts.normalize_source
    else:
        assert "source_converted" not in stored
    if facts.source == "image":
        assert identity.image is not None and identity.image.shape == (facts.source_size, facts.source_size, 3)
        assert identity.image.std() > 20, "a face crop, not a flat image"
    else:
        assert "source_image_png_base64" not in stored


# --- enhancers --------------------------------------------------------------------------------------------------------

ENHANCERS = {
    "gfpgan_1.4": ("ffhq_512", 512),
    "gpen_bfr_256": ("arcface_128", 256),
    "gpen_bfr_512": ("ffhq_512", 512),
    "codeformer": ("ffhq_512", 512),
    "restoreformer_plus_plus": ("ffhq_512", 512),
    "gfpgan_1.2": ("ffhq_512", 512),
    "gfpgan_1.3": ("ffhq_512", 512),
    "gpen_bfr_1024": ("ffhq_512", 1024),
    "gpen_bfr_2048": ("ffhq_512", 2048),
}


@pytest.mark.parametrize("model", list(ENHANCERS))
def test_enhancers_get_their_crop_in_minus_one_to_one_and_codeformer_its_weight(
    model: str,
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template, size = ENHANCERS[model]
    enhancer_standin(models_dir, model, "paint")
    recorder = Recorder(monkeypatch, enhance)
    face = face_at((160.0, 120.0), 100.0)
    options = Options(
        processors=["face_enhancer"], face_enhancer_model=model, face_enhancer_blend=100, face_mask_blur=0
    )

    result = enhance.enhance_face(textured_frame, face, options, store_for(models_dir))

    (warp,) = recorder.warps
    matrix, crop = warp.matrix, warp.crop
    assert warp.template == template and warp.size == size
    np.testing.assert_allclose(matrix, reference_matrix(face, template, size), atol=2e-3 * size)
    (feeds,) = recorder.feeds
    np.testing.assert_allclose(feeds["input"], (crop.transpose(2, 0, 1)[None] / 255.0 - 0.5) / 0.5, atol=1e-6)
    colour: np.ndarray | None = (np.asarray(ENHANCER_COLOUR) + 1.0) / 2.0 * 255.0
    if model == "codeformer":
        assert set(feeds) == {"input", "weight"}
        assert feeds["weight"].dtype == np.float64 and feeds["weight"].shape == (1,) and feeds["weight"][0] == 0.5
        colour = None  # half the input, half the colour: checked below
    else:
        assert set(feeds) == {"input"}
    x, y = (cv2.invertAffineTransform(matrix) @ np.array([size / 2, size / 2, 1.0])).round().astype(int)
    if colour is not None:
        np.testing.assert_allclose(result[y, x], colour, atol=1.5)
    else:
        expected = textured_frame[y, x] * 0.5 + (np.asarray(ENHANCER_COLOUR) + 1.0) / 2.0 * 255.0 * 0.5
        np.testing.assert_allclose(result[y, x], expected, atol=3.0)


def test_a_paint_swapper_takes_its_colour_from_the_source(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory
) -> None:
    """The source reaches the model: two identities give two faces, each the colour its source tensor implies."""
    swapper_standin(models_dir, "hyperswap_1a_256", "paint")
    face = face_at((160.0, 120.0), 110.0)
    options = Options(
        face_swapper_model="hyperswap_1a_256", face_swapper_blend=100, face_swapper_color_correction=False
    )
    store = store_for(models_dir)
    matrix = reference_matrix(face, "arcface_128", 256)
    x, y = (cv2.invertAffineTransform(matrix) @ np.array([128.0, 128.0, 1.0])).round().astype(int)
    facts = swap_facts("hyperswap_1a_256")
    for seed in (1, 2):
        embedding = normalize_embedding(np.random.default_rng(seed).normal(size=512))
        result = swap_face(textured_frame, face, embedding, options, store)
        np.testing.assert_allclose(result[y, x], paint_colour(embedding[None], facts) * 255.0, atol=1.5)
