"""Lip sync benchmark: CPU ms per 720p frame of the lip syncer on its stand-ins (tests/support/standins_lip_sync.py),
and what prepare spends once per work on a voice, per minute of it: the voice extraction's work around its model
(an identity stand-in: the model's own compute is not measured), the mel spectrogram and the encoded sound.

The stand-ins are a few arithmetic nodes, so inference costs next to nothing: the frame figures are what the engine
does around the model (the ffhq_512 crop, wav2lip's 96 px box and its warp back, edtalk's resizes, the masks, the
paste), the part of the cost this project owns. The faces come from the offline analysis (retinaface_mnet and the
face mesh), run once before the timing. Input: the carphone clip scaled to 720 px high on a 1280x720 canvas; a voice
of white noise at 48 kHz.

    python bench/bench_lip_sync.py [--frames 8] [--voice-seconds 60] [--out bench/results/lip-sync]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(BENCH_DIR))

CASES: tuple[dict[str, Any], ...] = (
    {"lip_syncer_model": "wav2lip_96"},
    {"lip_syncer_model": "wav2lip_gan_96"},
    {"lip_syncer_model": "edtalk_256"},
)
SOUND_ENCODERS = ("aac", "flac", "libopus")


def _timed(work: Any) -> tuple[float, float]:
    began, cpu_began = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - began, time.process_time() - cpu_began


def measure_frames(frame_count: int) -> list[dict[str, Any]]:
    from bench_engine import carphone_frames
    from standins_lip_sync import write_lip_sync_standins
    from voices import write_voice

    from facefusion_provider.engine.processors.chain import build_frame_processor
    from facefusion_provider.engine.processors.lip_syncer import voice_identity
    from facefusion_provider.engine.voice import pack_mel, voice_mel
    from facefusion_provider.media.audio import read_voice_samples
    from facefusion_provider.options import Options

    frames = carphone_frames(frame_count, 1280, 720)
    times = [Fraction(number, 30) for number in range(frame_count)]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        write_lip_sync_standins(Path(folder))
        voice = write_voice(Path(folder) / "voice.wav", 0.0, frame_count / 30 + 1)
        data = pack_mel(voice_mel(read_voice_samples(str(voice), "voice.wav")))
        (Path(folder) / "voice_mel.npy").write_bytes(data)
        identity = voice_identity(str(Path(folder) / "voice_mel.npy"), data, Fraction(30))
        for chosen in CASES:
            options = Options(processors=["lip_syncer"], execution_thread_count=2, **chosen)
            engine = build_frame_processor(options, identity, folder)
            faces = engine.analyse_batch(frames)  # untimed: the analysis is not the processor's
            engine.apply_batch(frames[:1], faces[:1], times=times[:1])  # warm up

            def work(engine: Any = engine, faces: Any = faces) -> None:
                for frame, found, at in zip(frames, faces, times, strict=True):
                    engine.apply_batch([frame], [found], times=[at])

            seconds, cpu = _timed(work)
            results.append(
                {
                    "options": chosen,
                    "faces_per_frame": round(sum(map(len, faces)) / frame_count, 2),
                    "ms_per_frame": round(1000 * seconds / frame_count, 1),
                    "cpu_ms_per_frame": round(1000 * cpu / frame_count, 1),
                }
            )
            print(results[-1], flush=True)
    return results


def measure_voice(voice_seconds: float) -> list[dict[str, Any]]:
    from voices import write_voice

    from facefusion_provider.engine.voice import voice_mel
    from facefusion_provider.engine.voice_extract import extract_voice
    from facefusion_provider.media.audio import encode_sound, read_voice_samples

    results = []
    per_minute = 60.0 / voice_seconds
    with tempfile.TemporaryDirectory() as folder:
        voice = str(write_voice(Path(folder) / "voice.wav", 0.0, voice_seconds))
        samples = read_voice_samples(voice, "voice.wav")

        def extracted() -> Any:
            return extract_voice(samples, lambda parts: parts, 256)  # the stand-in's identity: the FFTs around it

        for step, work in (
            ("decode to 48 kHz stereo", lambda: read_voice_samples(voice, "voice.wav")),
            ("voice extraction around the model (its STFTs, chunks, overlap)", extracted),
            ("mel spectrogram", lambda: voice_mel(samples)),
        ):
            seconds, cpu = _timed(work)
            results.append(
                {
                    "step": step,
                    "s_per_minute": round(seconds * per_minute, 2),
                    "cpu_s_per_minute": round(cpu * per_minute, 2),
                }
            )
            print(results[-1], flush=True)
        for encoder in SOUND_ENCODERS:
            extension = ".m4a"
            path = str(Path(folder) / f"sound-{encoder}{extension}")

            def encode(encoder: str = encoder, path: str = path) -> None:
                encode_sound(
                    voice, "voice.wav", path, encoder=encoder, quality=80, volume=100, start=0.0, duration=voice_seconds
                )

            seconds, cpu = _timed(encode)
            results.append(
                {
                    "step": f"encode {encoder}",
                    "s_per_minute": round(seconds * per_minute, 2),
                    "cpu_s_per_minute": round(cpu * per_minute, 2),
                }
            )
            print(results[-1], flush=True)
    return results


def markdown(frames: list[dict[str, Any]], voice: list[dict[str, Any]], frame_count: int, seconds: float) -> str:
    lines = [
        "# Lip sync on its CPU stand-ins, and a voice's cost in prepare",
        "",
        f"`python bench/bench_lip_sync.py --frames {frame_count} --voice-seconds {seconds:g}` on "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}: {frame_count} frames of "
        "the carphone clip at 1280x720 (one face), one process. The stand-ins are a few arithmetic nodes, so these "
        "figures are the engine's work around the model, not a real network's compute. ms/frame is wall-clock on a "
        "shared machine (2 cores, other work running); CPU ms/frame is the steadier figure.",
        "",
        "| model | faces a frame | ms/frame | CPU ms/frame |",
        "| --- | --- | --- | --- |",
    ]
    for result in frames:
        lines.append(
            f"| {result['options']['lip_syncer_model']} | {result['faces_per_frame']} | {result['ms_per_frame']} | "
            f"{result['cpu_ms_per_frame']} |"
        )
    lines += [
        "",
        f"Once per work, in prepare, for a voice of {seconds:g} s (white noise, 48 kHz mono WAV), scaled to a minute:",
        "",
        "| step | seconds per minute of voice | CPU seconds per minute of voice |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {result['step']} | {result['s_per_minute']} | {result['cpu_s_per_minute']} |" for result in voice]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--voice-seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "lip-sync")
    args = parser.parse_args()
    frames = measure_frames(args.frames)
    voice = measure_voice(args.voice_seconds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"frames": args.frames, "voice_seconds": args.voice_seconds, "results": frames, "voice": voice}
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(frames, voice, args.frames, args.voice_seconds))


if __name__ == "__main__":
    main()
