"""Fixtures shared by every test folder."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary folders (``tempfile``) land here, so a test can see whether any was left behind."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def worker_threads() -> Callable[[], list[threading.Thread]]:
    """The worker's own threads still alive (fetching ahead, uploading parts): none may outlive a merge, failed or not."""
    return lambda: [thread for thread in threading.enumerate() if thread.name.startswith("facefusion-")]
