"""The target's analysis, computed once and read by every run over that target: per segment, the faces of each frame
(detected, selected, with their dense landmarks), stored under ``{work_root}/analysis/{analysis_id}/``.

A run for a new source face over a standard video then does only the swap, the paste-back and the encoding. The
analysis id names the target and every option that changes which faces are found and where, so a changed detector
option reads another analysis; stored faces round-trip exactly, so the output is the same frame for frame.

With the face tracker on, each segment's tracker starts afresh from the detections of the ``PRE_ROLL_FRAMES`` frames
before it (the frames just worked, or the pre-roll the decoder read before a seek), so a segment's faces are the same
whichever span works it and wherever that span began.
"""

from __future__ import annotations

import bisect
import logging
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from facefusion_provider import storage
from facefusion_provider.telemetry.metrics import WorkerMetrics
from facefusion_provider.work.layout import AnalysisLayout
from facefusion_provider.work.records import WorkSpec

if TYPE_CHECKING:
    from facefusion_provider.engine.face import Face, Frame
    from facefusion_provider.engine.paste import PendingFrame
    from facefusion_provider.engine.processors.chain import Followed, FrameProcessor
    from facefusion_provider.engine.track import TrackerSettings, TrackerState

logger = logging.getLogger(__name__)


@dataclass
class AnalysisCounts:
    analysed_frames: int = 0  # frames whose faces this worker detected
    classified_faces: int = 0  # faces it ran the face classifier on (a gender, race or age filter set)
    reused_frames: int = 0  # frames whose faces came from the stored analysis
    segments_written: int = 0


