"""Merge to S3 over a limited link: the output's upload overlaps the remux and the segment downloads.

A work's segments and its target sit on an S3 server on loopback (moto, in its own process) behind a proxy that limits
each direction to ``--mb-per-s`` (full duplex, shared by every connection, as a pod's network interface). The same work
is merged by ``facefusion-worker merge`` twice over: once to a local file, once to S3, where the MP4's media data goes
up in parts while the muxer writes it (``output.publish``). The difference is what publishing to S3 adds to a merge;
the same link carrying the finished output alone is what a merge that uploads afterwards would add. Frames are noise
coded losslessly, so the bytes, not the encoder, set the pace.

    python bench/bench_publish.py                  # writes bench/results/publish.json and bench/results/publish.md
    python bench/bench_publish.py --frames 120 --mb-per-s 20 --runs 1 --out /tmp/publish
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # synth, readback, demo
sys.path.insert(0, str(REPO / "tests" / "integration" / "s3"))  # the tests' S3 server and proxy

from s3_servers import FaultyProxy, MotoServer  # noqa: E402
from synth import VideoSpec, write_video  # noqa: E402
from worker_runs import run_worker, write_report  # noqa: E402

from facefusion_provider import storage  # noqa: E402
from facefusion_provider.options import Options  # noqa: E402
from facefusion_provider.work.ids import work_id  # noqa: E402
from facefusion_provider.work.layout import WorkLayout, output_marker_uri  # noqa: E402

PARTS_LINE = re.compile(r"(\d+) parts of (\d+) MiB, (\d+) of them uploaded while the muxer wrote")


def make_target(path: Path, frames: int) -> None:
    """Noise at 640x360, coded losslessly (about 0.7 MB a frame), with an AAC track."""
    rng = np.random.default_rng(5)
    images = (rng.integers(0, 256, (360, 640, 3), dtype=np.uint8) for _ in range(frames))
    spec = VideoSpec(640, 360, Fraction(25), codec_options={"preset": "ultrafast", "qp": "0"}, audio_rate=48000)
    write_video(str(path), spec, images)


def _merged(work: str, target: str, output: str, env: dict[str, str], runs: int) -> tuple[float, str, dict[str, Any]]:
    """The median seconds of ``runs`` merges of ``work`` into ``output`` (it and its marker deleted before each), and
    the last merge's log and stage timings."""
    seconds, log, timings = [], "", {}
    for _ in range(runs):
        for uri in (output, output_marker_uri(output)):
            storage.delete(uri)
        took, out, log = run_worker(["merge", "--work-uri", work, "--target", target, "--output", output], env)
        seconds.append(took)
        timings = json.loads(out.strip().splitlines()[-1])["timings"]
    return statistics.median(seconds), log, timings


