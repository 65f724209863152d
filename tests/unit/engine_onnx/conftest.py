"""Fixtures of the ONNX path's tests: a textured frame, a models folder and a store over it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from facefusion_provider.engine.store import ModelStore

from .builders import StoreFactory


@pytest.fixture
def textured_frame() -> np.ndarray:
    """A 320x240 frame with smooth structure (so interpolation errors stay small) and a little noise."""
    rng = np.random.default_rng(7)
    ys, xs = np.mgrid[:240, :320].astype(np.float32)
    frame = np.stack(
        [
            127 + 100 * np.sin(xs / 23.0),
            127 + 100 * np.cos(ys / 17.0),
            127 + 80 * np.sin((xs + ys) / 31.0),
        ],
        axis=-1,
    )
    frame += rng.normal(0, 2, frame.shape)
    return np.asarray(np.clip(frame, 0, 255), np.uint8)


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    return folder


@pytest.fixture
def store_for(tmp_path: Path) -> StoreFactory:
    def make(models_dir: Path) -> ModelStore:
        return ModelStore(models_dir=str(models_dir), cache_dir=str(tmp_path / "cache"))

    return make
