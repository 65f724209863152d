"""A voice's first bytes against the container its extension names (``validate``'s check, read through the storage
layer): every real file PyAV writes under each audio name passes and decodes; a text file, a truncated one or another
format under that name is refused naming the field and what its bytes are; a file whose header is right but whose
body is missing passes here and is refused by prepare's decode."""

from __future__ import annotations

from pathlib import Path

import pytest
from voices import write_voice

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.audio import read_voice_samples
from facefusion_provider.work.audio_signatures import AUDIO_FORMATS, HEAD_BYTES, check_voice_bytes, id3v2_length
from facefusion_provider.work.run_inputs import AUDIO_EXTENSIONS

# The codec PyAV writes under each audio name (the container follows the extension).
CODECS = {
    ".wav": "pcm_s16le",
    ".flac": "flac",
    ".ogg": "libopus",
    ".oga": "flac",
    ".opus": "libopus",
    ".mp3": "libmp3lame",
    ".aac": "aac",
    ".m4a": "aac",
}
FIELD = "source_uris[1]"


@pytest.fixture(scope="module")
def real_voices(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A second of voice (silence, then noise) under each audio name, as PyAV writes it: the file's bytes."""
    folder = tmp_path_factory.mktemp("voices")
    return {
        extension: write_voice(folder / f"voice{extension}", 0.3, 0.7, codec=codec).read_bytes()
        for extension, codec in CODECS.items()
    }


def _check(tmp_path: Path, name: str, content: bytes) -> list[tuple[int, int]]:
    """Check a file of ``content`` named ``name`` through the storage layer's ranged read; the ranges read."""
    path = tmp_path / name
    path.write_bytes(content)
    reads: list[tuple[int, int]] = []

    def read_range(uri: str, start: int, end: int) -> bytes:
        reads.append((start, end))
        return storage.read_range(uri, start, end)

    check_voice_bytes(path.as_uri(), path.suffix, FIELD, read_range)
    return reads


def _refusal(tmp_path: Path, name: str, content: bytes) -> str:
    with pytest.raises(InvalidMediaError) as raised:
        _check(tmp_path, name, content)
    message = str(raised.value)
    assert message.startswith(f"{FIELD}: {(tmp_path / name).as_uri()} is not the ") and "\n" not in message
    return message


def test_every_audio_name_has_a_signature() -> None:
    assert set(AUDIO_FORMATS) == AUDIO_EXTENSIONS == set(CODECS)


@pytest.mark.parametrize("extension", sorted(CODECS))
def test_a_real_voice_passes_in_one_short_read_and_decodes(
    extension: str, real_voices: dict[str, bytes], tmp_path: Path
) -> None:
    reads = _check(tmp_path, f"voice{extension}", real_voices[extension])
    if extension == ".mp3":  # FFmpeg's MP3 muxer writes an ID3v2 tag first: enough for an MP3
        assert id3v2_length(real_voices[extension]) is not None
    assert reads == [(0, HEAD_BYTES)]
    assert read_voice_samples(str(tmp_path / f"voice{extension}"), "voice").shape[0] > 40000


@pytest.mark.parametrize("extension", sorted(CODECS))
def test_a_text_file_under_an_audio_name_is_refused_naming_what_it_holds(extension: str, tmp_path: Path) -> None:
    message = _refusal(tmp_path, f"message{extension}", b"Hello Ann, happy birthday from all of us!\n")
    assert f"it holds text ('Hello Ann, happy birthda'); a {extension} voice begins with " in message


@pytest.mark.parametrize("extension", sorted(CODECS))
def test_a_truncated_voice_is_refused(extension: str, real_voices: dict[str, bytes], tmp_path: Path) -> None:
    message = _refusal(tmp_path, f"cut{extension}", real_voices[extension][:2])
    assert "it holds only 2 bytes (a truncated file)" in message
    assert "it holds an empty file" in _refusal(tmp_path, f"empty{extension}", b"")


# Each name given a real file of another format: what the refusal says it holds.
WRONG = {
    ".wav": (".ogg", "an Ogg file"),
    ".flac": (".wav", "a WAV file"),
    ".ogg": (".m4a", "an MP4 file"),
    ".oga": (".flac", "a FLAC file"),
    ".opus": (".aac", "an ADTS AAC file"),
    ".mp3": (".aac", "an ADTS AAC file"),
    ".aac": (".wav", "a WAV file"),
    ".m4a": (".opus", "an Ogg file"),
}


@pytest.mark.parametrize("extension", sorted(WRONG))
def test_another_format_under_an_audio_name_is_refused_naming_it(
    extension: str, real_voices: dict[str, bytes], tmp_path: Path
) -> None:
    other, held = WRONG[extension]
    message = _refusal(tmp_path, f"voice{extension}", real_voices[other])
    assert f"is not the {AUDIO_FORMATS[extension].name} file its name says: it holds {held};" in message


def test_an_image_or_unknown_bytes_under_an_audio_name_are_named(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(24)
    assert "it holds a PNG image;" in _refusal(tmp_path, "face.wav", png)
    assert "it holds the bytes 00 01 02 03 04 05 06 07;" in _refusal(tmp_path, "noise.m4a", bytes(range(40)))


def test_an_mp3_of_bare_frames_passes_and_adts_frames_under_mp3_do_not(
    real_voices: dict[str, bytes], tmp_path: Path
) -> None:
    tagged = real_voices[".mp3"]
    bare = tagged[id3v2_length(tagged) or 0 :]
    assert bare[0] == 0xFF
    assert _check(tmp_path, "bare.mp3", bare) == [(0, HEAD_BYTES)]
    assert read_voice_samples(str(tmp_path / "bare.mp3"), "bare").shape[0] > 40000
    assert "it holds an MP3 file;" in _refusal(tmp_path, "bare.aac", bare)


def test_a_voice_behind_an_id3_tag_is_looked_for_after_the_tag(real_voices: dict[str, bytes], tmp_path: Path) -> None:
    tag = real_voices[".mp3"][: id3v2_length(real_voices[".mp3"])]
    assert _check(tmp_path, "tagged.flac", tag + real_voices[".flac"]) == [
        (0, HEAD_BYTES),
        (len(tag), len(tag) + HEAD_BYTES),
    ]
    assert read_voice_samples(str(tmp_path / "tagged.flac"), "tagged").shape[0] > 40000
    message = _refusal(tmp_path, "tagged.wav", tag + b"not a wave at all, only words")
    assert f"it holds text ('not a wave at all, only ') after {len(tag)} bytes of ID3v2 tags;" in message


@pytest.mark.parametrize(("extension", "kept"), [(".wav", 44), (".flac", 42)])
def test_a_right_header_without_its_body_passes_here_and_prepare_refuses_it(
    extension: str, kept: int, real_voices: dict[str, bytes], tmp_path: Path
) -> None:
    _check(tmp_path, f"header{extension}", real_voices[extension][:kept])
    with pytest.raises(InvalidMediaError, match=r"^source\[1\] header"):
        read_voice_samples(str(tmp_path / f"header{extension}"), f"source[1] header{extension}")
