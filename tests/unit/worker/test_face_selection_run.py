"""The face selector's filters through ``facefusion-worker`` on a clip with two people (the offline classic swapper,
a stand-in face classifier that takes the grey person at the right for a man, the astronaut at the left for a woman):
only the chosen person is swapped; a second source over the same clip reads the stored analysis and classifies no
face; a span started mid-video gives the frames of a run from frame 0. fran (the age modifier) reads each face's age
from the same classifier: classified once, stored with the analysis, read by the next run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from committed import work_uri_for
from pair import pair_clip
from people import person_file
from readback import frame_digests, rgb_frames
from standins_ageswap import fran_standin
from standins_selection import classifier_standin

from facefusion_provider.worker import cli

FRAMES, SEGMENT = 16, 8
SHORT_SEGMENT = 4  # shorter than the tracker's pre-roll (8 frames): a segment's pre-roll reaches into the one before
MEN: dict[str, Any] = {
    "segment_size": SEGMENT,
    "face_selector_mode": "many",
    "face_selector_gender": "male",
    "output_video_quality": 95,
}
# The tracker seeds each segment from the frames before it: a span started mid-video must choose as a whole run does.
TRACKED_MAN: dict[str, Any] = {
    **MEN,
    "segment_size": SHORT_SEGMENT,
    "face_selector_mode": "one",
    "face_selector_order": "left-right",
    "face_tracker_score": 0.3,
}
LEFT_FACE = (slice(100, 190), slice(120, 185))  # the astronaut's face in every frame (it drifts 12 pixels at most)
RIGHT_FACE = (slice(60, 180), slice(450, 540))  # the grey person's
UNCHANGED, SWAPPED = 1.5, 5.0  # mean absolute change in a face: the encoder's noise alone, a swapped face


@dataclass(frozen=True)
class Clip:
    target: str
    sources: dict[str, str]
    models: str
    frames: list[np.ndarray]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Clip:
    folder = tmp_path_factory.mktemp("pair")
    target = str(pair_clip(folder / "pair.mp4", FRAMES))
    sources = {name: str(person_file(folder / f"{name}.png", name)) for name in ("astronaut", "grace")}
    classifier_standin(folder / "models")
    fran_standin(folder / "models")
    return Clip(target, sources, str(folder / "models"), rgb_frames(target))


def _flags(options: dict[str, Any]) -> list[str]:
    flags = []
    for name, value in options.items():
        flags += [
            f"--{name.replace('_', '-')}",
            *(str(item) for item in (value if isinstance(value, list) else [value])),
        ]
    return flags


def _worker(capsys: pytest.CaptureFixture[str], clip: Clip, *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main([*argv, "--models-dir", clip.models]) == 0, capsys.readouterr().err
    return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))


def _in_parts(
    capsys: pytest.CaptureFixture[str], clip: Clip, root: Path, source: str, output: Path, segments: str, **options: Any
) -> dict[str, Any]:
    """prepare, one swap-span over ``segments`` (then the rest, helping), merge: the result of the swap-span."""
    work = work_uri_for(str(root), [source], clip.target, **options)
    at = ["--work-uri", work, "--target", clip.target]
    _worker(capsys, clip, "prepare", *at, "--source", source, *_flags(options))
    first = int(segments.partition(":")[0])
    span = _worker(capsys, clip, "swap-span", *at, "--segments", segments, "--span", str(first))
    _worker(capsys, clip, "merge", *at, "--output", str(output))
    return span


def _change(output: Path, clip: Clip, region: tuple[slice, slice]) -> list[float]:
    """Per frame, the mean absolute difference between the output and the target inside ``region``."""
    return [
        float(np.abs(out[region].astype(np.int16) - target[region].astype(np.int16)).mean())
        for out, target in zip(rgb_frames(str(output)), clip.frames, strict=True)
    ]


def test_a_second_source_reads_the_stored_analysis_and_classifies_no_face(
    clip: Clip, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, whole = tmp_path / "work", f"0:{FRAMES // SEGMENT}"
    first = _in_parts(capsys, clip, root, clip.sources["astronaut"], tmp_path / "a.mp4", whole, **MEN)
    assert first["analysed_frames"] == FRAMES and first["classified_faces"] >= 2 * (FRAMES // SEGMENT)
    second = _in_parts(capsys, clip, root, clip.sources["grace"], tmp_path / "g.mp4", whole, **MEN)
    assert (second["analysed_frames"], second["analysis_reused_frames"]) == (0, FRAMES)
    assert second["classified_faces"] == 0
    for output in (tmp_path / "a.mp4", tmp_path / "g.mp4"):
        assert max(_change(output, clip, LEFT_FACE)) < UNCHANGED, "the woman at the left is left as she was"
        assert min(_change(output, clip, RIGHT_FACE)) > SWAPPED, "the man at the right is swapped in every frame"
    assert [d.md5 for d in frame_digests(str(tmp_path / "a.mp4"))] != [
        d.md5 for d in frame_digests(str(tmp_path / "g.mp4"))
    ]


def test_a_changed_filter_reads_another_analysis(
    clip: Clip, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, whole, source = tmp_path / "work", f"0:{FRAMES // SEGMENT}", clip.sources["grace"]  # not the astronaut
    _in_parts(capsys, clip, root, source, tmp_path / "men.mp4", whole, **MEN)
    women = _in_parts(
        capsys, clip, root, source, tmp_path / "women.mp4", whole, **{**MEN, "face_selector_gender": "female"}
    )
    assert women["analysed_frames"] == FRAMES and women["classified_faces"] > 0
    assert len(list((root / "analysis").iterdir())) == 2
    assert min(_change(tmp_path / "women.mp4", clip, LEFT_FACE)) > SWAPPED
    assert max(_change(tmp_path / "women.mp4", clip, RIGHT_FACE)) < UNCHANGED


def test_a_span_started_mid_video_chooses_the_faces_a_run_from_frame_0_chooses(
    clip: Clip, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, whole = clip.sources["astronaut"], tmp_path / "whole.mp4"
    ran = _worker(
        capsys,
        clip,
        "run",
        *("--source", source, "--target", clip.target, "--output", str(whole)),
        *("--work-root", str(tmp_path / "run"), *_flags(TRACKED_MAN)),
    )
    assert ran["frame_count"] == FRAMES
    middle = tmp_path / "middle.mp4"
    segments = FRAMES // SHORT_SEGMENT
    span = _in_parts(capsys, clip, tmp_path / "parts", source, middle, f"1:{segments}", **TRACKED_MAN)
    assert (span["committed"], span["helped_in_run"]) == (segments, 1)  # segments 1 to 3 after a seek, then 0
    assert [d.md5 for d in frame_digests(str(middle))] == [d.md5 for d in frame_digests(str(whole))]
    assert min(_change(whole, clip, RIGHT_FACE)) > SWAPPED, "one mode, left to right, men only: the man at the right"
    assert max(_change(whole, clip, LEFT_FACE)) < UNCHANGED


def test_fran_classifies_each_face_once_and_a_second_source_reads_the_ages_stored(
    clip: Clip, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No filter: the classifier runs for fran alone, on the faces selected, once each; the next run reads them."""
    aged = {"segment_size": SEGMENT, "face_selector_mode": "many", "processors": ["age_modifier"]}
    aged |= {"age_modifier_direction": 20, "output_video_quality": 95}
    root, whole = tmp_path / "work", f"0:{FRAMES // SEGMENT}"
    first = _in_parts(capsys, clip, root, clip.sources["astronaut"], tmp_path / "a.mp4", whole, **aged)
    assert (first["analysed_frames"], first["classified_faces"]) == (FRAMES, 2 * FRAMES)
    second = _in_parts(capsys, clip, root, clip.sources["grace"], tmp_path / "g.mp4", whole, **aged)
    assert (second["analysed_frames"], second["analysis_reused_frames"]) == (0, FRAMES)
    assert second["classified_faces"] == 0
    for output in (tmp_path / "a.mp4", tmp_path / "g.mp4"):
        assert min(_change(output, clip, LEFT_FACE)) > SWAPPED and min(_change(output, clip, RIGHT_FACE)) > SWAPPED
