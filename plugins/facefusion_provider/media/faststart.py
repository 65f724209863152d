"""An MP4/MOV written with its moov last, published with the moov first (playable while it downloads), without a
second pass over the media data.

The merge's muxer writes ``ftyp, free, mdat, moov``: the media data is final as soon as it is written, so it can be
uploaded while the muxer still runs. The published file is ``ftyp, moov', free, mdat``: the same boxes with the moov
moved in front and every chunk offset in it moved by the moov's size, which is what FFmpeg's ``movflags=+faststart``
writes for the same packets, byte for byte. The media data itself is never read or rewritten here.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import IO

import numpy as np

from facefusion_provider.media.mp4index import (
    Box,
    UnsupportedLayoutError,
    box_bytes,
    child_boxes,
    read_exactly,
    top_level_boxes,
)

FASTSTART_EXTENSIONS = frozenset({"mp4", "m4v", "mov"})  # containers published with their moov first
PADDING_KINDS = frozenset({"free", "skip", "wide"})  # what FFmpeg writes between ftyp and mdat
# The boxes on the way from moov to the chunk offset tables; every other box is copied as it is.
PATH_TO_OFFSETS = {"moov": "trak", "trak": "mdia", "mdia": "minf", "minf": "stbl"}
MAX_STCO_OFFSET = 0xFFFFFFFF


@dataclass(frozen=True)
class MoovAtEnd:
    """Where the parts of a file laid out ``ftyp, padding, mdat, moov`` lie."""

    ftyp_end: int
    media_start: int  # the first byte of mdat's payload
    media_end: int  # mdat's end, where the moov begins
    moov_size: int
    file_size: int


def media_start(head: bytes) -> int | None:
    """Where the media data begins in a file that starts with ``head``: after ftyp, padding boxes and mdat's header.

    ``head`` may be a file still being written (mdat's size not written yet); None while ``head`` is too short to
    tell or when the file starts any other way (a moov in front, another format).
    """
    position = 0
    try:
        for box in top_level_boxes(io.BytesIO(head), len(head)):
            if (position == 0) != (box.kind == "ftyp") or (position and box.kind not in PADDING_KINDS | {"mdat"}):
                return None
            if box.kind == "mdat":
                return box.position + box.header_size
            position = box.end
    except UnsupportedLayoutError:
        return None
    return None


def moov_at_end(handle: IO[bytes]) -> MoovAtEnd | None:
    """The layout of a finished file written with its moov last; None for any other layout."""
    handle.seek(0, io.SEEK_END)
    file_size = handle.tell()
    try:
        boxes = list(top_level_boxes(handle, file_size))
    except UnsupportedLayoutError:
        return None
    kinds = [box.kind for box in boxes]
    if len(boxes) < 3 or kinds[0] != "ftyp" or kinds[-2:] != ["mdat", "moov"] or boxes[-1].end != file_size:
        return None
    if any(kind not in PADDING_KINDS for kind in kinds[1:-2]):
        return None
    mdat, moov = boxes[-2], boxes[-1]
    return MoovAtEnd(boxes[0].end, mdat.position + mdat.header_size, mdat.end, moov.size, file_size)


def faststart_head(handle: IO[bytes], layout: MoovAtEnd) -> bytes:
    """The published file's bytes before the media data: ftyp, the moov with its offsets moved, padding, mdat's header.

    The published file is this head followed by bytes ``[layout.media_start, layout.media_end)`` of ``handle``.
    Raises ``UnsupportedLayoutError`` for a moov whose offset tables cannot be rewritten (a 64-bit container box).
    """
    handle.seek(0)
    ftyp = read_exactly(handle, layout.ftyp_end)
    between = read_exactly(handle, layout.media_start - layout.ftyp_end)
    handle.seek(layout.media_end)
    moov = read_exactly(handle, layout.moov_size)
    return ftyp + relocate_moov(moov) + between


def relocate_moov(moov: bytes) -> bytes:
    """The moov box, to be written just before the media data it indexes: every chunk offset grows by its own size.

    An offset that outgrows 32 bits turns its ``stco`` into a ``co64``, which makes the moov larger, so the shift is
    found again until it holds (at most once per table).
    """
    shift = len(moov)
    while True:
        moved = _shifted_container(moov, 0, len(moov), "moov", shift)
        if len(moved) == shift:
            return moved
        shift = len(moved)


def _shifted_container(data: bytes, header_start: int, end: int, kind: str, shift: int) -> bytes:
    if struct.unpack_from(">I", data, header_start)[0] in {0, 1}:
        raise UnsupportedLayoutError(f"a {kind} box with a 64-bit or open size")
    children = child_boxes(data, header_start + 8, end)
    return box_bytes(kind, b"".join(_shifted_child(data, child, shift) for child in children))


def _shifted_child(data: bytes, box: Box, shift: int) -> bytes:
    if box.kind in {"stco", "co64"}:
        return _shifted_offsets(data, box, shift)
    if box.kind in PATH_TO_OFFSETS.values():
        return _shifted_container(data, box.header_start, box.end, box.kind, shift)
    return data[box.header_start : box.end]


def _shifted_offsets(data: bytes, box: Box, shift: int) -> bytes:
    """A chunk offset table with ``shift`` added to every entry: stco while the offsets fit 32 bits, else co64."""
    version_flags, count = struct.unpack_from(">4sI", data, box.start)
    width = ">u4" if box.kind == "stco" else ">u8"
    entries = np.frombuffer(data, width, count, box.start + 8).astype(np.uint64) + np.uint64(shift)
    wide = box.kind == "co64" or (count > 0 and int(entries.max()) > MAX_STCO_OFFSET)
    table = entries.astype(">u8" if wide else ">u4").tobytes()
    return box_bytes("co64" if wide else "stco", version_flags + struct.pack(">I", count) + table)
