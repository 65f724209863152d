"""A worker's segments within one work: models load once; frames stream through the pipeline without a pause at
segment boundaries; each segment is committed (file, then marker) as soon as its last frame is encoded, its upload
overlapping the next segment's work. A retry, a cleared task or a new run over the same work starts at the first
uncommitted segment of its span; a worker with nothing left of its own span takes segments from the tail of the span
with the most work left (``worker/segments.py`` chooses). ``worker/scheduler.py`` chooses the works."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from facefusion_provider import storage
from facefusion_provider.contract import SpanProgress
from facefusion_provider.metric_names import WORK_ID
from facefusion_provider.storage.scratch import scratch_folder
from facefusion_provider.telemetry.metrics import WorkerMetrics, worker_metrics
from facefusion_provider.work import leases, liveness
from facefusion_provider.work.access import checked_uris, load_work
from facefusion_provider.work.claims import (
    SegmentClaims,
    WorkState,
    check_conditional_writes,
    scan_work,
)
from facefusion_provider.work.layout import AnalysisLayout, WorkLayout
from facefusion_provider.work.records import Segment, WorkSpec
from facefusion_provider.worker.analysis import AnalysedProcessor, AnalysisCounts
from facefusion_provider.worker.progress import Progress
from facefusion_provider.worker.segments import (
    Committer,
    SegmentFrames,
    SegmentPicker,
    SegmentWriter,
    chosen_media_paths,
)

if TYPE_CHECKING:
    from facefusion_provider.media.decode import DecodeStats

logger = logging.getLogger(__name__)

WAIT_SECONDS = 2.0  # how often a worker with nothing to claim looks again at every claim (one may have lapsed)
# Between those looks, how often it asks whether the segments it waits for are committed: one HEAD each, so the span
# ends within this of the other worker's commit instead of up to WAIT_SECONDS after it.
MARKER_LOOK_SECONDS = 0.1


@dataclass(frozen=True)
class SpanResult:
    span: int
    first: int
    last: int
    committed: int  # segments this worker committed (its own and others')
    helped_in_run: int  # of those, segments of other spans of its run (helping their workers)
    reused: int  # segments of its span already committed when the worker started
    discarded: int  # segments another worker committed first
    frames: int  # frames this worker processed and encoded
    decoded_frames: int  # frames it decoded, the pre-roll before each seek included
    skipped: bool  # nothing to do: the span was committed already
    analysed_frames: int = 0  # frames whose faces this worker detected (not in the target's stored analysis)
    analysis_reused_frames: int = 0  # frames whose faces came from the stored analysis
    classified_faces: int = 0  # faces it ran the face classifier on (none where the stored analysis was read)
    helped_runs: int = 0  # other runs' works this worker committed segments of, its own span done
    helped_segments: int = 0  # segments it committed there (not counted in ``committed``)
    timings: dict[str, float] = field(default_factory=dict)


def load_or_prepare(layout: WorkLayout, run_key: str, models_dir: str | None) -> WorkSpec:
    """The work's work.json; when it is missing and the run's lease carries its inputs and options (docs/protocol.md,
    "Queued Airflow runs"), the work prepared again from them."""
    return prepare_again(layout, run_key, models_dir) or load_work(layout)


def prepare_again(layout: WorkLayout, run_key: str, models_dir: str | None) -> WorkSpec | None:
    """The work prepared again from the run's lease when its work.json is missing (removed while the run waited);
    None when it is there, or the lease carries no inputs to prepare it from. ``LeaseLostError`` when the lease went
    with the work: this process was paused past its TTL, and its run's next try holds the work again."""
    if run_key and not storage.exists(layout.work_json):
        lease = leases.read_lease(layout.run_lease(run_key))
        if lease is None:
            raise leases.LeaseLostError(
                f"{layout.work_uri}: the work and the lease of run {run_key} were removed (the lease was not renewed "
                "within its TTL); run again to rebuild the work"
            )
        if lease.options is not None:
            from facefusion_provider.options import Options
            from facefusion_provider.worker.prepare import prepare_work

            logger.info("work %s: no work.json (removed while this run waited); preparing it again", layout.work_id)
            uris = checked_uris(lease.source_uris, lease.target_uri, None)
            return prepare_work(layout, uris, Options.model_validate(lease.options), models_dir)
    return None


