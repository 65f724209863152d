"""The target's analysis, computed once and read by every run over that target: per segment, the faces of each frame
(detected, selected, with their dense landmarks), stored under ``{work_root}/analysis/{analysis_id}/``.

A run for a new source face over a standard video then does only the swap, the paste-back and the encoding. The
analysis id names the target and every option that changes which faces are found and where, so a changed detector
option reads another analysis; stored faces round-trip exactly, so the output is the same frame for frame.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from facefusion_provider import storage
from facefusion_provider.job.layout import AnalysisLayout
from facefusion_provider.job.records import JobSpec
from facefusion_provider.worker.metrics import WorkerMetrics

if TYPE_CHECKING:
    from facefusion_provider.engine.face import Face, Frame
    from facefusion_provider.engine.processors import FaceProcessor

logger = logging.getLogger(__name__)


@dataclass
class AnalysisCounts:
    analysed_frames: int = 0  # frames whose faces this worker detected
    reused_frames: int = 0  # frames whose faces came from the stored analysis
    segments_written: int = 0


@dataclass
class AnalysedProcessor:
    """The pipeline's frame processor: faces from the stored analysis where there is one, else analysed here (and
    stored once a whole segment's frames are), then the engine's processors applied to them."""

    engine: FaceProcessor
    spec: JobSpec
    layout: AnalysisLayout | None
    metrics: WorkerMetrics
    counts: AnalysisCounts = field(default_factory=AnalysisCounts)

    def __post_init__(self) -> None:
        self.batch_size = self.engine.batch_size
        self._numbers = {pts: number for number, pts in enumerate(self.spec.probe.pts)}
        self._starts = [segment.start for segment in self.spec.segments]
        self._stored: dict[int, list[list[Face]] | None] = {}  # segment -> its frames' faces, None: not stored
        self._pending: dict[int, dict[int, list[Face]]] = {}  # segment -> frame number -> faces found here
        self._seconds = dict(self.engine.stats.seconds)
        self._faces = (self.engine.stats.detected, self.engine.stats.swapped)
        self.swapped_so_far = (0, 0)  # (frames, faces swapped) after the last whole batch: one value, read by progress

    def process_batch(self, frames: list[Frame], pts: list[int]) -> list[Frame]:
        numbers = [self._numbers[p] for p in pts]
        faces = [self._stored_faces(number) for number in numbers]
        missing = [i for i, found in enumerate(faces) if found is None]
        if missing:
            analysed = self.engine.analyse_batch([frames[i] for i in missing])
            for i, found in zip(missing, analysed, strict=True):
                faces[i] = found
                self._keep(numbers[i], found)
        self.counts.analysed_frames += len(missing)
        self.counts.reused_frames += len(frames) - len(missing)
        results = self.engine.apply_batch(frames, [found or [] for found in faces])
        self._report(len(frames))
        return results

    def _segment(self, number: int) -> int:
        return bisect.bisect_right(self._starts, number) - 1

    def _stored_faces(self, number: int) -> list[Face] | None:
        index = self._segment(number)
        if index not in self._stored:
            self._stored[index] = self._load(index)
        stored = self._stored[index]
        return None if stored is None else stored[number - self.spec.segments[index].start]

    def _load(self, index: int) -> list[list[Face]] | None:
        if self.layout is None:
            return None
        from facefusion_provider.engine.face import unpack_faces

        uri = self.layout.segment_faces(index)
        if not storage.exists(uri):
            return None
        stored = unpack_faces(storage.read_bytes(uri))
        if len(stored) != self.spec.segments[index].frame_count:
            logger.warning(
                "%s holds %d frames, not %d: analysing again", uri, len(stored), self.spec.segments[index].frame_count
            )
            return None
        return stored

    def _keep(self, number: int, faces: list[Face]) -> None:
        """Keep what was found; once a whole segment's frames are here, store its analysis for every later run."""
        index = self._segment(number)
        found = self._pending.setdefault(index, {})
        found[number] = faces
        segment = self.spec.segments[index]
        if self.layout is None or len(found) < segment.frame_count:
            return
        from facefusion_provider.engine.face import pack_faces

        frames = [found[n] for n in range(segment.start, segment.end)]
        if storage.write_bytes_exclusive(self.layout.segment_faces(index), pack_faces(frames)):
            self.counts.segments_written += 1
        del self._pending[index]

    def _report(self, frames: int) -> None:
        """Hand what the engine did since the last batch to the metrics."""
        stats = self.engine.stats
        with stats.lock:
            seconds, detected, swapped = dict(stats.seconds), stats.detected, stats.swapped
        for stage, total in seconds.items():
            if total > self._seconds.get(stage, 0.0):
                self.metrics.stage_seconds(stage, total - self._seconds.get(stage, 0.0))  # type: ignore[arg-type]
        self.metrics.faces("detected", detected - self._faces[0])
        self.metrics.faces("swapped", swapped - self._faces[1])
        self.metrics.frames("swap", frames)
        done, faces = self.swapped_so_far
        self.swapped_so_far = (done + frames, faces + swapped - self._faces[1])
        self._seconds, self._faces = seconds, (detected, swapped)
