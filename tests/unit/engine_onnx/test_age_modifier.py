"""The age modifier on stand-ins with the real files' interfaces (``standins_ageswap.py``): per model the crops
(template x size, styleganex's wider crop from the five points drawn towards the nose), the tensors fed (shapes,
normalisation, how ``age_modifier_direction`` is given), and a change in the frame that follows the direction: fran's
face brighter when older, darker when younger; styleganex's stripes as strong as the direction, none at 0. fran is told
each face's age from the face classifier (a stand-in whose age class the test chooses), as FaceFusion's formula says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from mask_standins import COVERING_RGB, occluder_standin
from standins_ageswap import STYLEGANEX_STRIPES, fran_standin, styleganex_standin
from standins_selection import classifier_standin

from facefusion_provider.engine.face import FaceClasses
from facefusion_provider.engine.processors import age_modifier
from facefusion_provider.engine.processors.base import FaceStats
from facefusion_provider.engine.processors.registry import PROCESSORS, analysis_needs
from facefusion_provider.exceptions import InvalidOptionError, ModelIncompatibleError, ModelMissingError
from facefusion_provider.options import Options, parse_options

from .builders import StoreFactory, face_at
from .recording import Recorder

# FaceFusion's templates, written out again so the test does not reuse the code under test.
FFHQ_512 = [(0.37692, 0.46865), (0.62286, 0.46913), (0.50124, 0.61332), (0.39309, 0.72541), (0.61150, 0.72490)]
STYLEGANEX_384 = [(0.42354, 0.52290), (0.57725, 0.52320), (0.50124, 0.61332), (0.43364, 0.68338), (0.57015, 0.68306)]
FACE = face_at((160.0, 120.0), 140.0, 6.0)
INTERIOR = (slice(100, 140), slice(140, 180))  # well inside the face's crops and their box masks


def reference_matrix(points: np.ndarray, template: list[tuple[float, float]], size: int) -> np.ndarray:
    target = np.asarray(template, np.float32) * size
    matrix, _ = cv2.estimateAffinePartial2D(points, target, method=cv2.RANSAC, ransacReprojThreshold=100)
    return np.asarray(matrix)


def aged(frame: np.ndarray, models_dir: Path, store_for: StoreFactory, **chosen: Any) -> np.ndarray:
    options = Options(processors=["age_modifier"], **chosen)
    step = PROCESSORS["age_modifier"].load(options, {}, store_for(models_dir), FaceStats())
    (result,) = step([frame], [[FACE]], None)
    assert isinstance(result, np.ndarray)
    return result


def classifier_answering_age(models_dir: Path, age_id: int, other_age_id: int | None = None) -> None:
    """A face classifier that places every face (every warm one, with ``other_age_id``) in age class ``age_id``, and
    every cool one in ``other_age_id``."""
    cool = age_id if other_age_id is None else other_age_id
    classifier_standin(models_dir, warm_ids=(0, 1, age_id), cool_ids=(0, 1, cool))


# (age class id the classifier answers, direction, fran's direction input): FaceFusion's [age, age + direction] / 100
# within 0..1, the age the mean of the class's range with its end excluded (range(20, 29): 24; range(70, 100): 84.5).
FRAN_DIRECTIONS = [
    (3, 50, (0.24, 0.74)),
    (3, -50, (0.24, 0.0)),
    (3, 0, (0.24, 0.24)),
    (0, 30, (0.005, 0.305)),
    (6, -20, (0.54, 0.34)),
    (8, 50, (0.845, 1.0)),
]


@pytest.mark.parametrize(("age_id", "direction", "expected"), FRAN_DIRECTIONS)
def test_fran_takes_the_face_at_1024_on_ffhq_512_and_the_classified_ages_as_its_direction(
    age_id: int,
    direction: int,
    expected: tuple[float, float],
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fran_standin(models_dir)
    classifier_answering_age(models_dir, age_id)
    recorder = Recorder(monkeypatch, age_modifier)

    result = aged(textured_frame, models_dir, store_for, age_modifier_direction=direction)

    (warp,) = recorder.warps
    assert (warp.template, warp.size) == ("ffhq_512", 1024)
    np.testing.assert_allclose(warp.landmarks, FACE.landmark_5)
    np.testing.assert_allclose(warp.matrix, reference_matrix(FACE.landmark_5, FFHQ_512, 1024), atol=2)
    crop = warp.crop
    (feeds,) = recorder.feeds
    assert set(feeds) == {"target", "direction"}
    assert feeds["target"].shape == (1, 3, 1024, 1024) and feeds["target"].dtype == np.float32
    np.testing.assert_allclose(feeds["target"][0], crop.transpose(2, 0, 1) / 255.0, atol=1e-6)
    assert feeds["direction"].shape == (2,) and feeds["direction"].dtype == np.float32
    np.testing.assert_allclose(feeds["direction"], expected, atol=1e-6)
    change = result.astype(int) - textured_frame
    wanted = (expected[1] - expected[0]) * 255  # the stand-in adds the age change, clipped at 0 and 255
    before = textured_frame[INTERIOR].astype(float)
    assert np.abs(change[INTERIOR] - (np.clip(before + wanted, 0, 255) - before)).mean() < 4
    assert not change[:, :40].any() and not change[:, 280:].any()  # nothing outside the face's crop moves


@pytest.mark.parametrize(("direction", "fed"), [(100, -2.5), (-100, 2.5), (40, -1.0), (0, 0.0)])
def test_styleganex_takes_the_face_at_256_and_a_wider_crop_at_384_and_a_scalar_direction(
    direction: int,
    fed: float,
    textured_frame: np.ndarray,
    models_dir: Path,
    store_for: StoreFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    styleganex_standin(models_dir)
    recorder = Recorder(monkeypatch, age_modifier)
    chosen = {"age_modifier_model": "styleganex_age", "age_modifier_direction": direction}

    result = aged(textured_frame, models_dir, store_for, **chosen)

    (face, wide) = recorder.warps
    assert (face.template, face.size, wide.template, wide.size) == ("ffhq_512", 256, "styleganex_384", 384)
    nose = FACE.landmark_5[2]
    np.testing.assert_allclose(wide.landmarks, (FACE.landmark_5 - nose) * 0.875 + nose, atol=1e-4)
    np.testing.assert_allclose(face.matrix, reference_matrix(FACE.landmark_5, FFHQ_512, 256), atol=0.5)
    np.testing.assert_allclose(wide.matrix, reference_matrix(wide.landmarks, STYLEGANEX_384, 384), atol=0.5)
    (feeds,) = recorder.feeds
    assert feeds["target"].shape == (1, 3, 256, 256) and feeds["target_with_background"].shape == (1, 3, 384, 384)
    np.testing.assert_allclose(feeds["target"][0], (face.crop.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5, atol=1e-6)
    np.testing.assert_allclose(
        feeds["target_with_background"][0], (wide.crop.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5, atol=1e-6
    )
    assert feeds["direction"].shape == () and feeds["direction"].dtype == np.float32
    assert float(feeds["direction"]) == pytest.approx(fed)
    # the stand-in's stripes, as strong as the direction, survive the colour matching (bands, not a shift)
    rows = result[INTERIOR].astype(float).mean(axis=(1, 2))
    original = textured_frame[INTERIOR].astype(float).mean(axis=(1, 2))
    expected = 255 * STYLEGANEX_STRIPES * abs(fed)  # bands of +-(0.2 x direction) in [-1, 1]: that peak to peak
    assert expected * 0.8 - 2 < np.ptp(rows - original) < expected * 1.05 + 2


def test_styleganex_moves_the_occlusion_mask_from_the_face_crop_to_the_wider_crop() -> None:
    face_matrix = age_modifier.warp_face(np.zeros((240, 320, 3), np.uint8), FACE.landmark_5, "ffhq_512", 256)[1]
    wide_points = age_modifier.extended_points(FACE.landmark_5)
    wide_matrix = age_modifier.warp_face(np.zeros((240, 320, 3), np.uint8), wide_points, "styleganex_384", 384)[1]
    moved = age_modifier.crop_to_crop(face_matrix, wide_matrix)
    frame_points = np.array([[150.0, 110.0], [170.0, 135.0], [140.0, 140.0]])

    def apply(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
        return np.asarray(points @ matrix[:, :2].T + matrix[:, 2])

    np.testing.assert_allclose(apply(moved, apply(face_matrix, frame_points)), apply(wide_matrix, frame_points))


def fran_step(models_dir: Path, store_for: StoreFactory, stats: FaceStats, direction: int) -> Any:
    options = Options(processors=["age_modifier"], age_modifier_direction=direction)
    return PROCESSORS["age_modifier"].load(options, {}, store_for(models_dir), stats)


def test_fran_reads_the_age_class_the_analysis_holds_without_classifying_again(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fran_standin(models_dir)
    classifier_answering_age(models_dir, 3)  # would say 20-29
    recorder, stats = Recorder(monkeypatch, age_modifier), FaceStats()
    stored = FACE.with_(classes=FaceClasses("male", "white", range(60, 69)))

    fran_step(models_dir, store_for, stats, 10)([textured_frame], [[stored]], None)

    np.testing.assert_allclose(recorder.feeds[0]["direction"], (0.64, 0.74), atol=1e-6)
    assert stats.classified == 0


def test_fran_classifies_each_unclassified_face_once_in_the_targets_own_frame(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a swapper the face fran sees is not the target's: its age is read from the target's frame, as FaceFusion
    classifies the target's faces (here the target warm, 20-29; the frame handed on cool, 50-59)."""
    fran_standin(models_dir)
    classifier_answering_age(models_dir, 3, other_age_id=6)
    recorder, stats = Recorder(monkeypatch, age_modifier), FaceStats()
    warm = textured_frame.copy()
    warm[:, :, 0], warm[:, :, 2] = 220, 30
    cool = np.ascontiguousarray(warm[:, :, ::-1])
    second = face_at((250.0, 120.0), 60.0)

    fran_step(models_dir, store_for, stats, 10).with_targets([warm], [cool], [[FACE, second]], None)

    np.testing.assert_allclose([feeds["direction"] for feeds in recorder.feeds], [(0.24, 0.34)] * 2, atol=1e-6)
    assert stats.classified == 2
    fran_step(models_dir, store_for, stats, 10).with_targets([cool], [cool], [[FACE]], None)
    np.testing.assert_allclose(recorder.feeds[-1]["direction"], (0.54, 0.64), atol=1e-6)


