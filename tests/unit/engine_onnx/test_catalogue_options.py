"""FaceFusion's two weights reach the models' inputs: ``face_swapper_weight`` mixes each target face's own ArcFace
embedding into the swapper's source vector (FaceFusion's interp onto 0.35..-0.35, the target normalised for all but
ghost, image sources untouched), per face and per pixel-boost tile; ``face_enhancer_weight`` is CodeFormer's float64
``weight`` and shows in its output. Out-of-range or off-step weights, and unknown models, are refused naming the
field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from standins import ENHANCER_COLOUR, enhancer_standin, recognizer_standin, swapper_standin

from facefusion_provider.engine import enhance, swap_models
from facefusion_provider.engine.models import swap_facts
from facefusion_provider.engine.recognize import normalize_embedding, raw_embedding
from facefusion_provider.engine.swap_models import SwapIdentity, swap_faces
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.options import Options, parse_options

from .builders import StoreFactory, face_at

SWAPPERS = ["inswapper_128", "hyperswap_1a_256", "simswap_256", "ghost_1_256", "hififace_unofficial_256"]


class FeedRecorder:
    """Keeps every feed a module's run_session is given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
        self.feeds: list[dict[str, np.ndarray]] = []
        run = module.run_session

        def record(session: Any, feeds: dict[str, np.ndarray]) -> Any:
            self.feeds.append({name: np.array(value) for name, value in feeds.items()})
            return run(session, feeds)

        monkeypatch.setattr(module, "run_session", record)

    def swapper_sources(self) -> np.ndarray:
        return np.concatenate([feeds["source"] for feeds in self.feeds if "target" in feeds])


def identity() -> SwapIdentity:
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
    return SwapIdentity(normalize_embedding(rng.normal(size=512)), rng.normal(size=512).astype(np.float32), image)


def unweighted_source(model: str, source: SwapIdentity, emap: np.ndarray) -> np.ndarray:
    """The source vector at weight 0.5, as FaceFusion builds it for each kind."""
    kind = swap_facts(model).source
    if kind == "emap":
        return source.embedding @ emap
    if kind == "embedding":
        return source.embedding
    assert source.converted is not None
    return source.converted


