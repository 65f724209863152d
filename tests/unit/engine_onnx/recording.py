"""What a face processor module gave its warp and its model: its ``warp_face`` and ``run_session`` wrapped."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pytest


@dataclass(frozen=True)
class Warp:
    template: str
    size: int
    landmarks: np.ndarray
    matrix: np.ndarray
    crop: np.ndarray


class Recorder:
    """Keeps each warp (``Warp``) and each model call's feeds (copies) of ``module``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> None:
        self.warps: list[Warp] = []
        self.feeds: list[dict[str, np.ndarray]] = []
        warp, run = module.warp_face, module.run_session

        def record_warp(frame: np.ndarray, landmarks: Any, template: str, size: int) -> Any:
            crop, matrix = warp(frame, landmarks, template, size)
            self.warps.append(Warp(template, size, np.array(landmarks), matrix, crop))
            return crop, matrix

        def record_run(session: Any, feeds: dict[str, np.ndarray]) -> Any:
            self.feeds.append({name: np.array(value) for name, value in feeds.items()})
            return run(session, feeds)

        monkeypatch.setattr(module, "warp_face", record_warp)
        monkeypatch.setattr(module, "run_session", record_run)
