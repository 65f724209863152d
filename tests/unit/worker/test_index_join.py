"""The merge joins an MP4 output from the segments' and the target's indexes: every frame and audio packet as the remux
would write them, the media data copied as it is, and the remux wherever the join does not apply."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from committed import committed_work
from readback import frame_digests, packet_payloads

from facefusion_provider import storage, worker
from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.media.mp4index import (
    TrackIndex,
    UnsupportedLayoutError,
    parse_movie,
    read_moov,
    read_movie_index,
    top_level_boxes,
)
from facefusion_provider.media.probe import probe_video
from facefusion_provider.output.merge import committed_markers
from facefusion_provider.output.mp4join import MovieFile, join_movies
from facefusion_provider.output.remux import SegmentFile, merge_segments
from facefusion_provider.output.sound import store_sound
from facefusion_provider.work.access import load_work
from facefusion_provider.work.layout import WorkLayout, output_marker_uri
from facefusion_provider.work.records import OutputMarker

from .conftest import MakeVideo

PASSTHROUGH: dict[str, Any] = {"processors": [], "output_video_quality": 100}
# B-frames and one keyframe in 250 frames: segments cut mid-GOP, each with its own reorder delay and edit list.
BFRAMES_LONG_GOP = {"preset": "veryfast", "crf": "20", "bf": "3", "g": "250", "keyint_min": "250", "sc_threshold": "0"}


def _marker(output: Path) -> OutputMarker:
    return OutputMarker.model_validate_json(Path(storage.local_path(output_marker_uri(str(output))) or "").read_text())


def _remuxed(work_uri: str, target: str, path: Path) -> Path:
    """The same committed segments remuxed (the merge's other method), for comparison."""
    layout = WorkLayout(work_uri)
    spec = load_work(layout)
    files = [
        SegmentFile(storage.local_path(layout.segment_file(m.file)) or "", m.start, m.end)
        for m in committed_markers(spec, layout)
    ]
    merge_segments(files, target, spec.probe, str(path), name=target)
    return path


@pytest.mark.parametrize(
    "video",
    [
        {"audio_rate": 48000, "codec_options": BFRAMES_LONG_GOP},
        {"audio_rate": 44100, "frame_rate": Fraction(25)},
        {"time_base": Fraction(1, 90000)},  # no audio
    ],
    ids=["bframes-aac48k", "25fps-aac44k", "no-audio"],
)
def test_an_mp4_is_joined_from_the_indexes_frame_and_packet_exact(
    video: dict[str, Any], make_video: MakeVideo, tmp_path: Path
) -> None:
    target = make_video(frames=40, **video)
    # Lossy segments from the B-frame target: x264's B-frames in every segment (its lossless mode has none here).
    quality = 80 if "codec_options" in video else 100
    options = {**PASSTHROUGH, "output_video_quality": quality, "output_video_preset": "veryfast"}
    work_uri, spec = committed_work(str(tmp_path / "root"), target, segment_size=9, **options)
    output = tmp_path / "out" / "joined.mp4"
    result = worker.merge(work_uri, target, str(output))
    remuxed = _remuxed(work_uri, target, tmp_path / "remuxed.mp4")

    assert result.method == "index" and _marker(output).method == "index" and len(spec.segments) == 5
    if quality == 100:
        assert [d.md5 for d in frame_digests(str(output))] == [d.md5 for d in frame_digests(target)]
    assert frame_digests(str(output)) == frame_digests(str(remuxed))  # pixels and frame times
    assert packet_payloads(str(output)) == packet_payloads(target) == packet_payloads(str(remuxed))
    assert probe_video(str(output), "out").pts == probe_video(target, "in").pts
    if "codec_options" in video:  # the segments reorder frames, so each join moves composition offsets and an edit
        assert _video_track(output).has_composition_offsets
    # The video samples are the segments' samples, byte for byte and in order: copied, never re-muxed.
    folder = Path(storage.local_path(WorkLayout(work_uri).segments_dir) or "")
    assert _video_samples(output) == [s for p in sorted(folder.glob("*.mp4")) for s in _video_samples(p)]
    with output.open("rb") as handle:
        assert [box.kind for box in top_level_boxes(handle, output.stat().st_size)] == ["ftyp", "moov", "mdat"]
    assert output.read_bytes()[8:12] == b"isom" and b"avc1" in output.read_bytes()[16:32]  # its brands: ISO, H.264
    names = sorted(path.name for path in output.parent.iterdir())
    assert names == [".joined.mp4.facefusion.json", "joined.mp4", "joined.preview.jpg"]  # nothing partial left


def _video_track(path: Path) -> TrackIndex:
    movie = read_movie_index(str(path))
    assert movie is not None
    return movie.tracks[0]


def _video_samples(path: Path) -> list[bytes]:
    track = _video_track(path)
    data = path.read_bytes()
    return [data[o : o + s] for o, s in zip(track.offsets.tolist(), track.sizes.tolist(), strict=True)]


@pytest.mark.parametrize(
    ("output_name", "options", "video"),
    [
        ("out.mov", {}, {"audio_rate": 48000}),  # QuickTime's own layout is the muxer's to write
        ("out.mp4", {"trim_frame_start": 3}, {"audio_rate": 48000}),  # the audio must be cut
        ("out.mp4", {}, {"rotation": 90}),
        ("out.mkv", {}, {}),
    ],
    ids=["mov", "trimmed", "rotated", "mkv"],
)
def test_what_the_join_does_not_handle_is_remuxed(
    output_name: str, options: dict[str, Any], video: dict[str, Any], make_video: MakeVideo, tmp_path: Path
) -> None:
    target = make_video(frames=12, **video)
    output = tmp_path / output_name
    result = worker.run([], target, str(output), str(tmp_path / "work"), segment_size=4, **PASSTHROUGH, **options)
    assert result.frame_count == 12 - options.get("trim_frame_start", 0)
    assert _marker(output).method == "remux" and _marker(output).sha256 == storage.file_sha256(output)
    assert len(frame_digests(str(output))) == result.frame_count


def test_a_segment_damaged_in_place_is_computed_again_and_one_swapped_for_another_fails_the_join(
    make_video: MakeVideo, tmp_path: Path
) -> None:
    target = make_video(frames=12)
    work_uri, _ = committed_work(str(tmp_path / "root"), target, segment_size=4, **PASSTHROUGH)
    layout = WorkLayout(work_uri)
    folder = Path(storage.local_path(layout.segments_dir) or "")
    markers = {m["index"]: m for m in (json.loads(p.read_text()) for p in folder.glob("*.json"))}
    middle = folder / markers[1]["file"]
    kept = middle.read_bytes()
    middle.write_bytes(kept[:100] + bytes([kept[100] ^ 0xFF]) + kept[101:])  # one bit flipped, same size
    healed = tmp_path / "healed.mp4"
    assert worker.merge(work_uri, target, str(healed)).method == "index"
    assert [d.md5 for d in frame_digests(str(healed))] == [d.md5 for d in frame_digests(target)]
    # Segment 0's file under segment 1's marker, its checksum and size updated to match: its label names frames 0-3.
    # Not damage in storage but a marker that lies about its file: a defect to report, not a segment to compute again.
    marker_path = folder / "00001.1.json"
    middle = folder / json.loads(marker_path.read_text())["file"]
    middle.write_bytes((folder / markers[0]["file"]).read_bytes())
    output = tmp_path / "out" / "result.mp4"
    marker = json.loads(marker_path.read_text())
    marker.update(sha256=storage.file_sha256(middle), size=middle.stat().st_size)
    marker_path.write_text(json.dumps(marker))
    with pytest.raises(InvalidWorkError, match=r"is labelled .*segment 0 frames 0-3.*expected .*segment 1 frames 4-7"):
        worker.merge(work_uri, target, str(output))
    assert not output.parent.exists() or list(output.parent.iterdir()) == []


def test_the_sound_a_worker_stored_in_the_work_is_what_the_join_copies(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=20, audio_rate=48000)
    # A space in the path: the listing and the layout quote a local path differently.
    work_uri, _ = committed_work(str(tmp_path / "work root"), target, segment_size=5, **PASSTHROUGH)
    layout = WorkLayout(work_uri)
    stored = store_sound(layout, target)
    sound = Path(storage.local_path(layout.sound_file) or "")
    assert stored == sound.stat().st_size > 0

    worker.merge(work_uri, target, str(tmp_path / "stored.mp4"))
    assert packet_payloads(str(tmp_path / "stored.mp4")) == packet_payloads(target)
    # The same size, other bytes: the join copies the stored file, not the target's chunks.
    sound.write_bytes(bytes(len(sound.read_bytes())))
    worker.merge(work_uri, target, str(tmp_path / "zeros.mp4"))
    copied = packet_payloads(str(tmp_path / "zeros.mp4"))
    assert copied != packet_payloads(target) and all(set(payload) == {0} for _, payload in copied)
    # A stored file of another size is not the target's sound: the join reads the target.
    sound.write_bytes(b"short")
    worker.merge(work_uri, target, str(tmp_path / "from-target.mp4"))
    assert packet_payloads(str(tmp_path / "from-target.mp4")) == packet_payloads(target)


def test_quicktime_pcm_sound_is_remuxed_not_copied_by_its_one_byte_sample_table(tmp_path: Path) -> None:
    # QuickTime's PCM entries claim 1-byte samples that FFmpeg resizes itself: copying chunks by the table would cut
    # every one short. The join leaves such a target to the remux, which copies every sound packet.
    target = tmp_path / "pcm.mov"
    with av.open(str(target), "w", format="mov") as container:
        video = container.add_stream("libx264", rate=25, options={"preset": "ultrafast", "qp": "0"})
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        sound = container.add_stream("pcm_s16le", rate=48000, layout="stereo")
        for number in range(25):
            image = np.full((48, 64, 3), number * 9, dtype=np.uint8)
            container.mux(video.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
            samples = np.full((1, 2 * 1920), number, dtype=np.int16)
            chunk = av.AudioFrame.from_ndarray(samples, format="s16", layout="stereo")
            chunk.sample_rate, chunk.pts = 48000, number * 1920
            container.mux(sound.encode(chunk))
        container.mux(video.encode(None))
        container.mux(sound.encode(None))
    output = tmp_path / "out.mp4"
    worker.run([], str(target), str(output), str(tmp_path / "work"), segment_size=10, **PASSTHROUGH)
    assert _marker(output).method == "remux"
    assert [p for _, p in packet_payloads(str(output))] and b"".join(p for _, p in packet_payloads(str(output))) == (
        b"".join(p for _, p in packet_payloads(str(target)))
    )
    assert [d.md5 for d in frame_digests(str(output))] == [d.md5 for d in frame_digests(str(target))]


def test_indexes_that_do_not_fit_together_are_refused_for_the_remux(make_video: MakeVideo, tmp_path: Path) -> None:
    target = make_video(frames=12)
    work_uri, spec = committed_work(str(tmp_path / "root"), target, segment_size=4, **PASSTHROUGH)
    layout = WorkLayout(work_uri)
    found = [read_moov(storage.local_path(layout.segment_file(m.file)) or "") for m in committed_markers(spec, layout)]
    movies = [MovieFile(moov, size, parse_movie(moov, size)) for moov, size in (f for f in found if f is not None)]
    whole = read_moov(target)
    assert whole is not None and len(movies) == 3
    target_movie = MovieFile(whole[0], whole[1], parse_movie(*whole))
    pts, time_base = spec.probe.pts, Fraction(spec.probe.time_base)
    assert join_movies(movies, target_movie, [0, 4, 8], pts, time_base).size > 0
    with pytest.raises(UnsupportedLayoutError, match="the indexes do not join"):  # a start past the target's frames
        join_movies(movies, target_movie, [0, 4, 80], pts, time_base)
