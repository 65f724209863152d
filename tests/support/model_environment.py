"""A pytest plugin (``tests/conftest.py`` loads it) with the model environment a worker run in a test sees: no user
model folders and a private model cache. A test module asks for it with
``pytestmark = pytest.mark.usefixtures("no_model_environment")``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def no_model_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only the ``--models-dir`` a test hands the worker: no MODELS_DIR or MODELS_URI, a model cache of the test's."""
    # imported here: every test session loads this plugin, and the store brings onnxruntime with it
    from facefusion_provider.engine.store import MODELS_CACHE_ENV, MODELS_DIR_ENV, MODELS_URI_ENV

    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    monkeypatch.delenv(MODELS_URI_ENV, raising=False)
    monkeypatch.setenv(MODELS_CACHE_ENV, str(tmp_path / "model-cache"))
