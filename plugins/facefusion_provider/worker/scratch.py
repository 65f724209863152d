"""The worker's temporary folders: one per command, under one parent, each locked by its process while it lives.

A worker killed with SIGKILL cannot remove its own folder (a half-encoded segment, a partial download); the next
worker that starts on the machine finds folders whose lock nobody holds and removes them.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

logger = logging.getLogger(__name__)

PARENT_NAME = "facefusion-worker"
LOCK_NAME = ".lock"
FRESH_SECONDS = 10.0  # a folder this new may still be taking its lock: never judge it abandoned


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[str]:
    """A new folder ``$TMPDIR/facefusion-worker/<prefix>*``, removed on exit; dead workers' folders go first."""
    parent = os.path.join(tempfile.gettempdir(), PARENT_NAME)
    os.makedirs(parent, exist_ok=True)
    remove_abandoned(parent)
    folder = _new_folder(parent, prefix)
    lock = os.open(os.path.join(folder, LOCK_NAME), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(lock)
        with contextlib.suppress(OSError):  # the last worker out leaves no trace; a busy parent stays
            os.rmdir(parent)


def _new_folder(parent: str, prefix: str) -> str:
    try:
        return tempfile.mkdtemp(prefix=prefix, dir=parent)
    except FileNotFoundError:  # another worker removed the empty parent just now
        os.makedirs(parent, exist_ok=True)
        return tempfile.mkdtemp(prefix=prefix, dir=parent)


def remove_abandoned(parent: str) -> list[str]:
    """Remove the folders under ``parent`` whose lock no living process holds; returns their paths."""
    removed = []
    for entry in os.scandir(parent):
        if not entry.is_dir(follow_symlinks=False) or time.time() - entry.stat().st_mtime < FRESH_SECONDS:
            continue
        try:
            lock = os.open(os.path.join(entry.path, LOCK_NAME), os.O_RDWR)
        except FileNotFoundError:  # being created right now, or not ours: leave it
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its worker is alive
        else:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        finally:
            os.close(lock)
    if removed:
        logger.info("removed %d temporary folder(s) left by killed workers: %s", len(removed), ", ".join(removed))
    return removed