@dataclass
class AnalysedProcessor:
    """The pipeline's frame processor: faces from the stored analysis where there is one, else analysed here (and
    stored once a whole segment's frames are), then the engine's processors applied to them."""

    engine: FrameProcessor
    spec: WorkSpec
    layout: AnalysisLayout | None
    metrics: WorkerMetrics
    counts: AnalysisCounts = field(default_factory=AnalysisCounts)
    # With the face tracker: the decoded frames before a segment reached by a seek (SegmentFrames.take_preroll).
    preroll_source: Callable[[int], list[Any]] | None = None

    def __post_init__(self) -> None:
        self.batch_size = self.engine.batch_size
        self._numbers = {pts: number for number, pts in enumerate(self.spec.probe.pts)}
        self._starts = [segment.start for segment in self.spec.segments]
        self._stored: dict[int, list[list[Face]] | None] = {}  # segment -> its frames' faces, None: not stored
        self._pending: dict[int, dict[int, list[Face]]] = {}  # segment -> frame number -> faces found here
        self._seconds = dict(self.engine.stats.seconds)
        self._faces = (self.engine.stats.detected, self.engine.stats.swapped)
        self._classified = self.engine.stats.classified
        self.swapped_so_far = (0, 0)  # (frames, faces swapped) after the last whole batch: one value, read by progress
        self._tracker: TrackerState | None = None
        self._tracked_last: int | None = None  # the last frame number the tracker saw
        self._recent: dict[int, Frame] = {}  # the last frames handed in, by number: the next segment's pre-roll
        self._recent_faces: dict[int, list[Face]] = {}  # the detections of those the tracker saw
        self._followed: Followed | None = None  # what the next frame's faces follow on from
        self._followed_last: int | None = None  # the frame number that left it

    def process_batch(self, frames: list[Frame], pts: list[int]) -> list[Frame | PendingFrame]:
        numbers = [self._numbers[p] for p in pts]
        faces = [self._stored_faces(number) for number in numbers]
        missing = [i for i, found in enumerate(faces) if found is None]
        tracking = self.engine.tracks_faces
        if missing:
            chosen, picked = [numbers[i] for i in missing], [frames[i] for i in missing]
            if tracking:
                analysed = self.engine.analyse_batch(picked, track=self._tracking(chosen))
            elif self.engine.follows_faces:
                analysed = self._following(picked, chosen)
            else:
                analysed = self.engine.analyse_batch(picked)
            for i, found in zip(missing, analysed, strict=True):
                faces[i] = found
                self._keep(numbers[i], found)
        self.counts.analysed_frames += len(missing)
        self.counts.reused_frames += len(frames) - len(missing)
        if tracking:
            self._remember(frames, numbers)
        results = self.engine.apply_batch_pending(frames, [found or [] for found in faces], times=self._times(numbers))
        self._report(len(frames))
        return results

    def _times(self, numbers: list[int]) -> list[Fraction]:
        """Each frame's own time from the first frame worked (the trim start), exact: what the voice window reads, the
        same whichever span works the frame and on a variable frame rate too."""
        pts, first = self.spec.probe.pts, self.spec.probe.pts[self.spec.frame_start]
        time_base = Fraction(self.spec.probe.time_base)
        return [(pts[number] - first) * time_base for number in numbers]

    def _following(self, frames: list[Frame], numbers: list[int]) -> list[list[Face]]:
        """Faces of frames ``numbers`` (consecutive, in order) followed by their meshes between detections: a
        segment's first frame, or a frame after a gap, is detected afresh, so a segment's faces are the same whichever
        span works it and wherever that span began."""
        analysed = []
        for frame, number in zip(frames, numbers, strict=True):
            if number == self.spec.segments[self._segment(number)].start or self._followed_last != number - 1:
                self._followed = None
            (faces,), self._followed = self.engine.analyse_followed([frame], self._followed)
            self._followed_last = number
            analysed.append(faces)
        return analysed

    @property
    def preroll(self) -> int:
        """Frames to decode before a segment reached by a seek: the face tracker's seed (none with it off)."""
        from facefusion_provider.engine.track import PRE_ROLL_FRAMES

        return PRE_ROLL_FRAMES if self.engine.tracks_faces else 0

    def _tracking(self, numbers: list[int]) -> Callable[[list[list[Face]]], list[list[Face]]]:
        """The face tracker over the detections of frames ``numbers`` (consecutive, in order): a segment's first frame,
        or a frame after a gap, starts it afresh from the pre-roll's detections."""
        from facefusion_provider.engine.track import step

        def track(detections: list[list[Face]]) -> list[list[Face]]:
            selected = []
            for number, found in zip(numbers, detections, strict=True):
                starts = number == self.spec.segments[self._segment(number)].start
                if self._tracker is None or starts or self._tracked_last != number - 1:
                    self._tracker = self._seeded(number)
                self._tracker, faces = step(self._tracker, found, self._settings())
                self._recent_faces[number] = found
                self._tracked_last = number
                selected.append(faces)
            return selected

        return track

    def _settings(self) -> TrackerSettings:
        from facefusion_provider.engine.face_filter import FaceSelection
        from facefusion_provider.engine.track import TrackerSettings

        options = self.spec.options
        return TrackerSettings(
            options.face_tracker_score,
            options.face_selector_mode,
            self.engine.reference_embedding,
            options.reference_face_distance,
            FaceSelection.of(options),
        )

    def _seeded(self, start: int) -> TrackerState:
        """The tracker after the ``PRE_ROLL_FRAMES`` frames before ``start``: their detections kept from when they
        were worked, else detected now in the frames kept or in the pre-roll the decoder read before its seek."""
        from facefusion_provider.engine.track import PRE_ROLL_FRAMES, seeded

        wanted = range(max(0, start - PRE_ROLL_FRAMES), start)
        if any(number not in self._recent and number not in self._recent_faces for number in wanted):
            # Kept as frames just worked: a segment shorter than the pre-roll has the next one's reach back into it.
            self._recent.update(zip(wanted, self._preroll_frames(start, len(wanted)), strict=False))
        detections = []
        for number in wanted:
            found = self._recent_faces.get(number)
            if found is None:
                if number not in self._recent:
                    raise RuntimeError(f"frame {number}, of the pre-roll of frame {start}, was not decoded")
                found = self._recent_faces[number] = self.engine.detect(self._recent[number])
            detections.append(found)
        return seeded(detections, self._settings())

    def _preroll_frames(self, start: int, count: int) -> list[Frame]:
        from facefusion_provider.media.images import rgb_array

        decoded = self.preroll_source(start) if self.preroll_source is not None else []
        if len(decoded) != count:
            raise RuntimeError(f"the tracker needs the {count} frames before frame {start}; {len(decoded)} came")
        return [rgb_array(frame) for frame in decoded]

    def _remember(self, frames: list[Frame], numbers: list[int]) -> None:
        """Keep the last ``PRE_ROLL_FRAMES`` frames (and their detections) for the next segment's tracker."""
        from facefusion_provider.engine.track import PRE_ROLL_FRAMES

        for frame, number in zip(frames, numbers, strict=True):
            if number - 1 not in self._recent:  # after a seek: what came before is no pre-roll of what follows
                self._forget_before(number)
            self._recent[number] = frame
        self._forget_before(max(self._recent) - PRE_ROLL_FRAMES + 1)

    def _forget_before(self, first: int) -> None:
        for kept in (self._recent, self._recent_faces):
            for number in [n for n in kept if n < first]:
                del kept[number]

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
        try:  # every array in the file carries the zip's CRC-32, checked as it is read
            stored = unpack_faces(storage.read_bytes(uri))
        except (ValueError, KeyError, OSError, zipfile.BadZipFile) as error:
            damage = f"unreadable ({error})"
        else:
            if len(stored) == self.spec.segments[index].frame_count:
                return stored
            damage = f"holds {len(stored)} frames, not {self.spec.segments[index].frame_count}"
        # Removed so that this worker's analysis, written once it is done, takes its place for every later run.
        logger.warning("%s is damaged (%s): analysing its frames again", uri, damage)
        self.metrics.analysis_retired()
        storage.delete(uri)
        return None

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
            classified = stats.classified
        self.counts.classified_faces += classified - self._classified
        self._classified = classified
        for stage, total in seconds.items():
            if total > self._seconds.get(stage, 0.0):
                self.metrics.stage_seconds(stage, total - self._seconds.get(stage, 0.0))  # type: ignore[arg-type]
        self.metrics.faces("detected", detected - self._faces[0])
        self.metrics.faces("swapped", swapped - self._faces[1])
        self.metrics.frames("swap", frames)
        done, faces = self.swapped_so_far
        self.swapped_so_far = (done + frames, faces + swapped - self._faces[1])
        self._seconds, self._faces = seconds, (detected, swapped)
