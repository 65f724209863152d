"""A full disk where the worker writes (the output's folder, the work root, its scratch folder, a download's copy) is
its own failure: class ``storage_full``, exit code 19, retryable, and the message names the path that is full; nothing
partial is left at the output. Each on a real full filesystem (a small tmpfs, filled)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from synth import VideoSpec, write_video

from facefusion_provider import storage
from facefusion_provider.exceptions import EXIT_STORAGE_FULL, StorageFullError
from facefusion_provider.worker import cli


@pytest.fixture
def noisy_target(tmp_path: Path) -> Path:
    """A video whose segment and output (about 1.6 MB each) are larger than the full disk's whole size."""
    rng = np.random.default_rng(0)
    path = tmp_path / "noise.mp4"
    frames = (rng.integers(0, 255, (240, 320, 3), dtype=np.uint8) for _ in range(30))
    write_video(str(path), VideoSpec(width=320, height=240), frames)
    return path


def _run(
    target: Path, output: Path, work_root: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, object]]:
    argv = ["run", "--target", str(target), "--output", str(output), "--work-root", str(work_root), "--processors"]
    code = cli.main(argv)
    report = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    return code, report


def _says_full(report: dict[str, object], path: str) -> None:
    assert report["failure_class"] == "storage_full" and report["retryable"] is True
    message = str(report["message"])
    assert message.startswith(path) and "no space left on device; free space there" in message, message


@pytest.mark.parametrize("extension", [".mp4", ".mkv"])  # joined from the indexes, remuxed
def test_a_full_output_disk_names_the_output_and_leaves_nothing_there(
    extension: str, noisy_target: Path, full_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = full_disk / "out" / f"result{extension}"
    code, report = _run(noisy_target, output, tmp_path / "work", capsys)
    assert code == EXIT_STORAGE_FULL
    _says_full(report, output.as_uri())
    assert sorted(path.name for path in full_disk.rglob("*")) == ["filler", "out"]  # no partial output, no preview


def test_a_full_work_root_names_the_file_it_was_writing_there(
    noisy_target: Path, full_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _run(noisy_target, tmp_path / "out.mp4", full_disk / "work", capsys)
    assert code == EXIT_STORAGE_FULL
    _says_full(report, (full_disk / "work").as_uri() + "/")
    assert not (tmp_path / "out.mp4").exists()


def test_a_full_scratch_folder_names_it(
    noisy_target: Path,
    full_disk: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(full_disk))  # TMPDIR
    code, report = _run(noisy_target, tmp_path / "out.mp4", tmp_path / "work", capsys)
    assert code == EXIT_STORAGE_FULL
    _says_full(report, str(full_disk / "facefusion-worker") + "/")
    assert "(this worker's scratch folder, under TMPDIR)" in str(report["message"])


def test_a_download_onto_a_full_disk_names_the_copy_and_what_it_copies(full_disk: Path, tmp_path: Path) -> None:
    source = tmp_path / "face.png"
    source.write_bytes(bytes(64 * 1024))
    copy = full_disk / "face.png"
    with pytest.raises(StorageFullError) as raised:
        storage.get_file(source.as_uri(), copy)
    assert str(raised.value).startswith(f"{copy} (downloading {source.as_uri()}): no space left on device")
    with pytest.raises(StorageFullError, match=r"face\.png \(downloading file://"):
        storage.get_file_sha256(source.as_uri(), copy)
    assert not copy.exists()