def measure(frames: int, segment_size: int, mb_per_s: float, runs: int, scratch: Path) -> dict[str, Any]:
    server = MotoServer()
    proxy = FaultyProxy(server.port, bytes_per_second=mb_per_s * 1e6)
    try:
        client = server.client()
        client.create_bucket(Bucket="work")
        make_target(scratch / "target.mp4", frames)
        client.upload_file(str(scratch / "target.mp4"), "work", "in/target.mp4")
        s3 = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "FACEFUSION_S3_ENDPOINT_URL": proxy.url,
        }
        env = {**os.environ, **s3}
        with mock.patch.dict(os.environ, s3):  # this process reads S3 too: the target's identity, the deletes
            target = "s3://work/in/target.mp4"
            options = Options(processors=[], output_video_quality=100, segment_size=segment_size)
            work = WorkLayout.under("s3://work/bench", work_id(storage.content_id(target), [], options)).work_uri
            flags = ["--processors", "--output-video-quality", "100", "--segment-size", str(segment_size)]
            _, prepared, _ = run_worker(["prepare", "--work-uri", work, "--target", target, *flags], env)
            segments = int(json.loads(prepared.strip().splitlines()[-1])["segments"])
            run_worker(["swap-span", "--work-uri", work, "--target", target, "--segments", f"0:{segments}"], env)
            # One shared work, two runs' outputs: both merges read the same segments and target over the link.
            merges = {
                where: _merged(work, target, output, env, runs)
                for where, output in (
                    ("s3", "s3://work/out/bench.mp4"),
                    ("local", (scratch / "out" / "bench.mp4").as_uri()),
                )
            }
        segments_key = WorkLayout(work).segments_dir.removeprefix("s3://work/") + "/"
        files = sorted(
            item["Key"]
            for item in client.list_objects_v2(Bucket="work", Prefix=segments_key)["Contents"]
            if item["Key"].endswith(".mp4")
        )
        parts = PARTS_LINE.search(merges["s3"][1])
        output_bytes = client.head_object(Bucket="work", Key="out/bench.mp4")["ContentLength"]
        segment_bytes = sum(client.head_object(Bucket="work", Key=key)["ContentLength"] for key in files)
        client.download_file("work", "out/bench.mp4", str(scratch / "out.mp4"))
        started = time.perf_counter()
        server.client(endpoint=proxy.url).upload_file(str(scratch / "out.mp4"), "work", "out/again.mp4")
        upload_s = time.perf_counter() - started
    finally:
        proxy.stop()
        server.stop()
    return {
        "frames": frames,
        "segments": len(files),
        "segment_bytes": segment_bytes,
        "output_bytes": output_bytes,
        "merge_to_s3_s": round(merges["s3"][0], 2),
        "merge_to_local_s": round(merges["local"][0], 2),
        "output_upload_alone_s": round(upload_s, 2),
        "parts": int(parts.group(1)) if parts else None,
        "part_mib": int(parts.group(2)) if parts else None,
        "parts_while_writing": int(parts.group(3)) if parts else None,
        "last_merge_stages_s": {where: merged[2] for where, merged in merges.items()},
    }


def markdown(report: dict[str, Any]) -> str:
    row, load = report["result"], report["machine"]["load_average_1m"]
    added = row["merge_to_s3_s"] - row["merge_to_local_s"]
    return "\n".join(
        [
            "# Merge to S3 over a limited link: the output uploads while it is written",
            "",
            f"`{report['command']}` on {report['machine']['cpus']} CPUs; S3 (moto) behind a link of "
            f"{report['mb_per_s']:.0f} MB/s each way; each merge the median of {report['runs']}. Load average (1 min) "
            f"{load['before']} before, {load['after']} after (other work shares these cores).",
            "",
            "| frames | segments | segment bytes | output bytes | merge to a local file s | merge to S3 s | the output's "
            "upload alone s | parts (MiB) | uploaded while writing |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {row['frames']} | {row['segments']} | {row['segment_bytes']:,} | {row['output_bytes']:,} "
            f"| {row['merge_to_local_s']} | {row['merge_to_s3_s']} | {row['output_upload_alone_s']} "
            f"| {row['parts']} ({row['part_mib']}) | {row['parts_while_writing']} |",
            "",
            f"Both merges read the same segments (one shared work) and target from S3 over the link. Publishing to S3 instead of a local file "
            f"added {added:.2f} s to the merge; uploading the finished output alone takes "
            f"{row['output_upload_alone_s']} s, which a merge that uploads afterwards would add whole. "
            f"{row['parts_while_writing']} of the {row['parts']} parts went up while the muxer was still writing; "
            "the head (with the moov) and the last part go up after it.",
            "",
            "Stages of the last merge of each kind (the worker's own timings, s; the process's start and imports are "
            "in the totals above, not here):",
            "",
            *(
                f"- to {where}: " + ", ".join(f"{name} {value}" for name, value in stages.items())
                for where, stages in row["last_merge_stages_s"].items()
            ),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=300, help="frames of the target (about 0.7 MB each)")
    parser.add_argument("--segment-size", type=int, default=50, help="frames per segment")
    parser.add_argument("--mb-per-s", type=float, default=40.0, help="the link's rate each way")
    parser.add_argument("--runs", type=int, default=3, help="merges of each kind; the median counts")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as scratch:
        result = measure(args.frames, args.segment_size, args.mb_per_s, args.runs, Path(scratch))
    load = {"before": round(load_before, 1), "after": round(os.getloadavg()[0], 1)}
    report = {
        "command": shlex.join(["python", "bench/bench_publish.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_average_1m": load},
        "mb_per_s": args.mb_per_s,
        "runs": args.runs,
        "result": result,
    }
    write_report(args.out, "publish", report, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
