"""bench/cpu_path_before.py puts the code before issue 24's cuts back into today's callers, so that bench_cpu_stages.py
and bench_worker_fps.py compare before and after in one process; a change of today's call shapes must keep it running
and keep its output within the level it is compared at."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from facefusion_provider.engine.swap_models import swap_faces
from facefusion_provider.options import Options

from .builders import StoreFactory, face_at, inswapper_model

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from cpu_path_before import before_path


def test_the_before_path_swaps_through_todays_callers_within_a_level_of_today(
    textured_frame: np.ndarray, models_dir: Path, store_for: StoreFactory
) -> None:
    inswapper_model(models_dir / "inswapper_128.onnx", kind="flat", colour=(0.25, 0.5, 0.75))
    store = store_for(models_dir)
    options = Options(face_swapper_model="inswapper_128", face_swapper_blend=80)
    faces = [[face_at((130.0, 120.0), 90.0), face_at((200.0, 110.0), 70.0, 12.0)]]
    original = textured_frame.copy()

    (today,) = swap_faces([textured_frame], faces, np.ones(512), options, store)
    with before_path():
        (before,) = swap_faces([textured_frame], faces, np.ones(512), options, store)

    np.testing.assert_array_equal(textured_frame, original)
    assert not np.array_equal(before, original)
    assert np.abs(before.astype(np.int16) - today.astype(np.int16)).max() <= 1
