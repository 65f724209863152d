"""The background remover on stand-ins whose foreground is where the red is above one half (corridor_key: where its
coarse green-screen key says so, with its own foreground colours): the foreground kept, the background the fill
colour, the despill as FaceFusion's formula gives it, the frame's size kept; a transparent fill gives RGBA frames whose
alpha is the matte, carried past later processors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from standins import background_remover_standin, colorizer_standin

from facefusion_provider.engine.face import Frame
from facefusion_provider.engine.processors.background_remover import PROCESSOR, RemoveBackgrounds
from facefusion_provider.engine.processors.base import FaceStats
from facefusion_provider.engine.processors.chain import build_frame_processor
from facefusion_provider.engine.processors.needs import NO_ANALYSIS
from facefusion_provider.engine.processors.registry import analysis_needs
from facefusion_provider.exceptions import ModelIncompatibleError
from facefusion_provider.options import Options, parse_options

from .builders import StoreFactory

FOREGROUND = (220, 40, 40)  # red above one half: the stand-ins' foreground
BACKGROUND = (30, 60, 200)
GREEN_SCREEN = (20, 220, 30)


def _halves(height: int, width: int, left: tuple[int, int, int], right: tuple[int, int, int]) -> Frame:
    frame = np.empty((height, width, 3), np.uint8)
    frame[:, : width // 2] = left
    frame[:, width // 2 :] = right
    return frame


def _load(models_dir: Path, store_for: StoreFactory, model: str, **options: object) -> RemoveBackgrounds:
    chosen = Options(processors=["background_remover"], background_remover_model=model, **options)  # type: ignore[arg-type]
    step = PROCESSOR.load(chosen, {}, store_for(models_dir), FaceStats())
    assert isinstance(step, RemoveBackgrounds)
    return step


@pytest.mark.parametrize("model", ["modnet", "rmbg_2.0", "u2net_cloth", "silueta"])
def test_the_background_becomes_the_fill_colour_and_the_foreground_is_kept(model: str, models_dir: Path) -> None:
    background_remover_standin(models_dir, model)
    frame = _halves(180, 320, FOREGROUND, BACKGROUND)
    options = Options(
        processors=["background_remover"],
        background_remover_model=model,
        background_remover_fill_color=(0, 255, 0, 255),
    )

    (removed,) = build_frame_processor(options, {}, str(models_dir)).process_batch([frame])

    assert removed.shape == frame.shape
    assert (removed[:, :150] == FOREGROUND).all()
    assert (removed[:, 170:] == (0, 255, 0)).all()


def test_at_the_models_size_every_pixel_is_foreground_or_fill(models_dir: Path, store_for: StoreFactory) -> None:
    background_remover_standin(models_dir, "modnet")  # 512 x 512: the mask is not resized
    frame = np.random.default_rng(2).integers(0, 256, (512, 512, 3), dtype=np.uint8)
    (removed,) = _load(models_dir, store_for, "modnet", background_remover_fill_color=(10, 20, 30, 255))(
        [frame], [[]], None
    )
    foreground = frame[:, :, 0] > 0.5 * 255
    np.testing.assert_array_equal(removed[foreground], frame[foreground])
    assert (removed[~foreground] == (10, 20, 30)).all()


def test_the_despill_pulls_the_screen_colour_towards_the_other_two(models_dir: Path, store_for: StoreFactory) -> None:
    background_remover_standin(models_dir, "modnet")
    spilled = (200, 230, 50)  # red above one half: foreground, with a green cast
    frame = np.full((64, 64, 3), spilled, np.uint8)
    step = _load(models_dir, store_for, "modnet", background_remover_despill_color=(0, 255, 0, 128))
    (removed,) = step([frame], [[]], None)
    # green: 230 + (min(230, (200 + 50) / 2) - 230) x 128 / 255 x 1 = 177.3; red and blue have no weight
    assert (removed == (200, 177, 50)).all()


def test_corridor_key_keys_the_green_screen_and_gives_its_own_colours(
    models_dir: Path, store_for: StoreFactory
) -> None:
    background_remover_standin(models_dir, "corridor_key_1024")
    frame = _halves(100, 200, (200, 80, 60), GREEN_SCREEN)
    (removed,) = _load(models_dir, store_for, "corridor_key_1024")([frame], [[]], None)
    assert np.abs(removed[:, :90].astype(int) - (55, 175, 195)).max() <= 1  # the stand-in's colours: 1 - the input
    assert (removed[:, 110:] == (0, 0, 0)).all()  # the default fill, opaque black


def test_a_transparent_fill_gives_rgba_whose_alpha_is_the_matte_and_whose_colour_mixes_the_fill(
    models_dir: Path, store_for: StoreFactory
) -> None:
    background_remover_standin(models_dir, "modnet")
    frame = _halves(100, 200, FOREGROUND, BACKGROUND)
    step = _load(models_dir, store_for, "modnet", background_remover_fill_color=(0, 255, 0, 128))
    (removed,) = step([frame], [[]], None)
    assert removed.shape == (100, 200, 4)
    assert (removed[:, :90, 3] == 255).all() and (removed[:, 110:, 3] == 0).all()  # the matte, as FaceFusion writes it
    assert (removed[:, :90, :3] == FOREGROUND).all()
    # the background mixed towards the fill by its alpha: 30 - 30 x 128/255, 60 + 195 x 128/255, 200 - 200 x 128/255
    assert (removed[:, 110:, :3] == (14, 157, 99)).all()
    assert Options().background_remover_fill_color == (0, 0, 0, 255)  # opaque by default: no alpha unless asked


def test_the_alpha_passes_later_processors_by_and_is_scaled_with_the_frame(models_dir: Path) -> None:
    """The colorizer after the remover gets RGB frames (it converts RGB to Lab); ``output_video_scale`` doubles the
    frame and the alpha with it."""
    background_remover_standin(models_dir, "modnet")
    colorizer_standin(models_dir, "ddcolor")
    options = Options(
        processors=["background_remover", "frame_colorizer"],
        background_remover_model="modnet",
        background_remover_fill_color=(0, 0, 0, 0),
        frame_colorizer_model="ddcolor",
        output_video_scale=2.0,
    )
    frame = _halves(60, 100, FOREGROUND, BACKGROUND)

    (processed,) = build_frame_processor(options, {}, str(models_dir)).process_batch([frame])

    assert processed.shape == (120, 200, 4)
    assert (processed[:, :90, 3] == 255).all() and (processed[:, 110:, 3] == 0).all()
    assert np.abs(processed[:, :, :3].astype(int) - np.repeat(np.repeat(frame, 2, 0), 2, 1)).max() > 20, "coloured"


@pytest.mark.parametrize(
    ("given", "colour"),
    [([7], (7, 7, 7, 255)), ([1, 2], (1, 2, 1, 255)), ([1, 2, 3], (1, 2, 3, 255)), ([1, 2, 3, 255], (1, 2, 3, 255))],
)
def test_colours_take_facefusions_shorter_forms(given: list[int], colour: tuple[int, ...]) -> None:
    options = parse_options({"background_remover_fill_color": given, "background_remover_despill_color": given})
    assert options.background_remover_fill_color == options.background_remover_despill_color == colour


def test_a_background_remover_with_other_inputs_is_refused_when_it_loads(
    tmp_path: Path, store_for: StoreFactory
) -> None:
    background_remover_standin(tmp_path, "birefnet_general", input_name="pixel_values")
    with pytest.raises(ModelIncompatibleError, match=r"expected inputs input \?x3x\?x\?, found pixel_values"):
        _load(tmp_path, store_for, "birefnet_general")
    assert analysis_needs(Options(processors=["background_remover"])) == NO_ANALYSIS