class FrameProcessors:
    """Builds the frame processor once, only when a segment really needs it: the engine's, reading and writing the
    target's stored analysis under ``work_root`` (the work folder's root)."""

    def __init__(self, spec: WorkSpec, models_dir: str | None, work_root: str | None = None) -> None:
        self._spec, self._models_dir, self._work_root = spec, models_dir, work_root
        self._processor: AnalysedProcessor | None = None
        self.load_seconds = 0.0

    def get(self, metrics: WorkerMetrics) -> AnalysedProcessor | None:
        options = self._spec.frame_options()
        if not options.processors and options.output_video_scale == 1.0:
            return None  # the decoded frames go to the encoder untouched
        if self._processor is None:
            began = time.perf_counter()
            from facefusion_provider.engine.processors.chain import build_frame_processor

            engine = build_frame_processor(options, self._spec.identity, self._models_dir)
            self.load_seconds = time.perf_counter() - began
            metrics.model_load(engine.model_label, self.load_seconds)
            analysis = self._spec.analysis_id
            layout = AnalysisLayout.under(self._work_root, analysis) if analysis and self._work_root else None
            self._processor = AnalysedProcessor(engine, self._spec, layout, metrics)
        return self._processor

    def faces_per_frame(self) -> float | None:
        """Faces swapped per frame processed so far by this process; None before any frame."""
        frames, faces = self._processor.swapped_so_far if self._processor is not None else (0, 0)
        return faces / frames if frames else None

    @property
    def analysis(self) -> AnalysisCounts:
        return self._processor.counts if self._processor is not None else AnalysisCounts()


EncodeSegments = Callable[[SegmentPicker, Committer, str], int]
"""One pass of a span's frame work: the segments the picker hands out decoded, processed and encoded into the folder,
each file handed to the committer as its last frame is encoded; returns the frames encoded."""


class FrameWork(Protocol):
    def __call__(  # noqa: PLR0917 - the span's state, passed on once
        self,
        spec: WorkSpec,
        target_uri: str,
        processors: FrameProcessors,
        metrics: WorkerMetrics,
        decoding: DecodeStats,
        progress: Progress,
        own: range,
        span: int,
        label: str,
    ) -> AbstractContextManager[EncodeSegments]: ...


@contextmanager
def media_frame_work(  # noqa: PLR0917 - the span's state, passed on once
    spec: WorkSpec,
    target_uri: str,
    processors: FrameProcessors,
    metrics: WorkerMetrics,
    decoding: DecodeStats,
    progress: Progress,
    own: range,
    span: int,
    label: str,
) -> Iterator[EncodeSegments]:
    """The frames of a span's segments: the target opened and this machine's decode and encode paths chosen once; each
    pass decodes the segments the picker hands out, processes them (``worker/pipeline.py``) and encodes each to its
    own file."""
    from facefusion_provider.media.preview import preview_frames
    from facefusion_provider.worker.pipeline import run_pipeline

    previews = preview_frames(spec.frame_start, spec.frame_end)
    with storage.open_input(target_uri) as target:
        paths = chosen_media_paths(spec, metrics)
        logger.info("%s: %s", label, paths.line())

        def encode(picker: SegmentPicker, committer: Committer, folder: str) -> int:
            processor = processors.get(metrics)
            frames = SegmentFrames(
                picker,
                target,
                target_uri,
                stats=decoding,
                preview_frames=previews,
                metrics=metrics,
                decode_plan=paths.decode,
                preroll=processor.preroll if processor is not None else 0,
            )
            if processor is not None:
                processor.preroll_source = frames.take_preroll
            writer = SegmentWriter(
                spec, folder, committer, frames, preview_frames=previews, metrics=metrics, progress=progress, own=own
            )
            stream = frames.stream()
            try:
                run_pipeline(stream, writer.encode, processor)
            finally:
                stream.close()
                writer.abort()
            return writer.frames_encoded

        yield encode


frame_work: FrameWork = media_frame_work  # the one place frames are made: the simulation puts its stub here


