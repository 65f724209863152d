"""Moving a finished MP4/MOV's moov in front of its media data gives what FFmpeg's ``+faststart`` writes, byte for
byte; offsets that outgrow 32 bits turn into co64 tables; only the layout the merge's muxer writes is recognised."""

from __future__ import annotations

import io
import struct
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from readback import frame_digests, packet_payloads

from facefusion_provider.media.faststart import faststart_head, media_start, moov_at_end, relocate_moov
from facefusion_provider.media.mp4index import child_boxes, top_level_boxes

from .conftest import BFRAMES_LONG_GOP, MakeVideo


def _remux(source: str, path: Path, **options: str) -> bytes:
    """Every packet of ``source``'s video and audio, as the merge copies them, into ``path``."""
    with av.open(source) as container, av.open(str(path), "w", options=options) as output:
        streams = {
            s.index: output.add_stream_from_template(s) for s in container.streams if s.type in {"video", "audio"}
        }
        for packet in container.demux(list(container.streams)):
            if packet.dts is None or packet.stream.index not in streams:
                continue
            packet.stream = streams[packet.stream.index]
            output.mux(packet)
    return path.read_bytes()


def _kinds(data: bytes) -> list[str]:
    return [box.kind for box in top_level_boxes(io.BytesIO(data), len(data))]


@pytest.mark.parametrize("extension", ["mp4", "mov"])
def test_the_moov_moved_in_front_is_ffmpegs_faststart_file(
    extension: str, make_video: MakeVideo, tmp_path: Path
) -> None:
    source = make_video(48, audio_rate=8000, frame_rate=Fraction(30000, 1001), codec_options=BFRAMES_LONG_GOP)
    moov_last = _remux(source, tmp_path / f"last.{extension}")
    faststart = _remux(source, tmp_path / f"first.{extension}", movflags="+faststart")

    layout = moov_at_end(io.BytesIO(moov_last))
    assert layout is not None and _kinds(moov_last)[-2:] == ["mdat", "moov"]
    published = faststart_head(io.BytesIO(moov_last), layout) + moov_last[layout.media_start : layout.media_end]

    assert published == faststart
    assert _kinds(published)[:2] == ["ftyp", "moov"]
    assert media_start(moov_last[:4096]) == layout.media_start
    (tmp_path / f"published.{extension}").write_bytes(published)
    assert packet_payloads(str(tmp_path / f"published.{extension}")) == packet_payloads(source)
    assert [d.md5 for d in frame_digests(str(tmp_path / f"published.{extension}"))] == [
        d.md5 for d in frame_digests(source)
    ]


def test_only_the_muxers_moov_last_layout_is_recognised(make_video: MakeVideo, tmp_path: Path) -> None:
    source = make_video(6)
    faststart = _remux(source, tmp_path / "first.mp4", movflags="+faststart")
    moov_last = _remux(source, tmp_path / "last.mp4")

    assert moov_at_end(io.BytesIO(faststart)) is None  # the moov is in front already
    assert media_start(faststart[:4096]) is None
    assert moov_at_end(io.BytesIO(moov_last[:-10])) is None  # cut short: the moov overruns the file
    assert moov_at_end(io.BytesIO(b"RIFF" + bytes(60))) is None
    layout = moov_at_end(io.BytesIO(moov_last))
    assert layout is not None
    # While the muxer writes, mdat's size is still 0 ("to the end of the file"): the media's start is known already.
    head = bytearray(moov_last[: layout.media_start + 100])
    head[layout.media_start - 8 : layout.media_start - 4] = bytes(4)
    assert media_start(bytes(head)) == layout.media_start
    assert media_start(bytes(head[: layout.media_start - 4])) is None  # mdat's header not written yet


def _box(kind: str, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind.encode()) + payload


def _offsets_box(kind: str, offsets: list[int]) -> bytes:
    width = ">u4" if kind == "stco" else ">u8"
    return _box(kind, bytes(4) + struct.pack(">I", len(offsets)) + np.array(offsets, width).tobytes())


def _table(moov: bytes, track: int) -> tuple[str, list[int]]:
    """The chunk offset table of the ``track``-th trak of a moov box: its kind and entries."""
    trak = [box for box in child_boxes(moov, 8, len(moov)) if box.kind == "trak"][track]
    box = trak
    for kind in ("mdia", "minf", "stbl"):
        box = next(child for child in child_boxes(moov, box.start, box.end) if child.kind == kind)
    table = next(child for child in child_boxes(moov, box.start, box.end) if child.kind in {"stco", "co64"})
    count = struct.unpack_from(">I", moov, table.start + 4)[0]
    width = ">u4" if table.kind == "stco" else ">u8"
    return table.kind, np.frombuffer(moov, width, count, table.start + 8).astype(int).tolist()


def test_offsets_past_4_gib_turn_a_stco_into_a_co64_and_every_box_grows_with_it() -> None:
    def trak(table: bytes) -> bytes:
        stbl = _box("stbl", _box("stsz", bytes(12)) + table)
        return _box("trak", _box("tkhd", bytes(84)) + _box("mdia", _box("minf", stbl)))

    near_limit, small = 0xFFFFFFFF - 100, 48  # the last chunk of the media ends just under 4 GiB
    moov = _box("moov", _box("mvhd", bytes(100)) + trak(_offsets_box("stco", [small, near_limit])))
    moved = relocate_moov(moov)

    assert len(moved) == len(moov) + 8  # two 4-byte entries became 8-byte ones
    assert _table(moved, 0) == ("co64", [small + len(moved), near_limit + len(moved)])
    assert _box_sizes_add_up(moved)

    kept = _box("moov", _box("mvhd", bytes(100)) + trak(_offsets_box("stco", [small, 1000])))
    moved_kept = relocate_moov(kept)
    assert len(moved_kept) == len(kept) and _table(moved_kept, 0) == ("stco", [small + len(kept), 1000 + len(kept)])


def _box_sizes_add_up(data: bytes, start: int = 0, end: int | None = None) -> bool:
    """Every container's children fill it exactly (``child_boxes`` raises where one overruns its parent)."""
    end = len(data) if end is None else end
    for box in child_boxes(data, start, end):
        if box.kind in {"moov", "trak", "mdia", "minf", "stbl"} and not _box_sizes_add_up(data, box.start, box.end):
            return False
    return sum(box.end - box.header_start for box in child_boxes(data, start, end)) == end - start


def test_an_mdat_past_4_gib_keeps_its_media_start_when_its_size_turns_64_bit() -> None:
    # FFmpeg writes ftyp, free, mdat; past 4 GiB it rewrites free + mdat's header as one 16-byte header at the end.
    ftyp = _box("ftyp", b"isom" + bytes(4) + b"isomiso2avc1mp41")
    media = bytes(range(256)) * 4
    moov = _box("moov", _box("mvhd", bytes(100)))
    while_writing = ftyp + _box("free", b"") + struct.pack(">I4s", 0, b"mdat") + media
    finished = ftyp + struct.pack(">I4sQ", 1, b"mdat", 16 + len(media)) + media + moov

    layout = moov_at_end(io.BytesIO(finished))

    assert media_start(while_writing) == len(ftyp) + 16
    assert layout is not None and (layout.media_start, layout.media_end) == (
        len(ftyp) + 16,
        len(ftyp) + 16 + len(media),
    )
    head = faststart_head(io.BytesIO(finished), layout)
    assert head == ftyp + moov + finished[len(ftyp) : len(ftyp) + 16]  # no offsets to move: the moov as it was
