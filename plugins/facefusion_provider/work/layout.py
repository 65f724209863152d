"""Where each file lives (DESIGN.md, "The storage layout"): the shared work folder, the target analysis, and the
files beside a run's output, whose marker is the proof that the run is finished whatever happened to the work."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.work.records import OutputMarker

WORK_FOLDER = "work"
WORKERS_FOLDER = "workers"
ANALYSIS_FOLDER = "analysis"


@dataclass(frozen=True)
class WorkLayout:
    """``{work_root}/work/{work_id}/``: work.json, segments and their markers, claims, run leases, merge claims."""

    work_uri: str

    @classmethod
    def under(cls, work_root: str, work_id: str) -> WorkLayout:
        return cls(storage.join(storage.normalize_uri(work_root, field="work_root"), WORK_FOLDER, work_id))

    @property
    def work_id(self) -> str:
        return posixpath.basename(urlparse(self.work_uri).path.rstrip("/"))

    @property
    def work_json(self) -> str:
        return storage.join(self.work_uri, "work.json")

    @property
    def segments_dir(self) -> str:
        return storage.join(self.work_uri, "segments")

    def segment_marker(self, index: int, incarnation: int = 0) -> str:
        """Segment ``index``'s commit marker in ``incarnation`` (one more for each damaged commit retired before it)."""
        return storage.join(
            self.segments_dir, f"{index:05d}.json" if not incarnation else f"{index:05d}.{incarnation}.json"
        )

    def retired_marker(self, index: int, incarnation: int) -> str:
        """The record that retires incarnation ``incarnation`` of segment ``index``'s commit (its file failed its
        check): created exclusively, it makes the segment free again as incarnation ``incarnation + 1``."""
        return storage.join(self.segments_dir, f"{index:05d}.{incarnation}.retired.json")

    def segment_file(self, name: str) -> str:
        return storage.join(self.segments_dir, name)

    def frame_preview(self, number: int) -> str:
        """A preview frame, original above output, stored by its segment: the merge lays these side by side."""
        return storage.join(self.segments_dir, f"preview-{number:08d}.jpg")

    @property
    def claims_dir(self) -> str:
        return storage.join(self.work_uri, "claims")

    def claim(self, name: str, generation: int) -> str:
        """Generation ``generation`` of the claim on ``name`` (``segment_claim_name``, ``PREPARE_CLAIM``, ``merge_claim_name``)."""
        return storage.join(self.claims_dir, f"{name}.{generation:04d}.json")

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
    def voice_file(self) -> str:
        """The voice's mel spectrogram (lip sync), computed once by prepare from the run's audio source."""
        return storage.join(self.work_uri, "voice_mel.npy")

    def encoded_sound(self, extension: str) -> str:
        """The output's sound encoded once by prepare (the voice of lip sync, or the target's with another encoder or
        volume): ``sound.m4a`` or ``sound.mka``."""
        return storage.join(self.work_uri, f"sound{extension}")

    @property
    def refusals_dir(self) -> str:
        return storage.join(self.work_uri, "refusals")

    def refusal(self, worker: str) -> str:
        """Why standing worker ``worker`` gave up on the work (``leases.record_refusal``)."""
        return storage.join(self.refusals_dir, f"{worker}.json")

    @property
    def deleting(self) -> str:
        """A sweep in progress (``Sweep``): created exclusively by the cleanup that removes the work."""
        return storage.join(self.work_uri, "deleting.json")


PREPARE_CLAIM = "prepare"  # the claim of the worker that prepares a work before its run's prepare task


def segment_claim_name(index: int) -> str:
    return f"{index:05d}"


def merge_claim_name(run_key: str) -> str:
    """The claim of the worker that merges this run's output as the work's last segment is committed."""
    return f"merge-{run_key}"


@dataclass(frozen=True)
class RootLayout:
    """``{work_root}/``: the works, the target analyses, standing workers' leases and the change signal."""

    root_uri: str

    @classmethod
    def of(cls, work_root: str) -> RootLayout:
        return cls(storage.normalize_uri(work_root, field="work_root"))

    @property
    def works_dir(self) -> str:
        return storage.join(self.root_uri, WORK_FOLDER)

    @property
    def workers_dir(self) -> str:
        return storage.join(self.root_uri, WORKERS_FOLDER)

    def worker(self, name: str) -> str:
        """A standing worker's lease."""
        return storage.join(self.workers_dir, f"{name}.json")

    def clock_probe(self, name: str) -> str:
        """A process's probe of the store's clock (``liveness.measure_offset``): written, read back, deleted."""
        return storage.join(self.root_uri, "clocks", f"{name}.json")

    @property
    def signal(self) -> str:
        """Rewritten whenever work may have appeared: idle standing workers read it instead of listing."""
        return storage.join(self.root_uri, "signal.json")