def test_fran_needs_the_face_classifier_and_styleganex_does_not(models_dir: Path, store_for: StoreFactory) -> None:
    fran_standin(models_dir)
    styleganex_standin(models_dir)
    fran = Options(processors=["age_modifier"])
    with pytest.raises(ModelMissingError, match=r"age_modifier_model fran reads each face's age with fairface\.onnx"):
        PROCESSORS["age_modifier"].prepare([], fran, store_for(models_dir))
    styleganex = Options(processors=["age_modifier"], age_modifier_model="styleganex_age")
    assert PROCESSORS["age_modifier"].prepare([], styleganex, store_for(models_dir)) == {}
    assert not analysis_needs(styleganex).classes and analysis_needs(fran).classes
    classifier_standin(models_dir, outputs=2)
    with pytest.raises(ModelIncompatibleError, match=r"fairface\.onnx.*three outputs"):
        PROCESSORS["age_modifier"].prepare([], fran, store_for(models_dir))


def test_the_age_modifier_reads_faces_keeps_the_size_and_names_its_models() -> None:
    processor = PROCESSORS["age_modifier"]
    options = Options(processors=["age_modifier"], face_mask_types=["box", "occlusion"])
    assert processor.model_names(options) == ("fran", "fairface", "xseg_1")
    assert analysis_needs(options).faces and processor.output_size(options, 1280, 720) == (1280, 720)
    two_d = Options(processors=["age_modifier"], face_landmarker_model="2dfan4")
    assert analysis_needs(two_d).landmarks == "2dfan4"  # FaceFusion's 5/68


