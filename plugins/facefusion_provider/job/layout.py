"""Where each file lives (DESIGN.md, "The storage layout"): the shared work folder, the target analysis, and the
files beside a run's output."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from urllib.parse import urlparse

from facefusion_provider import storage

WORK_FOLDER = "work"
ANALYSIS_FOLDER = "analysis"


@dataclass(frozen=True)
class WorkLayout:
    """``{work_root}/work/{work_id}/``: job.json, segments and their markers, claims, run leases, merge claims."""

    work_uri: str

    @classmethod
    def under(cls, work_root: str, work_id: str) -> WorkLayout:
        return cls(storage.join(storage.normalize_uri(work_root, field="work_root"), WORK_FOLDER, work_id))

    @property
    def work_id(self) -> str:
        return posixpath.basename(urlparse(self.work_uri).path.rstrip("/"))

    @property
    def job_json(self) -> str:
        return storage.join(self.work_uri, "job.json")

    @property
    def segments_dir(self) -> str:
        return storage.join(self.work_uri, "segments")

    def segment_marker(self, index: int) -> str:
        return storage.join(self.segments_dir, f"{index:05d}.json")

    def segment_file(self, name: str) -> str:
        return storage.join(self.segments_dir, name)

    def frame_preview(self, number: int) -> str:
        """A preview frame, original above output, stored by its segment: the merge lays these side by side."""
        return storage.join(self.segments_dir, f"preview-{number:08d}.jpg")

    @property
    def claims_dir(self) -> str:
        return storage.join(self.work_uri, "claims")

    def claim(self, index: int, generation: int) -> str:
        return storage.join(self.claims_dir, f"{index:05d}.{generation:04d}.json")

    @property
    def runs_dir(self) -> str:
        return storage.join(self.work_uri, "runs")

    def run_lease(self, run_key: str) -> str:
        return storage.join(self.runs_dir, f"{run_key}.json")

    @property
    def sound_file(self) -> str:
        """The target's sound as the merge lays it out, stored by a standing worker while the frames are worked."""
        return storage.join(self.work_uri, "sound.bin")

    @property
    def prepare_claim(self) -> str:
        """Created exclusively by the standing worker that prepares this work (its runs' prepare tasks reuse it)."""
        return storage.join(self.work_uri, "preparing.json")

    def merge_claim(self, run_key: str) -> str:
        """Created exclusively by the standing worker that merges this run's output (its merge task then finds it)."""
        return storage.join(self.work_uri, "merges", f"{run_key}.json")

    @property
    def deleting(self) -> str:
        return storage.join(self.work_uri, "deleting.json")


def segment_file_name(index: int, writer: str) -> str:
    """Each writer commits under its own name; the marker says whose file won."""
    return f"{index:05d}.{writer}.mp4"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``(index, kind)`` of a segment's file in ``segments/``: kind ``marker`` or ``video``; None for others."""
    stem, _, extension = name.partition(".")
    if not stem.isdigit():
        return None
    kind = "marker" if extension == "json" else "video" if extension.endswith(".mp4") else ""
    return (int(stem), kind) if kind else None


def parse_claim_name(name: str) -> tuple[int, int] | None:
    """``(index, generation)`` of ``claims/NNNNN.GGGG.json``; None for other names."""
    parts = name.split(".")
    if len(parts) != 3 or parts[2] != "json" or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class AnalysisLayout:
    """``{work_root}/analysis/{analysis_id}/``: the target's faces per segment, shared by every source face."""

    analysis_uri: str

    @classmethod
    def under(cls, work_root: str, analysis_id: str) -> AnalysisLayout:
        return cls(storage.join(storage.normalize_uri(work_root, field="work_root"), ANALYSIS_FOLDER, analysis_id))

    def segment_faces(self, index: int) -> str:
        return storage.join(self.analysis_uri, "segments", f"{index:05d}.faces.npz")


def work_root_of(layout: WorkLayout) -> str:
    """The work root a work folder lies under (``{work_root}/work/{work_id}``)."""
    return layout.work_uri.rsplit("/", 2)[0]


def output_marker_uri(output_uri: str) -> str:
    """The output's own marker sits beside it: it says which work made the file, so a repeat run can stop early."""
    parsed = urlparse(output_uri)
    directory, name = posixpath.split(parsed.path)
    return output_uri[: len(output_uri) - len(parsed.path)] + posixpath.join(directory, f".{name}.facefusion.json")


def preview_uri_of(output_uri: str) -> str:
    """``<output without extension>.preview.jpg``."""
    path = urlparse(output_uri).path
    return output_uri[: len(output_uri) - len(path)] + posixpath.splitext(path)[0] + ".preview.jpg"
