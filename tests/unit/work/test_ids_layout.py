"""Content-addressed ids and the storage layout of the shared work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.options import Options
from facefusion_provider.work import ids
from facefusion_provider.work.access import load_work
from facefusion_provider.work.ids import analysis_id, run_key, work_id
from facefusion_provider.work.layout import (
    AnalysisLayout,
    SegmentEntry,
    WorkLayout,
    output_marker_uri,
    parse_claim_name,
    parse_segment_name,
    preview_uri_of,
    segment_claim_name,
    segment_file_name,
)
from facefusion_provider.work.records import WORK_FORMAT_VERSION


def test_work_id_depends_on_content_and_pixel_options_only() -> None:
    work = work_id("t", ["s"], Options())
    assert work == work_id("t", ["s"], Options(execution_thread_count=32, execution_providers=["cuda", "cpu"]))
    assert work != work_id("t", ["s"], Options(face_swapper_blend=50))
    assert work != work_id("t", ["s2"], Options())
    assert work != work_id("t2", ["s"], Options())
    assert work != work_id("t", ["s"], Options(segment_size=64))
    assert len(work) == 24


def test_a_work_of_an_older_format_gets_another_id_and_is_refused_by_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = work_id("t", ["s"], Options())
    monkeypatch.setattr(ids, "WORK_FORMAT_VERSION", WORK_FORMAT_VERSION - 1)
    assert work_id("t", ["s"], Options()) != current  # a new format never finds an old work under its id
    monkeypatch.undo()
    layout = WorkLayout((tmp_path / "work").as_uri())
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "work.json").write_text(json.dumps({"format_version": WORK_FORMAT_VERSION - 1}))
    with pytest.raises(InvalidWorkError, match=f"work format {WORK_FORMAT_VERSION - 1}, this worker reads format"):
        load_work(layout)


def test_analysis_id_ignores_the_source_and_the_swap_but_not_detection() -> None:
    base = analysis_id("t", Options(), "mesh")
    assert base != analysis_id("t", Options(), "none")  # the landmarks the processors read are stored with the faces
    assert base == analysis_id("t", Options(face_swapper_blend=10, output_video_quality=50), "mesh")
    assert base != analysis_id("t", Options(face_detector_score=0.7), "mesh")
    assert base != analysis_id("t", Options(face_selector_mode="many"), "mesh")
    assert base != analysis_id("t", Options(segment_size=32), "mesh")
    assert base != analysis_id("t2", Options(), "mesh")


@pytest.mark.parametrize(
    "selector",
    [
        {"face_selector_order": "left-right"},
        {"face_selector_gender": "female"},
        {"face_selector_race": "asian"},
        {"face_selector_age_start": 30},
        {"face_selector_age_end": 40},
        {"reference_face_position": 1},
    ],
)
def test_each_face_selector_option_names_another_analysis(selector: dict[str, Any]) -> None:
    assert analysis_id("t", Options(**selector), "mesh") != analysis_id("t", Options(), "mesh")


def test_run_keys_are_storage_safe_and_distinct() -> None:
    key = run_key("facefusion_swap", "manual__2026-12-03T08:15:20.123+00:00")
    assert key.startswith("facefusion_swap.manual__2026-12-03T08-15-20.123-00-00.")
    assert all(c.isalnum() or c in "._-" for c in key)
    assert key != run_key("facefusion_swap", "manual__2026-12-03T08:15:20.124+00:00")


def test_layout(tmp_path: Path) -> None:
    layout = WorkLayout.under(str(tmp_path / "root"), "abc")
    assert layout.work_uri == (tmp_path / "root" / "work" / "abc").as_uri()
    assert layout.work_id == "abc"
    assert layout.work_json.endswith("/work/abc/work.json")
    assert layout.segment_marker(7).endswith("/work/abc/segments/00007.json")
    assert layout.segment_file(segment_file_name(7, "w1")).endswith("/work/abc/segments/00007.w1.mp4")
    assert layout.claim(segment_claim_name(7), 2).endswith("/work/abc/claims/00007.0002.json")
    assert layout.run_lease("r").endswith("/work/abc/runs/r.json")
    analysis = AnalysisLayout.under(str(tmp_path / "root"), "xyz")
    assert analysis.segment_faces(3).endswith("/analysis/xyz/segments/00003.faces.npz")
    assert parse_segment_name("00007.json") == SegmentEntry(7, "marker")
    assert parse_segment_name("00007.2.json") == SegmentEntry(7, "marker", 2)  # incarnation 2: two commits retired
    assert parse_segment_name("00007.1.retired.json") == SegmentEntry(7, "retired", 1)
    assert parse_segment_name("00007.w1.mp4") == SegmentEntry(7, "video")
    assert parse_segment_name("preview-00000037.jpg") is None  # a preview frame, not a segment's file
    assert parse_segment_name(".tmp-00007.json") is None
    assert parse_segment_name("00007.w1.mp4.tmp-123") is None
    assert parse_claim_name("00007.0002.json") == ("00007", 2)
    assert parse_claim_name("merge-facefusion_swap.manual-1.abc.0001.json") == ("merge-facefusion_swap.manual-1.abc", 1)
    assert parse_claim_name(".probe-1") is None
    assert output_marker_uri("s3://out/videos/a.mp4") == "s3://out/videos/.a.mp4.facefusion.json"
    assert output_marker_uri("file:///x/a.mp4") == "file:///x/.a.mp4.facefusion.json"
    assert preview_uri_of("s3://out/videos/a.mp4") == "s3://out/videos/a.preview.jpg"
