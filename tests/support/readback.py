"""Read back what a video holds, frame by frame and packet by packet: for checks in tests and the benchmark."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt

from facefusion_provider.media.containers import MediaSource

WIDENED_FORMATS = {"yuva444p10le": "yuva444p16le", "yuva444p12le": "yuva444p16le"}  # ProRes 4444's


@dataclass(frozen=True)
class FrameDigest:
    pts: int
    seconds: float
    md5: str  # of the decoded planes in the stream's own pixel format (no conversion)


def frame_digests(source: MediaSource) -> list[FrameDigest]:
    """Every frame of the first video stream, fully decoded, in display order."""
    with av.open(source, mode="r") as container:
        stream = container.streams.video[0]
        digests = []
        for frame in container.decode(stream):
            pts = frame.pts if frame.pts is not None else -1
            widened = WIDENED_FORMATS.get(frame.format.name)  # no array of its own in PyAV: its planes widened, exactly
            data = (frame if widened is None else frame.reformat(format=widened)).to_ndarray().tobytes()
            digests.append(FrameDigest(pts, float(frame.time or 0.0), hashlib.md5(data).hexdigest()))
        return digests


def packet_payloads(source: MediaSource, kind: str = "audio") -> list[tuple[float, bytes]]:
    """(start second, bytes) of every packet of the first ``kind`` stream, in file order; [] when there is none."""
    with av.open(source, mode="r") as container:
        streams = [stream for stream in container.streams if stream.type == kind]
        if not streams:
            return []
        payloads = []
        for packet in container.demux(streams[0]):
            if packet.size and packet.pts is not None and packet.time_base is not None:
                payloads.append((float(packet.pts * packet.time_base), bytes(packet)))
        return payloads


def rgb_frames(source: MediaSource) -> list[npt.NDArray[np.uint8]]:
    """Every decoded frame of the first video stream, as RGB arrays (height x width x 3)."""
    with av.open(source, "r") as container:
        return [np.asarray(frame.to_ndarray(format="rgb24"), np.uint8) for frame in container.decode(video=0)]


def checked_frames(
    target: str | Path, output: str | Path, count: int
) -> tuple[list[npt.NDArray[np.uint8]], list[npt.NDArray[np.uint8]]]:
    """The target's and the output's RGB frames, once the output is checked to keep the target's ``count`` frames,
    their timestamps and its audio packets (the target has sound)."""
    original, processed = rgb_frames(str(target)), rgb_frames(str(output))
    assert len(processed) == len(original) == count
    timestamps = [(d.pts, d.seconds) for d in frame_digests(str(target))]
    assert [(d.pts, d.seconds) for d in frame_digests(str(output))] == timestamps
    audio = packet_payloads(str(target))
    assert audio and packet_payloads(str(output)) == audio
    return original, processed
