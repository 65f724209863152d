"""Opening media with PyAV, with every FFmpeg failure turned into an error that names the file and the problem."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from fractions import Fraction
from typing import IO

import av
import av.container
from av.codec.hwaccel import HWAccel

from facefusion_provider.exceptions import InvalidMediaError

MediaSource = str | IO[bytes]  # a local path or a seekable binary file (e.g. an fsspec file on S3)


@contextlib.contextmanager
def open_media(
    source: MediaSource, name: str, *, demux_only: bool = False, hwaccel: HWAccel | None = None
) -> Iterator[av.container.InputContainer]:
    """Open ``source`` for reading; ``name`` (the URI the user gave) appears in every error.

    ``demux_only``: packets are all the caller reads, so opening decodes no frame (FFmpeg otherwise decodes a few to
    learn the pixel format, about 50 ms per 720p file); the video's ``pix_fmt`` is then unknown.
    """
    if not isinstance(source, str):
        source.seek(0)
    options = {"skip_frame": "all"} if demux_only else {}
    try:
        container = av.open(source, mode="r", metadata_errors="ignore", options=options, hwaccel=hwaccel)
    except av.FFmpegError as error:
        raise InvalidMediaError(
            f"{name}: not a readable video file ({_reason(error)}); it may be truncated, or not a video at all"
        ) from None
    try:
        yield container
    finally:
        container.close()


@contextlib.contextmanager
def media_errors(name: str, doing: str) -> Iterator[None]:
    """Report an FFmpeg failure while reading ``name`` as a clear, non-retryable media error."""
    try:
        yield
    except av.FFmpegError as error:
        raise InvalidMediaError(
            f"{name}: {doing} failed ({_reason(error)}); the file may be truncated or corrupt"
        ) from None


def _reason(error: av.FFmpegError) -> str:
    return str(getattr(error, "strerror", None) or error).strip()


def fraction_text(value: Fraction) -> str:
    """``30000/1001`` (and ``30/1``, never ``30``): how work.json writes rates and time bases."""
    return f"{value.numerator}/{value.denominator}"
