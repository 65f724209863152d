"""The landmarkers and occluders around the processors on stand-ins whose answers are set (``standins_catalogue.py``):
peppa_wutz's 68 points and score brought back to the frame, ``many`` landmarkers picking 2dfan4 unless peppa_wutz
scores 0.2 higher (FaceFusion's rule), and the ``many`` occluder covering where any of xseg_1/2/3 says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from standins_catalogue import constant_standin

from facefusion_provider.engine.face import Face
from facefusion_provider.engine.face_masks import mask_models, occlusion_mask
from facefusion_provider.engine.landmarks import detect_landmarks
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.processors.registry import analysis_needs
from facefusion_provider.options import Options

from .builders import StoreFactory

FRAME = np.zeros((400, 600, 3), np.uint8)


def level_face() -> Face:
    """A face box of 195 px (the 68-point landmarkers' face size in their 256 crop) centred at (300, 200)."""
    points = np.array([[270, 180], [330, 180], [300, 210], [275, 240], [325, 240]], np.float32)
    return Face(bbox=np.array([202.5, 102.5, 397.5, 297.5], np.float32), score=0.9, landmark_5=points)


def in_frame(points_64: np.ndarray) -> np.ndarray:
    """The 256 crop shows the 195 px box 1:1 around its centre: a point at p/64*256 is at p*4 - 128 + centre."""
    return points_64 * 4 - 128 + np.array([300, 200])


def write_2dfan4(folder: Path, points_64: np.ndarray, peak: float) -> None:
    landmarks = np.concatenate([points_64, np.ones((68, 1))], axis=1)[None].astype(np.float32)
    heatmaps = np.zeros((1, 68, 64, 64), np.float32)
    heatmaps[0, :, 5, 5] = peak
    constant_standin(folder, "2dfan4", [landmarks, heatmaps])


def write_peppa_wutz(folder: Path, points_64: np.ndarray, point_score: float) -> None:
    rows = np.concatenate([points_64, np.full((68, 1), point_score)], axis=1)
    constant_standin(folder, "peppa_wutz", [rows.reshape(1, 204).astype(np.float32)])


def test_peppa_wutz_points_map_back_to_the_frame_and_its_score_is_the_mean_point_score(
    models_dir: Path, store_for: StoreFactory
) -> None:
    points_64 = np.random.default_rng(8).uniform(8, 56, (68, 2))
    write_peppa_wutz(models_dir, points_64, 0.76)  # 0.76 / 0.95 = 0.8
    face = level_face()

    result = detect_landmarks(FRAME, face, Options(face_landmarker_model="peppa_wutz"), store_for(models_dir))

    expected = in_frame(points_64)
    np.testing.assert_allclose(result.landmark_dense, expected, atol=1e-3)
    assert result.extras["landmark_dense_score"] == pytest.approx(0.8)
    np.testing.assert_allclose(result.landmark_5[0], expected[36:42].mean(axis=0), atol=1e-3)  # 5/68: sure enough
    np.testing.assert_array_equal(result.extras["landmark_5_detector"], face.landmark_5)


def test_an_unsure_peppa_wutz_keeps_the_detectors_five(models_dir: Path, store_for: StoreFactory) -> None:
    write_peppa_wutz(models_dir, np.full((68, 2), 32.0), 0.3)
    face = level_face()

    result = detect_landmarks(FRAME, face, Options(face_landmarker_model="peppa_wutz"), store_for(models_dir))

    assert result.landmark_dense is not None and result.landmark_dense.shape == (68, 2)
    np.testing.assert_array_equal(result.landmark_5, face.landmark_5)


@pytest.mark.parametrize(
    ("fan_peak", "peppa_point_score", "winner"),
    [
        (0.9, 0.95, "2dfan4"),  # 1.0 against 1.0
        (0.765, 0.95, "2dfan4"),  # 0.85 against 1.0: within 0.2, 2dfan4 still
        (0.63, 0.95, "peppa_wutz"),  # 0.7 against 1.0
        (0.9, 0.0, "2dfan4"),
    ],
)
def test_many_landmarkers_take_2dfan4_unless_peppa_wutz_scores_a_fifth_higher(
    fan_peak: float, peppa_point_score: float, winner: str, models_dir: Path, store_for: StoreFactory
) -> None:
    rng = np.random.default_rng(9)
    points = {"2dfan4": rng.uniform(8, 56, (68, 2)), "peppa_wutz": rng.uniform(8, 56, (68, 2))}
    write_2dfan4(models_dir, points["2dfan4"], fan_peak)
    write_peppa_wutz(models_dir, points["peppa_wutz"], peppa_point_score)
    scores = {"2dfan4": min(fan_peak / 0.9, 1.0), "peppa_wutz": min(peppa_point_score / 0.95, 1.0)}

    result = detect_landmarks(FRAME, level_face(), Options(face_landmarker_model="many"), store_for(models_dir))

    np.testing.assert_allclose(result.landmark_dense, in_frame(points[winner]), atol=1e-3)
    assert result.extras["landmark_dense_score"] == pytest.approx(scores[winner])


@pytest.mark.parametrize("landmarker", ["peppa_wutz", "many"])
def test_a_68_point_landmarker_is_what_the_model_swapper_and_debugger_read(landmarker: str) -> None:
    swapper = Options(face_swapper_model="inswapper_128", face_landmarker_model=landmarker)
    debugger = Options(processors=["face_debugger"], face_landmarker_model=landmarker)
    assert analysis_needs(swapper) == analysis_needs(debugger) == AnalysisNeeds(faces=True, landmarks="2dfan4")


def test_the_many_occluder_covers_where_any_of_the_three_says_so(models_dir: Path, store_for: StoreFactory) -> None:
    shows = np.ones((1, 256, 256, 1), np.float32)
    top_left, bottom_right = shows.copy(), shows.copy()
    top_left[0, :128, :128] = 0.0
    bottom_right[0, 128:, 128:] = 0.0
    for name, answer in (("xseg_1", top_left), ("xseg_2", bottom_right), ("xseg_3", shows)):
        constant_standin(models_dir, name, [answer])
    store = store_for(models_dir)
    crop = np.full((512, 512, 3), 128, np.uint8)
    options = {"face_swapper_model": "inswapper_128", "face_mask_types": ["box", "occlusion"]}
    many_options = Options.model_validate({**options, "face_occluder_model": "many"})

    many = occlusion_mask(crop, store, many_options)
    first = occlusion_mask(crop, store, Options.model_validate(options))

    assert many[:200, :200].max() == 0.0 and many[312:, 312:].max() == 0.0
    assert many[:200, 312:].min() == 1.0 and many[312:, :200].min() == 1.0
    assert first[:200, :200].max() == 0.0 and first[312:, 312:].min() == 1.0
    assert mask_models(many_options) == ("xseg_1", "xseg_2", "xseg_3")