@pytest.mark.parametrize("weight", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("model", SWAPPERS)
def test_swapper_weight_mixes_each_target_faces_embedding_into_its_source(
    model: str,
    weight: float,
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    emap = np.random.default_rng(2).normal(0, 0.05, (512, 512)).astype(np.float32)
    swapper_standin(models_dir, model, "echo", emap=emap)
    recognizer_standin(models_dir)
    store = store_for(models_dir)
    faces = [face_at((90.0, 120.0), 70.0), face_at((230.0, 110.0), 80.0, 10.0)]
    options = Options(face_swapper_model=model, face_swapper_weight=weight)
    source = identity()
    recorder = FeedRecorder(monkeypatch, swap_models)

    swap_faces([textured_frame], [faces], source, options, store)

    share = float(np.interp(weight, [0, 1], [0.35, -0.35]))
    fed = recorder.swapper_sources()
    assert fed.shape == (2, 512)
    for row, face in zip(fed, faces, strict=True):
        target = raw_embedding(textured_frame, face, store, options)
        if model != "ghost_1_256":  # FaceFusion normalises the target's embedding for all but ghost
            target = target / np.linalg.norm(target)
        expected = unweighted_source(model, source, emap) * (1 - share) + target * share
        np.testing.assert_allclose(row, expected, rtol=1e-4, atol=1e-5)
    assert not np.allclose(fed[0], fed[1]), "each face its own mix"


def test_the_default_weight_feeds_the_source_as_it_is_and_image_sources_ignore_the_weight(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    recognizer_standin(models_dir)
    for model in ("hyperswap_1b_256", "uniface_256"):
        swapper_standin(models_dir, model, "echo")
    store = store_for(models_dir)
    face = face_at((160.0, 120.0), 100.0)
    source = identity()
    recorder = FeedRecorder(monkeypatch, swap_models)

    swap_faces([textured_frame], [[face]], source, Options(face_swapper_model="hyperswap_1b_256"), store)
    swap_faces(
        [textured_frame], [[face]], source, Options(face_swapper_model="uniface_256", face_swapper_weight=0.0), store
    )

    hyperswap, uniface = recorder.feeds
    np.testing.assert_allclose(hyperswap["source"][0], source.embedding, atol=1e-6)
    assert source.image is not None
    np.testing.assert_allclose(uniface["source"][0], source.image.transpose(2, 0, 1) / 255.0, atol=1e-6)


def test_with_pixel_boost_every_tile_of_a_face_gets_that_faces_mix(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    swapper_standin(models_dir, "hififace_unofficial_256", "echo")
    recognizer_standin(models_dir)
    faces = [face_at((90.0, 120.0), 70.0), face_at((230.0, 110.0), 80.0)]
    options = Options(
        face_swapper_model="hififace_unofficial_256", face_swapper_pixel_boost="512x512", face_swapper_weight=0.0
    )
    recorder = FeedRecorder(monkeypatch, swap_models)

    swap_faces([textured_frame], [faces], identity(), options, store_for(models_dir), batch_size=3)

    fed = recorder.swapper_sources()
    assert fed.shape == (8, 512)  # two faces, four 256 tiles each, in batches of three
    for first in (0, 4):
        np.testing.assert_allclose(fed[first : first + 4], np.repeat(fed[first : first + 1], 4, axis=0), atol=0)
    assert not np.allclose(fed[0], fed[4])


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_enhancer_weight_is_codeformers_weight_input(
    weight: float,
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enhancer_standin(models_dir, "codeformer", "paint")
    face = face_at((160.0, 120.0), 100.0)
    options = Options(
        processors=["face_enhancer"],
        face_enhancer_model="codeformer",
        face_enhancer_blend=100,
        face_enhancer_weight=weight,
        face_mask_blur=0.0,
    )
    recorder = FeedRecorder(monkeypatch, enhance)

    result = enhance.enhance_face(textured_frame, face, options, store_for(models_dir))

    (feeds,) = recorder.feeds
    assert feeds["weight"].dtype == np.float64 and feeds["weight"].tolist() == [weight]
    # the stand-in keeps (1 - weight) of its input and paints weight of its colour: the face's centre shows it
    matrix = swap_models.warp_face(textured_frame, face.landmark_5, "ffhq_512", 512)[1]
    x, y = (cv2.invertAffineTransform(matrix) @ np.array([256.0, 256.0, 1.0])).round().astype(int)
    painted = (np.asarray(ENHANCER_COLOUR) + 1.0) / 2.0 * 255.0
    np.testing.assert_allclose(result[y, x], textured_frame[y, x] * (1 - weight) + painted * weight, atol=3.0)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("face_swapper_weight", 1.05, "less than or equal to 1"),
        ("face_swapper_weight", -0.05, "greater than or equal to 0"),
        ("face_swapper_weight", 0.33, "multiple of 0.05"),
        ("face_swapper_weight", "0.5", "valid number"),
        ("face_enhancer_weight", 1.5, "less than or equal to 1"),
        ("face_enhancer_weight", -0.1, "greater than or equal to 0"),
        ("face_enhancer_weight", 0.42, "multiple of 0.05"),
    ],
)
def test_a_weight_out_of_bounds_is_refused_naming_the_field(field: str, value: object, says: str) -> None:
    with pytest.raises(InvalidOptionError, match=rf"options\.{field}: .*{says}"):
        parse_options({field: value})


CHOICES = {
    "face_swapper_model": ("hififace_256", "hififace_unofficial_256"),
    "face_enhancer_model": ("gpen_bfr_4096", "gpen_bfr_2048"),
    "face_detector_model": ("yunet", "yunet_2023_mar"),  # FaceFusion's name for it: the catalogue's is the file's
    "face_landmarker_model": ("peppa", "peppa_wutz"),
    "face_occluder_model": ("xseg_4", "many"),
}


@pytest.mark.parametrize("field", list(CHOICES))
def test_an_unknown_model_is_refused_naming_the_field_and_the_choices(field: str) -> None:
    value, listed = CHOICES[field]
    with pytest.raises(InvalidOptionError, match=rf"options\.{field}: Input should be .*'{listed}'.*'{value}'"):
        parse_options({field: value})


@pytest.mark.parametrize("model", ["many", "yunet_2023_mar", "yoloface_8n"])
def test_detectors_facefusion_runs_at_640_refuse_another_size_naming_the_field(model: str) -> None:
    with pytest.raises(
        InvalidOptionError, match=rf"face_detector_size 320x320 does not fit face_detector_model {model}"
    ):
        parse_options({"face_detector_model": model, "face_detector_size": "320x320"})
    assert parse_options({"face_detector_model": model}).face_detector_size == "640x640"
    assert parse_options({"face_detector_model": "scrfd_2.5g", "face_detector_size": "320x320"})
