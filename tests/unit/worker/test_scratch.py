"""The worker's temporary folders: a killed worker's is removed by the next worker at once; a living one's never."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from facefusion_provider.storage.scratch import LOCKING_NAME, PARENT_NAME, scratch_folder

# A worker that takes a folder, writes into it (a segment being encoded), says where it is, and waits to be killed.
HOLDER = """
import sys, time
from facefusion_provider.storage.scratch import scratch_folder
with scratch_folder("span-") as folder:
    open(folder + "/00003.mp4", "wb").write(b"half a segment")
    print(folder, flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder(private_tmp: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A worker process holding its folder under the test's temporary folder, and that folder."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(private_tmp)},
    )
    try:
        assert process.stdout is not None
        yield process, Path(process.stdout.readline().strip())
    finally:
        process.kill()
        process.wait()


def test_a_killed_workers_folder_is_removed_by_the_next_worker_at_once(
    holder: tuple[subprocess.Popen[str], Path],
) -> None:
    process, folder = holder
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert folder.exists()  # SIGKILL: it could not clean up

    with scratch_folder("merge-") as mine:
        assert not folder.exists()  # written to a moment ago, yet removed: its lock is free
        assert Path(mine).exists()


def test_a_living_workers_folder_stays(holder: tuple[subprocess.Popen[str], Path]) -> None:
    _, folder = holder

    with scratch_folder("merge-"):
        assert (folder / "00003.mp4").read_bytes() == b"half a segment"


def test_a_folder_whose_lock_is_not_taken_yet_stays(private_tmp: Path) -> None:
    starting = private_tmp / PARENT_NAME / "span-starting"
    starting.mkdir(parents=True)
    (starting / LOCKING_NAME).touch()  # created, not yet locked and renamed: its worker is between two calls

    with scratch_folder("merge-"):
        assert starting.exists()
