"""One decoder truth: for every kind of target, the probe's timestamps, a span's seek-decode and the whole-file decode
agree on every frame (timestamp and pixels), or prepare's seek check refuses the target with a clear message."""

from __future__ import annotations

import hashlib
from fractions import Fraction

import pytest
from readback import frame_digests

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.decode import check_seek_decode, decode_frames
from facefusion_provider.media.probe import probe_video

from .conftest import MakeVideo

FRAMES = 24
SHORT_GOP = {"preset": "ultrafast", "bf": "2", "g": "8", "keyint_min": "8", "sc_threshold": "0"}
SVT_AV1 = {"preset": "12", "crf": "45", "g": "8"}
VP9 = {"deadline": "realtime", "cpu-used": "8", "g": "8"}
VP9_HIDDEN_ALTREF = {"deadline": "good", "cpu-used": "8", "auto-alt-ref": "1", "lag-in-frames": "16", "g": "12"}
X265 = {"preset": "ultrafast", "x265-params": "log-level=error:bframes=3:keyint=8:min-keyint=8:scenecut=0"}
VFR = {"time_base": Fraction(1, 1000), "frame_durations": (33, 50, 17, 66)}

KINDS: dict[str, tuple[str, dict[str, object]]] = {
    "av1-mp4": ("mp4", {"codec": "libsvtav1", "codec_options": SVT_AV1, "container_format": "mp4"}),
    "av1-mkv": ("mkv", {"codec": "libsvtav1", "codec_options": SVT_AV1, "container_format": "matroska"}),
    "vp9-webm": ("webm", {"codec": "libvpx-vp9", "codec_options": VP9, "container_format": "webm"}),
    "vp9-hidden-altref": (
        "webm",
        {"codec": "libvpx-vp9", "codec_options": VP9_HIDDEN_ALTREF, "container_format": "webm"},
    ),
    "hevc-bframes-mp4": ("mp4", {"codec": "libx265", "codec_options": X265, "container_format": "mp4"}),
    "h264-10bit": ("mp4", {"pix_fmt": "yuv420p10le", "codec_options": SHORT_GOP, "container_format": "mp4"}),
    "hevc-10bit-mkv": (
        "mkv",
        {"codec": "libx265", "pix_fmt": "yuv420p10le", "codec_options": X265, "container_format": "matroska"},
    ),
    "rotated-90": ("mp4", {"rotation": 90, "codec_options": SHORT_GOP, "container_format": "mp4"}),
    "vfr-mp4": ("mp4", {**VFR, "codec_options": SHORT_GOP, "container_format": "mp4"}),
    "vfr-mkv": ("mkv", {**VFR, "codec_options": SHORT_GOP, "container_format": "matroska"}),
}


def _seek_digests(path: str, start: int, end: int) -> list[tuple[int | None, str]]:
    probe = probe_video(path, path)
    frames = decode_frames(path, probe, start, end, path)
    return [(frame.pts, hashlib.md5(frame.to_ndarray().tobytes()).hexdigest()) for frame in frames]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_probe_seek_and_whole_decode_agree_on_every_frame(make_video: MakeVideo, kind: str) -> None:
    extension, fields = KINDS[kind]
    path = make_video(frames=FRAMES, name=f"{kind}.{extension}", **fields)
    probe = probe_video(path, path)
    whole = [(digest.pts, digest.md5) for digest in frame_digests(path)]
    assert probe.frame_count == len(whole) == FRAMES
    assert probe.pts == [pts for pts, _ in whole]
    for start in range(FRAMES):  # a span may start at any frame: every start, three frames each
        end = min(start + 3, FRAMES)
        assert _seek_digests(path, start, end) == whole[start:end], f"{kind}: frames {start}-{end - 1}"
    check_seek_decode(path, probe, [0, 9, 17, FRAMES - 1], path)


def test_av1_span_from_the_middle_decodes_like_the_whole_file(make_video: MakeVideo) -> None:
    # issue 28: "frame 17 should have pts 8704, the decoder gave 9216" while the whole-file decode succeeded
    path = make_video(frames=FRAMES, name="av1.mp4", codec="libsvtav1", codec_options=SVT_AV1, container_format="mp4")
    assert probe_video(path, path).codec == "libdav1d"
    whole = [(digest.pts, digest.md5) for digest in frame_digests(path)]
    assert _seek_digests(path, 17, FRAMES) == whole[17:]


def test_a_target_whose_seek_disagrees_with_the_probe_is_refused_with_a_clear_message(make_video: MakeVideo) -> None:
    path = make_video(frames=FRAMES, codec_options=SHORT_GOP)
    probe = probe_video(path, path)
    shifted = probe.model_copy(update={"pts": [pts + 1 for pts in probe.pts]})  # an index that lies about the frames
    with pytest.raises(InvalidMediaError) as refused:
        check_seek_decode(path, shifted, [0, 12], path)
    message = str(refused.value)
    assert message.startswith(f"{path}: decoding from frame 12 by seek does not give the frames the probe lists")
    assert "h264 video in mov,mp4" in message and "re-encode it" in message