def work_segments(
    spec: WorkSpec,
    layout: WorkLayout,
    target_uri: str,
    own: range,
    processors: FrameProcessors,
    *,
    span: int = 0,
    owner: str = "",
    deadline: float | None = None,
    guard: Callable[[], None] | None = None,
    stop: threading.Event | None = None,
) -> SpanResult:
    """Work the segments of ``own`` (and then the tails of other spans) until every one of ``own`` is committed.

    With ``own`` empty the worker is helping another run: it works that run's free segments until none is left or
    ``deadline`` (``liveness.clock.monotonic()``) passes, and waits for nobody. ``guard`` is called before each claim and each
    commit: it raises to stop the worker (its run's lease was removed: ``work.leases.RunHold.check``).
    """
    from facefusion_provider.media.decode import DecodeStats

    began = time.perf_counter()
    helping = not own
    state = scan_work(layout)
    reused = sum(index in state.committed for index in own)
    claims = SegmentClaims(layout, owner=owner)
    picker = SegmentPicker(spec, own, claims, layout, deadline=deadline, guard=guard, stop=stop)
    if helping and not picker.has_free(state):
        return _result(span, own, 0, skipped=True)
    if not helping and reused == len(own):
        logger.info("span %d (segments %d-%d): every segment is committed already", span, own[0], own[-1])
        return _result(span, own, reused, skipped=True)
    check_conditional_writes(layout)
    metrics = worker_metrics({WORK_ID: spec.work_id})
    decoding = DecodeStats()
    frames_done = 0
    own_frames = [spec.segments[index].frame_count for index in own]
    done_frames = sum(count for index, count in zip(own, own_frames, strict=True) if index in state.committed)
    people = Progress(
        sum(own_frames),
        emit=(lambda line: None) if helping else (lambda line: logger.info("span %d: %s", span, line)),
        done=done_frames,
        faces_per_frame=processors.faces_per_frame,
    )
    if not helping:
        metrics.frames_remaining(people.remaining)
    label = f"work {spec.work_id} (helping)" if helping else f"span {span}"
    with (
        claims.renewing(),
        scratch_folder("span-") as folder,
        frame_work(spec, target_uri, processors, metrics, decoding, people, own, span, label) as encode,
    ):
        progress = SpanProgress(
            span=span, segments_committed=reused, segments_total=len(own), committed_here=0, frames_done=0
        )

        def report(segment: Segment) -> None:
            metrics.segment_committed()
            if helping:  # the span's progress (the task state store's record) is its own run's only
                logger.info("segment %d of work %s committed (helping another run)", segment.index, spec.work_id)
                return
            if segment.index in own:
                progress.segments_committed += 1
            progress.committed_here += 1
            progress.frames_done += segment.frame_count
            logger.info("%s", progress.line())
            people.committed(segment.index)
            metrics.frames_remaining(people.remaining)

        committer = Committer(spec, layout, claims, on_commit=report, metrics=metrics, guard=guard)
        with committer:
            while True:
                state = scan_work(layout)
                if helping and (not picker.has_free(state) or picker.past_deadline()):
                    break
                if all(index in state.committed for index in own) and not helping:
                    break
                if not picker.has_free(state):  # our span's last segments are claimed by live workers: wait
                    wait_for_commits(layout, state, [index for index in own if index not in state.committed])
                    continue
                frames_done += encode(picker, committer, folder)
                committer.wait()  # the next listing must see these markers
    stats = committer.stats
    total = time.perf_counter() - began
    logger.info(
        "%s: %d segments committed here (%d from other spans), %d reused, %d frames in %.1f s",
        label,
        stats.committed,
        len(picker.helped),
        reused,
        frames_done,
        total,
    )
    return SpanResult(
        span=span,
        first=own.start,
        last=own.stop,
        committed=stats.committed,
        helped_in_run=len(picker.helped),
        reused=reused,
        discarded=stats.discarded,
        frames=frames_done,
        decoded_frames=decoding.decoded,
        skipped=False,
        analysed_frames=processors.analysis.analysed_frames,
        analysis_reused_frames=processors.analysis.reused_frames,
        classified_faces=processors.analysis.classified_faces,
        timings={
            "load_s": round(processors.load_seconds, 3),
            "upload_s": round(stats.upload_seconds, 3),
            "total_s": round(total, 3),
            "fps": round(frames_done / total, 2) if total else 0.0,
        },
    )


def wait_for_commits(layout: WorkLayout, state: WorkState, awaited: list[int]) -> None:
    """Return once every segment of ``awaited`` is committed (its marker of the incarnation ``state`` saw), or after
    ``WAIT_SECONDS``: the caller's next full look then sees a claim that lapsed meanwhile."""
    markers = [layout.segment_marker(index, state.incarnation(index)) for index in awaited]
    deadline = liveness.clock.monotonic() + WAIT_SECONDS
    while markers and liveness.clock.monotonic() < deadline:
        liveness.clock.sleep(MARKER_LOOK_SECONDS)
        markers = [marker for marker in markers if not storage.exists(marker)]


def _result(span: int, own: range, reused: int, *, skipped: bool) -> SpanResult:
    return SpanResult(span, own.start, own.stop, 0, 0, reused, 0, 0, 0, skipped)