def test_a_direction_out_of_range_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidOptionError, match=r"age_modifier_direction.*less than or equal to 100.*150"):
        parse_options({"processors": ["age_modifier"], "age_modifier_direction": 150})
    with pytest.raises(InvalidOptionError, match=r"age_modifier_direction.*greater than or equal to -100"):
        parse_options({"age_modifier_direction": -101})


def test_a_missing_or_mismatched_age_model_is_refused_in_prepare(models_dir: Path, store_for: StoreFactory) -> None:
    options = Options(processors=["age_modifier"], age_modifier_model="styleganex_age")
    with pytest.raises(ModelMissingError, match=r"styleganex_age\.onnx"):
        PROCESSORS["age_modifier"].prepare([], options, store_for(models_dir))
    fran_standin(models_dir)
    (models_dir / "fran.onnx").rename(models_dir / "styleganex_age.onnx")  # fran's inputs under styleganex's name
    with pytest.raises(ModelIncompatibleError, match=r"styleganex_age.onnx .*expected inputs target .*direction"):
        PROCESSORS["age_modifier"].prepare([], options, store_for(models_dir))


def test_a_frame_without_faces_is_returned_as_it_is(models_dir: Path, store_for: StoreFactory) -> None:
    fran_standin(models_dir)
    classifier_standin(models_dir)
    step = PROCESSORS["age_modifier"].load(Options(processors=["age_modifier"]), {}, store_for(models_dir), FaceStats())
    frame = np.zeros((32, 32, 3), np.uint8)
    assert step([frame], [[]], None)[0] is frame


@pytest.mark.parametrize("model", ["fran", "styleganex_age"])
def test_what_covers_the_face_keeps_its_pixels_with_the_occlusion_mask(
    model: str, textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory
) -> None:
    """A blue patch on the face (the occluder stand-in's covering colour) stays as it was with the occlusion mask, and
    is changed without it: the occluder's mask reaches the right place, through styleganex's wider crop too."""
    fran_standin(models_dir)
    classifier_standin(models_dir)
    styleganex_standin(models_dir)
    occluder_standin(models_dir / "xseg_1.onnx")
    frame = textured_frame.copy()
    frame[105:135, 135:165] = COVERING_RGB
    centre = (slice(114, 126), slice(144, 156))
    chosen = {"age_modifier_model": model, "age_modifier_direction": 100}

    plain = aged(frame, models_dir, store_for, **chosen)
    occluded = aged(frame, models_dir, store_for, face_mask_types=["box", "occlusion"], **chosen)

    assert np.abs(occluded[centre].astype(int) - frame[centre]).max() <= 3
    assert np.abs(plain[centre].astype(int) - frame[centre]).max() > 40
    assert np.abs(occluded[INTERIOR].astype(int) - frame[INTERIOR]).max() > 40  # the rest of the face still changed
