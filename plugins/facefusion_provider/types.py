"""Named types shared by the worker and the Airflow side (stdlib and pydantic only)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from facefusion_provider.options import Options

# Bump when job.json, the chunk files or the markers change shape: the version is part of the job id.
JOB_FORMAT_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Chunk(_Model):
    """Frames ``[start, end)`` of the target, in display order, numbered from the first frame of the file."""

    index: int = Field(ge=0)
    start: int = Field(ge=0)
    end: int = Field(ge=1)

    @property
    def frame_count(self) -> int:
        return self.end - self.start

    @property
    def label(self) -> str:
        return f"frames {self.start}-{self.end - 1}"


class StreamInfo(_Model):
    """A non-video stream of the target that the merge copies over unchanged."""

    index: int
    kind: str  # "audio", "subtitle", "data"
    codec: str
    time_base: str
    language: str | None = None


class VideoProbe(_Model):
    """What the media layer learned about the target by demuxing it (no full decode)."""

    container: str
    codec: str
    width: int
    height: int
    pix_fmt: str
    frame_rate: str  # exact fraction, e.g. "30000/1001"; the average for variable frame rate
    time_base: str  # of the video stream, e.g. "1/30000"
    frame_count: int
    pts: list[int]  # every frame's presentation timestamp in display order, in time_base units
    duration_seconds: float
    rotation: int = 0  # degrees, from the display matrix
    video_stream_index: int = 0
    streams: list[StreamInfo] = Field(default_factory=list)


class ChunkMarker(_Model):
    """Written after the chunk file: its existence means the chunk is committed and can be reused."""

    job_id: str
    index: int
    start: int
    end: int
    frame_count: int
    sha256: str
    size: int
    timings: dict[str, float] = Field(default_factory=dict)


class OutputMarker(_Model):
    """Written next to the output: a repeated run of the same job finds it and does no work."""

    job_id: str
    output_uri: str
    frame_count: int
    sha256: str
    size: int


class JobSpec(_Model):
    """``job.json``: everything every chunk needs, written once by ``prepare``."""

    format_version: int = JOB_FORMAT_VERSION
    job_id: str
    job_uri: str
    source_uris: list[str]
    target_uri: str
    output_uri: str
    options: Options
    probe: VideoProbe
    frame_start: int  # after trimming, in probe frame numbers
    frame_end: int
    chunks: list[Chunk]
    identity: dict[str, Any] = Field(default_factory=dict)  # source identity and reference face, owned by the engine
