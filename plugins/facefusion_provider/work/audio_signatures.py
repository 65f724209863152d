"""Whether a voice's first bytes are the container its extension names, read without decoding (no PyAV: ``validate``
runs on the Airflow side): a text file, a truncated one or another format under an audio name is refused there, naming
the field and what its bytes are. A file that passes may still fail to decode; ``prepare`` refuses that one.

The signatures, from each format's specification: WAV is RIFF (``RIFF``, or big-endian ``RIFX``; ``RF64`` / ``BW64``
with a ``ds64`` chunk for files over 4 GiB), its form type ``WAVE`` at byte 8; FLAC (RFC 9639) ``fLaC`` then the
STREAMINFO block's header (type 0, length 34); Ogg (RFC 3533) the capture pattern ``OggS`` and stream structure
version 0; MP3 an MPEG audio frame header (ISO/IEC 11172-3: 11 sync bits, then a version, layer, bitrate and sampling
rate that are not the reserved values); raw AAC an ADTS header (ISO/IEC 14496-3: 12 sync bits, layer 00, a sampling
frequency index below 13); .m4a an ISO base media file (ISO/IEC 14496-12) whose first box is ``ftyp``, or an older
QuickTime file that starts with its movie, media data or a free box. Any of them may begin with ID3v2 tags, which FFmpeg
reads past before any demuxer: the format's own bytes are looked for after them, except for MP3 and ADTS, whose
demuxers search for the first frame past a tag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from facefusion_provider.exceptions import InvalidMediaError

HEAD_BYTES = 64  # read of each voice at validate: enough for every signature and for naming what a file holds instead
ID3_HEADER_BYTES = 10
ID3_TAGS_READ = 4  # ID3v2 tags followed through; more than this and the file is let through to prepare
MP4_FIRST_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide")
TEXT_SHOWN = 24  # characters of a text file quoted in a message


def _wav(head: bytes) -> bool:
    if head[8:12] != b"WAVE":
        return False
    return head[:4] in (b"RIFF", b"RIFX") or (head[:4] in (b"RF64", b"BW64") and head[12:16] == b"ds64")


def _flac(head: bytes) -> bool:
    return head[:4] == b"fLaC" and head[4] & 0x7F == 0 and head[5:8] == b"\x00\x00\x22"


def _ogg(head: bytes) -> bool:
    return head[:4] == b"OggS" and head[4] == 0


def _mpeg_audio_frame(head: bytes) -> bool:
    word = int.from_bytes(head[:4], "big")
    return (
        word >> 21 == 0x7FF  # 11 sync bits
        and (word >> 19) & 3 != 1  # version: 01 is reserved
        and (word >> 17) & 3 != 0  # layer: 00 is reserved (and is what ADTS writes there)
        and (word >> 12) & 0xF != 0xF  # bitrate index 1111 is invalid
        and (word >> 10) & 3 != 3  # sampling rate index 11 is reserved
    )


def _adts(head: bytes) -> bool:
    word = int.from_bytes(head[:3], "big")
    return word >> 12 == 0xFFF and (word >> 9) & 3 == 0 and (word >> 2) & 0xF < 13


def _mp4(head: bytes) -> bool:
    return head[4:8] in MP4_FIRST_BOXES


@dataclass(frozen=True)
class AudioFormat:
    """A container a voice's extension names, as its first bytes show it."""

    name: str
    what: str  # the name with its article, for messages
    signature: str  # how its first bytes look, for messages
    min_bytes: int  # bytes the check needs; fewer is a truncated file
    matches: Callable[[bytes], bool]
    frames_follow_tag: bool = False  # the demuxer searches for its first frame past an ID3v2 tag


