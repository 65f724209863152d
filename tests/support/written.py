"""Work folders written the way the worker writes them (work.json, segment files and markers, an output and its
marker), for operator tests without a worker or Airflow's database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from facefusion_provider import storage
from facefusion_provider.options import Options
from facefusion_provider.types import VideoProbe
from facefusion_provider.work.layout import WorkLayout, output_marker_uri, segment_file_name
from facefusion_provider.work.records import OutputMarker, SegmentMarker, WorkSpec
from facefusion_provider.work.span_plan import plan_segments


@dataclass(frozen=True)
class Written:
    """A work written as ``prepare`` leaves it, and this run's output."""

    spec: WorkSpec
    layout: WorkLayout
    output_uri: str

    @property
    def work_uri(self) -> str:
        return self.layout.work_uri


def write_work(
    work_root: Path, output: Path, *, frames: int = 40, segment_size: int = 8, work_id: str = "work0"
) -> Written:
    """A committed ``work.json`` for a ``frames``-frame target, as ``prepare`` leaves it."""
    layout = WorkLayout.under(work_root.as_uri(), work_id)
    probe = VideoProbe(
        container="mp4",
        codec="h264",
        width=64,
        height=48,
        pix_fmt="yuv420p",
        frame_rate="25/1",
        time_base="1/12800",
        frame_count=frames,
        pts=[i * 512 for i in range(frames)],
        duration_seconds=frames / 25,
    )
    work = WorkSpec(
        work_id=work_id,
        target_content_id="sha256:t",
        source_content_ids=["sha256:s"],
        source_names=["face.png"],
        options=Options(segment_size=segment_size, processors=[]),
        probe=probe,
        frame_start=0,
        frame_end=frames,
        segments=plan_segments(0, frames, segment_size),
    )
    storage.write_bytes_atomic(layout.work_json, work.model_dump_json().encode())
    return Written(work, layout, output.as_uri())


def commit_segment(work: Written, index: int) -> Path:
    """Commit segment ``index`` the way ``swap-span`` does: the file, then its marker."""
    segment = work.spec.segments[index]
    name = segment_file_name(index, "w")
    storage.write_bytes_atomic(work.layout.segment_file(name), b"segment")
    marker = SegmentMarker(
        work_id=work.spec.work_id,
        index=index,
        start=segment.start,
        end=segment.end,
        frame_count=segment.frame_count,
        file=name,
        sha256="0" * 64,
        size=7,
        writer="w",
    )
    storage.write_bytes_atomic(work.layout.segment_marker(index), marker.model_dump_json().encode())
    return Path(storage.local_path(work.layout.segment_marker(index)) or "")


def commit_output(work: Written, *, work_id: str | None = None, timings: dict[str, float] | None = None) -> None:
    """Write the output and its marker the way ``merge`` does (optionally naming another work)."""
    storage.write_bytes_atomic(work.output_uri, b"video")
    marker = OutputMarker(
        work_id=work_id or work.spec.work_id,
        output_uri=work.output_uri,
        frame_count=work.spec.probe.frame_count,
        sha256="1" * 64,
        size=5,
        timings=timings or {},
    )
    storage.write_bytes_atomic(output_marker_uri(work.output_uri), marker.model_dump_json().encode())
