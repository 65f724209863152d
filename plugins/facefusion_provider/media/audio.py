"""A voice source read whole: decoded by PyAV (WAV, MP3, AAC, Opus, FLAC, ...) and resampled by FFmpeg's own
resampler to what FaceFusion reads its voices as (48 kHz, 16-bit, stereo), so the mel spectrogram starts from the same
samples."""

from __future__ import annotations

from fractions import Fraction

import av
import av.audio.stream
import numpy as np
import numpy.typing as npt

from facefusion_provider.exceptions import InvalidMediaError
from facefusion_provider.media.containers import fraction_text
from facefusion_provider.types import StreamInfo

VOICE_SAMPLE_RATE = 48000
VOICE_LAYOUT = "stereo"
Samples = npt.NDArray[np.int16]  # (n, 2): interleaved stereo, 16-bit


def read_voice_samples(path: str, name: str) -> Samples:
    """Every sample of the first audio stream of ``path`` at 48 kHz, 16-bit stereo; ``name`` (what the user gave)
    appears in every error: a file that does not open, has no audio, or holds no sound at all."""
    try:
        with av.open(path, mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise InvalidMediaError(f"{name}: has no audio stream; a voice source must be a sound file")
            stream: av.audio.stream.AudioStream = container.streams.audio[0]
            resampler = av.AudioResampler(format="s16", layout=VOICE_LAYOUT, rate=VOICE_SAMPLE_RATE)
            chunks = [
                resampled.to_ndarray().reshape(-1, 2)
                for frame in container.decode(stream)
                for resampled in resampler.resample(frame)
            ]
            chunks += [resampled.to_ndarray().reshape(-1, 2) for resampled in resampler.resample(None)]
    except av.FFmpegError as error:
        reason = str(getattr(error, "strerror", None) or error).strip()
        raise InvalidMediaError(
            f"{name}: not a readable audio file ({reason}); it may be truncated or corrupt"
        ) from None
    samples = np.concatenate(chunks) if chunks else np.zeros((0, 2), np.int16)
    if not samples.size:
        raise InvalidMediaError(f"{name}: holds no sound (no audio samples decode)")
    return np.ascontiguousarray(samples, np.int16)


# --- the output's sound, encoded once per work ----------------------------------------------------------------------

# Each encoder's sample format here.
SOUND_FORMATS = {"flac": "s16", "aac": "fltp", "libmp3lame": "fltp", "libopus": "flt", "pcm_s16le": "s16"}
SOUND_FORMATS["pcm_s32le"] = "s32"
MP4_SOUND_ENCODERS = frozenset({"aac", "libmp3lame", "libopus", "flac"})  # stored as .m4a; the rest as .mka
QP2LAMBDA = 118  # FFmpeg's FF_QP2LAMBDA: ``-q:a q`` is a global quality of q x this
QSCALE_RANGES = {"aac": (0.1, 2.0), "libmp3lame": (9.0, 0.0)}  # FaceFusion's -q:a for quality 0 and 100
OPUS_KBPS = (64, 256)  # FaceFusion's -b:a for quality 0 and 100
DEFAULT_SOUND_RATE = 48000


def sound_extension(encoder: str) -> str:
    return ".m4a" if encoder in MP4_SOUND_ENCODERS else ".mka"


def _quality_settings(stream: av.audio.stream.AudioStream, encoder: str, quality: int) -> None:
    """FaceFusion's quality mapping: aac's and mp3's ``-q:a`` (a global quality in FFmpeg's lambda units), opus's
    ``-b:a``; flac and PCM are lossless."""
    if encoder in QSCALE_RANGES:
        low, high = QSCALE_RANGES[encoder]
        scale = round(low + (high - low) * quality / 100, 1 if encoder == "aac" else 0)
        stream.codec_context.qscale = True
        stream.codec_context.global_quality = round(scale * QP2LAMBDA)
    elif encoder == "libopus":
        stream.codec_context.bit_rate = round(OPUS_KBPS[0] + (OPUS_KBPS[1] - OPUS_KBPS[0]) * quality / 100) * 1000


def encode_sound(
    source: str,
    name: str,
    output_path: str,
    *,
    encoder: str,
    quality: int,
    volume: int,
    start: float,
    duration: float,
) -> int:
    """The first audio stream of ``source`` from ``start`` seconds for at most ``duration`` (FaceFusion's ``-t``: a
    longer sound is cut, a shorter one stays shorter), scaled by ``volume`` percent, encoded by ``encoder`` into
    ``output_path`` (its extension: ``sound_extension``), starting at time 0. Returns the samples written; 0 (and no
    file) where ``source`` has no sound."""
    with av.open(source, mode="r", metadata_errors="ignore") as container:
        if not container.streams.audio:
            return 0
        stream: av.audio.stream.AudioStream = container.streams.audio[0]
        codec = av.codec.Codec(encoder, "w")
        rates = codec.audio_rates
        rate = stream.rate if not rates or stream.rate in rates else DEFAULT_SOUND_RATE
        layout = "mono" if stream.channels == 1 else "stereo"
        with av.open(output_path, mode="w", format="mp4" if encoder in MP4_SOUND_ENCODERS else "matroska") as output:
            sound = output.add_stream(encoder, rate=rate)
            assert isinstance(sound, av.audio.stream.AudioStream)
            sound.layout = layout
            _quality_settings(sound, encoder, quality)
            decoded = av.AudioResampler(format="fltp", layout=layout, rate=rate)
            encoded = av.AudioResampler(
                format=SOUND_FORMATS[encoder],
                layout=layout,
                rate=rate,
                frame_size=sound.codec_context.frame_size or None,
            )
            first, wanted = round(start * rate), round(duration * rate)
            position, written = None, 0
            try:
                for frame in (*container.decode(stream), None):
                    for chunk in decoded.resample(frame):
                        samples = chunk.to_ndarray()
                        if position is None:
                            position = round((chunk.time or 0.0) * rate)
                        keep = samples[:, max(0, first - position) : max(0, first + wanted - position)]
                        position += samples.shape[1]
                        if keep.shape[1] == 0 or written >= wanted:
                            continue
                        keep = np.clip(keep[:, : wanted - written] * (volume / 100.0), -1.0, 1.0).astype(np.float32)
                        piece = av.AudioFrame.from_ndarray(np.ascontiguousarray(keep), format="fltp", layout=layout)
                        piece.sample_rate, piece.pts, piece.time_base = rate, written, Fraction(1, rate)
                        written += keep.shape[1]
                        for ready in encoded.resample(piece):
                            output.mux(sound.encode(ready))
                for ready in encoded.resample(None):
                    output.mux(sound.encode(ready))
                output.mux(sound.encode(None))
            except av.FFmpegError as error:
                reason = str(getattr(error, "strerror", None) or error).strip()
                raise InvalidMediaError(f"{name}: its sound could not be encoded ({reason})") from None
    return written


def sound_streams(path: str) -> list[StreamInfo]:
    """The audio streams of an encoded sound file, as a probe lists the streams a merge copies."""
    with av.open(path, mode="r") as container:
        return [
            StreamInfo(index=stream.index, kind="audio", codec=stream.codec_context.name, time_base=fraction_text(tb))
            for stream in container.streams.audio
            if (tb := stream.time_base) is not None
        ]