WAV = AudioFormat("WAV", "a WAV file", "RIFF....WAVE", 12, _wav)
FLAC = AudioFormat("FLAC", "a FLAC file", "fLaC and a STREAMINFO block", 8, _flac)
OGG = AudioFormat("Ogg", "an Ogg file", "OggS", 5, _ogg)
MP3 = AudioFormat(
    "MP3", "an MP3 file", "an ID3v2 tag or an MPEG audio frame header (0xFFE sync)", 4, _mpeg_audio_frame, True
)
ADTS = AudioFormat("ADTS AAC", "an ADTS AAC file", "an ID3v2 tag or an ADTS header (0xFFF sync)", 3, _adts, True)
MP4 = AudioFormat(
    "MP4 audio", "an MP4 file", "an 'ftyp' box (or an older QuickTime file's moov, mdat or free box)", 8, _mp4
)

# What each audio extension holds: the extensions ``source_uris`` accepts as voices.
AUDIO_FORMATS: dict[str, AudioFormat] = {
    ".wav": WAV,
    ".flac": FLAC,
    ".ogg": OGG,
    ".oga": OGG,
    ".opus": OGG,
    ".mp3": MP3,
    ".aac": ADTS,
    ".m4a": MP4,
}


def id3v2_length(head: bytes) -> int | None:
    """The length of the ID3v2 tag ``head`` starts with (header, body, footer), or None without one."""
    if len(head) < ID3_HEADER_BYTES or head[:3] != b"ID3" or 0xFF in head[3:5] or any(b >= 0x80 for b in head[6:10]):
        return None
    body = 0
    for byte in head[6:10]:  # a "syncsafe" integer: 7 bits a byte
        body = body << 7 | byte
    footer = ID3_HEADER_BYTES if head[5] & 0x10 else 0
    return ID3_HEADER_BYTES + body + footer


def describe(head: bytes) -> str:
    """What the first bytes of a file are, in words: a known format, text, or the bytes in hex."""
    for known in (WAV, FLAC, OGG, MP4, ADTS, MP3):
        if len(head) >= known.min_bytes and known.matches(head):
            return known.what
    if id3v2_length(head) is not None:
        return "an ID3v2 tag"
    others = {b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"GIF8": "a GIF image"}
    others |= {b"\x1a\x45\xdf\xa3": "a Matroska/WebM file", b"%PDF": "a PDF document"}
    for magic, name in others.items():
        if head.startswith(magic):
            return name
    if head[:4] in (b"RIFF", b"RIFX") and len(head) >= 12:
        return f"a RIFF file of form {head[8:12].decode('latin-1')!r}, not WAVE"
    text = _text(head)
    if text is not None:
        return f"text ({text[:TEXT_SHOWN]!r})"
    return "the bytes " + head[:8].hex(" ")


def _text(head: bytes) -> str | None:
    """``head`` as text when it is printable UTF-8 (a character cut by the read's end aside), else None."""
    for cut in range(4):
        try:
            text = head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return text if text.strip() and all(c.isprintable() or c.isspace() for c in text) else None
    return None


def check_voice_bytes(uri: str, extension: str, field: str, read_range: Callable[[str, int, int], bytes]) -> None:
    """Refuse a voice whose first bytes are not the container its extension names (``InvalidMediaError`` naming
    ``field``). ``read_range(uri, start, end)`` returns bytes ``[start, end)`` of the file (fewer at its end)."""
    audio = AUDIO_FORMATS[extension]
    start = 0
    head = read_range(uri, 0, HEAD_BYTES)
    for _ in range(ID3_TAGS_READ):
        tag = id3v2_length(head)
        if tag is None:
            break
        if audio.frames_follow_tag:
            return
        start += tag
        head = read_range(uri, start, start + HEAD_BYTES)
    if id3v2_length(head) is not None:
        return  # more tags than are followed here: prepare's decode decides
    if len(head) >= audio.min_bytes and audio.matches(head):
        return
    where = f" after {start} bytes of ID3v2 tags" if start else ""
    if not head:
        found = f"nothing{where} (a truncated file)" if start else "an empty file"
    elif len(head) < audio.min_bytes:
        found = f"only {len(head)} bytes{where} (a truncated file): {describe(head)}"
    else:
        found = describe(head) + where
    raise InvalidMediaError(
        f"{field}: {uri} is not the {audio.name} file its name says: it holds {found}; a {extension} voice begins "
        f"with {audio.signature}"
    )
