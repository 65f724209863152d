"""Fixtures shared by every test folder."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# fixtures for the system programs tests run (promtool), and the model environment of a worker run
pytest_plugins = ["system_binaries", "model_environment"]


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


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a real filesystem with no space left (a 1 MiB tmpfs, filled), unmounted afterwards; skipped where
    this process may not mount one (it takes root)."""
    folder = tmp_path / "full"
    folder.mkdir()
    from system_binaries import require_binary  # the plugin above: imported here, after pytest has registered it

    mount, umount = require_binary("mount", package="mount"), require_binary("umount", package="mount")
    mounted = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (mounting takes root): {mounted.stderr.strip()}")
    try:
        with contextlib.suppress(OSError), open(folder / "filler", "wb") as filler:
            filler.write(bytes(2 * 1024 * 1024))  # more than fits: the write stops where the disk is full
        yield folder
    finally:
        subprocess.run([umount, "--lazy", str(folder)], check=False)


@pytest.fixture(autouse=True)
def normal_scheduling() -> Iterator[None]:
    """A test must not leave this process's thread on a real-time policy (SVT-AV1 sets SCHED_FIFO when run as root):
    the servers, browsers and containers started after it would inherit it, and one busy loop would starve CI."""
    yield
    policy = os.sched_getscheduler(0)
    if policy != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        pytest.fail(f"the test left this thread on scheduling policy {policy} (SCHED_OTHER is {os.SCHED_OTHER})")
