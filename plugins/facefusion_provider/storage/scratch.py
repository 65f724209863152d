"""The worker's temporary folders: one per command, under one parent, each locked by its process while it lives.

A worker killed with SIGKILL cannot remove its own folder (a half-encoded segment, a partial download); the next
worker that starts on the machine finds folders whose lock nobody holds and removes them, at once: a folder's lock file
appears under its name already locked (locked under a temporary name, then renamed), so an unlocked one is a dead
worker's, however recently that worker wrote.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator

from facefusion_provider.exceptions import StorageFullError, is_no_space
from facefusion_provider.storage.uris import is_within

logger = logging.getLogger(__name__)

PARENT_NAME = "facefusion-worker"
CACHE_FOLDER = "facefusion-provider"  # this machine's cache for the provider: work roots, models, TensorRT engines
LOCK_NAME = ".lock"
LOCKING_NAME = ".lock-taking"  # the lock file before it is locked; a remover never looks at it


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[str]:
    """A new folder ``$TMPDIR/facefusion-worker/<prefix>*``, removed on exit; dead workers' folders go first."""
    parent = os.path.join(tempfile.gettempdir(), PARENT_NAME)
    os.makedirs(parent, exist_ok=True)
    remove_abandoned(parent)
    folder = _new_folder(parent, prefix)
    lock = os.open(os.path.join(folder, LOCKING_NAME), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.rename(os.path.join(folder, LOCKING_NAME), os.path.join(folder, LOCK_NAME))  # visible only once locked
        yield folder
    except OSError as error:
        written = str(error.filename2 or error.filename or "")
        if is_no_space(error) and is_within(written, folder):
            raise StorageFullError.naming(f"{written} (this worker's scratch folder, under TMPDIR)", error) from None
        raise
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
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            lock = os.open(os.path.join(entry.path, LOCK_NAME), os.O_RDWR)
        except FileNotFoundError:  # being created right now (not locked yet), or not ours: leave it
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


def cache_folder(*parts: str) -> str:
    """A folder of the provider's cache on this machine (``$XDG_CACHE_HOME``, else ``~/.cache``, then
    ``facefusion-provider``), not made: the one reading of that standard variable."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, CACHE_FOLDER, *parts)
