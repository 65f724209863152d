"""The records a work folder holds (pydantic, JSON on storage): work.json, segment and output markers, claims and
run leases. A record's shape is part of ``WORK_FORMAT_VERSION``, and so of every work id."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from facefusion_provider.options import Options, frame_options
from facefusion_provider.types import VideoProbe

# Bump when work.json, the segment files or the markers change shape: the version is part of the work id.
WORK_FORMAT_VERSION = 4  # 4: work.json (was job.json); 3: chunk_size left the options (and so every work id's hash)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Segment(_Record):
    """The commit unit: frames ``[start, end)`` of the target in display order, numbered from the file's first frame."""

    index: int = Field(ge=0)
    start: int = Field(ge=0)
    end: int = Field(ge=1)

    @property
    def frame_count(self) -> int:
        return self.end - self.start

    @property
    def label(self) -> str:
        return f"frames {self.start}-{self.end - 1}"


class Span(_Record):
    """The scheduling unit (one mapped task, one pod): segments ``[first, last)``, frames ``[start, end)``."""

    index: int = Field(ge=0)
    first: int = Field(ge=0)
    last: int = Field(ge=1)
    start: int = Field(ge=0)
    end: int = Field(ge=1)

    @property
    def segment_count(self) -> int:
        return self.last - self.first

    @property
    def label(self) -> str:
        plural = "" if self.segment_count == 1 else "s"
        return f"frames {self.start}-{self.end - 1} ({self.segment_count} segment{plural})"


class WorkSpec(_Record):
    """``work.json``: everything a segment needs, written once (exclusively) by the first ``prepare`` of this work.

    It names inputs by content, not by place: two runs over the same bytes under other keys share it, and each passes
    its own target URI to the worker.
    """

    format_version: int = WORK_FORMAT_VERSION
    work_id: str
    target_content_id: str
    source_content_ids: list[str]
    source_names: list[str]  # file names of the sources, for people reading the folder
    options: Options
    probe: VideoProbe
    frame_start: int  # after trimming, in probe frame numbers
    frame_end: int
    segments: list[Segment]
    analysis_id: str | None = None  # the target analysis this work reads and writes (face detection, landmarks)
    identity: dict[str, Any] = Field(default_factory=dict)  # source identity and reference face, owned by the engine

    def frame_options(self) -> Options:
        """The options its output frames are made with (an image target's ``output_image_scale`` as the scale)."""
        return frame_options(self.options, still_image=self.probe.still_image)


class SegmentMarker(_Record):
    """``segments/NNNNN.json`` (``NNNNN.I.json`` in incarnation ``I`` > 0), created exclusively after its file: the
    segment is committed, by exactly one writer."""

    work_id: str
    index: int
    start: int
    end: int
    frame_count: int
    file: str  # the committed file's name in ``segments/``: of two racing writers, the one that created this marker
    sha256: str
    size: int
    writer: str
    timings: dict[str, float] = Field(default_factory=dict)
    # The file's moov payload, base64: the merge joins an MP4 from the markers it reads anyway, never from the files.
    moov: str | None = None
    incarnation: int = 0  # one more for each earlier commit of the segment retired as damaged (``retire_commit``)


class RetiredCommit(_Record):
    """``segments/NNNNN.I.retired.json``, created exclusively: incarnation ``I`` of the segment's commit failed its
    check and is retired; the segment is computed again as incarnation ``I + 1``."""

    index: int
    incarnation: int
    reason: str
    by: str  # the host and process that found it
    marker: SegmentMarker | None  # None where the marker itself was unreadable


class OutputMarker(_Record):
    """Written beside the output by its run's merge: which work made the file, so a repeat run can stop early, and
    how long the merge took (``timings["total_s"]``, read by ``cleanup`` for the run's metrics); for whom and when, so
    an earlier run over the same output says by whom it was replaced."""

    work_id: str
    output_uri: str
    frame_count: int
    sha256: str | None  # None where the output was joined from its inputs' indexes: its bytes never passed the merge
    size: int
    # Optional, so the markers of earlier merges still read: the work a marker names is unchanged, so no format bump.
    timings: dict[str, float] = Field(default_factory=dict)
    method: str = "remux"  # "index": the moov built from the segments' indexes, the media data copied as it is
    run: RunHolder | None = None  # the run whose lease names this output (None: a marker of an earlier version)
    written_at: datetime | None = None


class Claim(_Record):
    """``claims/NAME.GGGG.json``: generation ``G`` of the claim on ``NAME`` (a segment index, ``prepare``, or
    ``merge-{run_key}``), a lease (docs/protocol.md): its holder rewrites it within ``ttl_seconds``; a lapsed claim is
    taken over by creating generation ``G + 1``."""

    name: str
    generation: int = Field(ge=1)
    holder: str  # one worker process
    owner: str  # the task that runs it (dag/run/task/map index), or the holder itself outside Airflow
    host: str
    pid: int
    ttl_seconds: float = Field(gt=0)


class StandingWorker(_Record):
    """``{work_root}/workers/NAME.json``: a standing worker's lease (``facefusion-worker serve``), rewritten within
    ``ttl_seconds`` while it runs; swap_span tasks that wait for standing workers fail when none is live."""

    name: str
    host: str
    pid: int
    started_at: datetime
    ttl_seconds: float = Field(gt=0)


class Refusal(_Record):
    """``refusals/NAME.json``: standing worker ``NAME`` gave up on the work (its models or its target cannot be
    loaded there) and works none of its segments while it lives; a span that waits on standing workers fails with
    this reason once every live one has refused."""

    worker: str
    failure_class: str
    retryable: bool
    message: str


class RunHolder(_Record):
    """Who holds a run lease: an Airflow DAG run (``dag_id``, ``run_id``), or a ``facefusion-worker run`` process."""

    kind: Literal["airflow", "cli"]
    dag_id: str = ""
    run_id: str = ""
    host: str = ""
    pid: int = 0

    def describe(self) -> str:
        return f"{self.dag_id}/{self.run_id}" if self.kind == "airflow" else f"CLI run {self.host}/{self.pid}"


class RunLease(_Record):
    """``runs/KEY.json``: a run's lease on the work (docs/protocol.md). Live while rewritten within ``ttl_seconds``;
    ``active`` asks workers to work the run's segments, ``kept`` (a failed run) only keeps the work for a retry."""

    holder: RunHolder
    ttl_seconds: float = Field(gt=0)
    state: Literal["active", "kept"] = "active"
    output_uri: str
    created_at: datetime
    target_uri: str = ""  # this run's path to the target: a worker with nothing left of its own run helps this one
    priority: int = 0  # standing and helping workers take a run of higher priority first
    # The run's sources and options (as validated): a worker prepares the work from them when work.json is missing.
    source_uris: list[str] = Field(default_factory=list)
    options: dict[str, Any] | None = None


class Sweep(_Record):
    """``deleting.json``: a cleanup is removing this work (a lease of its own); a run that wants it waits until it is
    gone."""

    run_key: str
    started_at: datetime
    ttl_seconds: float = Field(gt=0)


def segment_label(spec: WorkSpec, segment: Segment) -> str:
    """Stored in the segment file itself: the merge refuses a file that holds another work's or segment's frames."""
    return f"facefusion-provider work {spec.work_id} segment {segment.index} {segment.label}"
