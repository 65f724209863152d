"""Named types shared by the worker and the Airflow side (stdlib and pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Image targets and outputs (FaceFusion's image-to-image workflow): their extensions, which name the format.
IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".webp")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamInfo(_Model):
    """A stream of the target other than the video it swaps, that the merge copies over unchanged."""

    index: int
    kind: str  # "video" (a second camera, cover art), "audio", "subtitle", "data"
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
    still_image: bool = False  # an image target (JPEG, PNG, WebP): one frame, one segment, an image output