SEGMENT_FILE_EXTENSIONS = (".mp4", ".png")  # a video work's segments; an image work's one segment


def segment_file_name(index: int, writer: str, extension: str = ".mp4") -> str:
    """Each writer commits under its own name; the marker says whose file won."""
    return f"{index:05d}.{writer}{extension}"


@dataclass(frozen=True)
class SegmentEntry:
    """A file in ``segments/``: a segment's ``marker`` or ``retired`` record of an incarnation, or its ``video``."""

    index: int
    kind: Literal["marker", "retired", "video"]
    incarnation: int = 0


def parse_segment_name(name: str) -> SegmentEntry | None:
    """What a file in ``segments/`` is (``WorkLayout.segment_marker``, ``retired_marker``, ``segment_file_name``);
    None for others (previews, temporary files)."""
    stem, _, extension = name.partition(".")
    if not stem.isdigit():
        return None
    if extension.endswith(SEGMENT_FILE_EXTENSIONS):
        return SegmentEntry(int(stem), "video")
    parts = extension.split(".")
    if parts == ["json"]:
        return SegmentEntry(int(stem), "marker")
    if len(parts) in (2, 3) and parts[0].isdigit() and parts[1:] in (["json"], ["retired", "json"]):
        return SegmentEntry(int(stem), "marker" if len(parts) == 2 else "retired", int(parts[0]))
    return None


@dataclass(frozen=True)
class SegmentIncarnations:
    """What one listing of ``segments/`` says of the commits: each segment's current incarnation (one past its last
    retired one), the committed segments' current markers, and when each retired segment was last retired (the
    store's clock)."""

    current: dict[int, int]  # segments with a retired commit -> their current incarnation (the rest: 0)
    markers: dict[int, str]  # committed segments -> their current marker's name
    retired_at: dict[int, float]  # segments with a retired commit -> the latest retirement's modification time

    @classmethod
    def of(cls, entries: Iterable[tuple[str, float]]) -> SegmentIncarnations:
        """From ``(name, modified)`` pairs of a listing of ``segments/``."""
        markers: dict[tuple[int, int], str] = {}
        current: dict[int, int] = {}
        retired_at: dict[int, float] = {}
        for name, modified in entries:
            entry = parse_segment_name(name)
            if entry is None or entry.kind == "video":
                continue
            if entry.kind == "marker":
                markers[(entry.index, entry.incarnation)] = name
            elif entry.incarnation + 1 > current.get(entry.index, 0):
                current[entry.index] = entry.incarnation + 1
                retired_at[entry.index] = modified
        live = {index: name for (index, incarnation), name in markers.items() if current.get(index, 0) == incarnation}
        return cls(current, live, retired_at)


def parse_claim_name(name: str) -> tuple[str, int] | None:
    """``(name, generation)`` of ``claims/NAME.GGGG.json``; None for other names."""
    parts = name.rsplit(".", 2)  # a merge claim's name holds its run key, dots and all
    if len(parts) != 3 or parts[2] != "json" or not parts[0] or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


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


def root_of(layout: WorkLayout) -> RootLayout:
    return RootLayout(work_root_of(layout))


def output_marker_uri(output_uri: str) -> str:
    """The output's own marker sits beside it: it says which work made the file, so a repeat run can stop early."""
    parsed = urlparse(output_uri)
    directory, name = posixpath.split(parsed.path)
    return output_uri[: len(output_uri) - len(parsed.path)] + posixpath.join(directory, f".{name}.facefusion.json")


def read_output_marker(output_uri: str) -> OutputMarker | None:
    """The marker beside the output: which work (and run) wrote what is there now; None when missing or unreadable."""
    marker_uri = output_marker_uri(output_uri)
    if not storage.exists(marker_uri):
        return None
    try:
        return OutputMarker.model_validate_json(storage.read_bytes(marker_uri))
    except ValueError:
        return None


def output_done(work_id: str, output_uri: str) -> OutputMarker | None:
    """The output's marker when it names ``work_id`` and the output file exists (an unreadable marker: None)."""
    marker = read_output_marker(output_uri)
    if marker is None or marker.work_id != work_id or not storage.exists(output_uri):
        return None
    return marker


def preview_uri_of(output_uri: str) -> str:
    """``<output without extension>.preview.jpg``."""
    path = urlparse(output_uri).path
    return output_uri[: len(output_uri) - len(path)] + posixpath.splitext(path)[0] + ".preview.jpg"
