"""S3 input benchmark: what each chunk reads of the target on S3, by ranged reads and with the node-local ETag cache.

A 720p clip (keyframe every 2 s) goes to an S3 server on loopback (moto, in its own process) behind a proxy that counts
every byte of every answer. ``prepare`` runs once; then every chunk runs as its own ``facefusion-worker swap-chunk``
process, as on the local backend, three ways: target as a local file (baseline), ranged reads from S3 (default), and
``FACEFUSION_INPUT_CACHE_DIR`` set (the node downloads the target once). Frames pass through (``processors=[]``), so
the numbers are I/O and decode, not inference. Loopback has no latency, so bytes are the real measure; the model in
the results adds a stated network cost to say where the cache pays.

    python bench/bench_s3.py                     # writes bench/results/s3.json and bench/results/s3.md
    python bench/bench_s3.py --seconds 4 --blocks 1024 --out /tmp/s3bench
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests" / "integration" / "s3"))  # the tests' S3 server and counting proxy

from s3_servers import FaultyProxy, MotoServer  # noqa: E402
from worker_runs import run_worker, write_report  # noqa: E402

from facefusion_provider.media.synth import VideoSpec, pattern_frames, write_video  # noqa: E402

# Stated network model for the "where the cache pays" estimate (S3 in-region, one connection).
REQUEST_LATENCY_S = 0.03
BANDWIDTH_BYTES_S = 90e6


def make_target(path: Path, seconds: int, fps: int, gop: int) -> None:
    spec = VideoSpec(
        width=1280,
        height=720,
        frame_rate=Fraction(fps),
        codec_options={"preset": "ultrafast", "crf": "26", "g": str(gop)},
    )
    write_video(str(path), spec, pattern_frames(seconds * fps, 1280, 720, seed=3))


def target_traffic(proxy: FaultyProxy, key: str) -> tuple[int, int]:
    """(bytes, GET requests) of the target fetched since the proxy's log was last cleared."""
    gets = [e for e in proxy.exchanges() if e.method == "GET" and e.path.split("?")[0].endswith(key)]
    return sum(e.body_bytes for e in gets), len(gets)


def measure_mode(
    mode: str, *, target: str, key: str, face: str, env: dict[str, str], proxy: FaultyProxy, chunk: int, scratch: Path
) -> dict[str, Any]:
    """Prepare a job (its own folder) and run every chunk as its own process; what each read of the target."""
    env = dict(env)
    if mode == "node_cache":
        env["FACEFUSION_INPUT_CACHE_DIR"] = str(scratch / "cache")
    if mode.startswith("ranged_reads_"):
        env["FACEFUSION_S3_READ_BLOCK_BYTES"] = str(int(mode.rsplit("_", 1)[1].removesuffix("KiB")) * 1024)
    job, output = f"s3://work/bench/{mode}", f"s3://work/bench/{mode}-out.mp4"
    proxy.forget_exchanges()
    args = ["--job-uri", job, "--source", face, "--target", target, "--output", output]
    seconds, stdout, _ = run_worker(["prepare", *args, "--processors", "--chunk-size", str(chunk)], env)
    fetched, requests = target_traffic(proxy, key)
    prepare = {"seconds": seconds, "target_bytes": fetched, "target_requests": requests}
    rows = []
    for item in json.loads(stdout.strip().splitlines()[-1])["chunks"]:
        proxy.forget_exchanges()
        seconds, _, _ = run_worker(["swap-chunk", "--job-uri", job, "--index", str(item["index"])], env)
        fetched, requests = target_traffic(proxy, key)
        rows.append(
            {
                "index": item["index"],
                "frames": item["end"] - item["start"],
                "seconds": seconds,
                "target_bytes": fetched,
                "target_requests": requests,
            }
        )
    return {"mode": mode, "prepare": prepare, "chunks": rows}


def summarise(result: dict[str, Any], size: int) -> dict[str, Any]:
    rows = result["chunks"]
    total_bytes = sum(r["target_bytes"] for r in rows)
    requests = sum(r["target_requests"] for r in rows)
    prepare = result["prepare"]
    return {
        "mode": result["mode"],
        "prepare_target_bytes": prepare["target_bytes"],
        "chunks": len(rows),
        "seconds_total": round(sum(r["seconds"] for r in rows), 2),
        "target_bytes_total": total_bytes,
        "target_bytes_per_chunk_mean": round(total_bytes / len(rows)),
        "target_requests_total": requests,
        "fraction_of_file_per_chunk": round(total_bytes / len(rows) / size, 3),
        "modelled_network_s": round(requests * REQUEST_LATENCY_S + total_bytes / BANDWIDTH_BYTES_S, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=12, help="length of the 720p clip")
    parser.add_argument("--fps", type=int, default=25)
    parser.add_argument("--gop", type=int, default=50, help="frames between keyframes")
    parser.add_argument("--chunk", type=int, default=50, help="frames per chunk")
    parser.add_argument(
        "--blocks", type=int, nargs="+", default=[4096, 1024, 256], help="ranged-read block sizes to try, in KiB"
    )
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="s3bench-"))
    clip, face = scratch / "target.mp4", scratch / "face.png"
    make_target(clip, args.seconds, args.fps, args.gop)
    face.write_bytes(b"\x89PNG\r\n\x1a\n")  # never decoded: processors=[] needs no identity
    size = clip.stat().st_size

    moto = MotoServer()
    proxy = FaultyProxy(moto.port)
    try:
        client = moto.client()
        for bucket in ("videos", "work"):
            client.create_bucket(Bucket=bucket)
        client.upload_file(str(clip), "videos", "in/target.mp4")
        client.upload_file(str(face), "videos", "faces/face.png")
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "FACEFUSION_S3_ENDPOINT_URL": proxy.url,
        }

        def measure(mode: str, target: str, key: str, source: str) -> dict[str, Any]:
            return measure_mode(
                mode, target=target, key=key, face=source, env=env, proxy=proxy, chunk=args.chunk, scratch=scratch
            )

        s3_face = "s3://videos/faces/face.png"
        results = [measure("local_file", str(clip), "target.mp4", str(face))]
        for mode in (*(f"ranged_reads_{size}KiB" for size in args.blocks), "node_cache"):
            results.append(measure(mode, "s3://videos/in/target.mp4", "in/target.mp4", s3_face))
    finally:
        proxy.stop()
        moto.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    summary = [summarise(result, size) for result in results]
    command = "python bench/bench_s3.py " + shlex.join(sys.argv[1:])
    report = {
        "command": command.strip(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "clip": {
            "width": 1280,
            "height": 720,
            "seconds": args.seconds,
            "fps": args.fps,
            "gop": args.gop,
            "bytes": size,
            "chunk_frames": args.chunk,
        },
        "network_model": {"request_latency_s": REQUEST_LATENCY_S, "bandwidth_bytes_per_s": BANDWIDTH_BYTES_S},
        "summary": summary,
        "chunks": results,
    }
    write_report(args.out, "s3", report, markdown)
    return 0


def markdown(report: dict[str, Any]) -> str:
    clip = report["clip"]
    lines = [
        "# S3 input: ranged reads against the node-local cache",
        "",
        f"`{report['command']}` on {report['machine']['cpus']} CPUs. Target: {clip['width']}x{clip['height']}, "
        f"{clip['seconds']} s at {clip['fps']} fps, keyframe every {clip['gop']} frames, {clip['bytes']:,} bytes; "
        f"chunks of {clip['chunk_frames']} frames, each a `swap-chunk` process (passthrough).",
        "",
        "| mode | prepare reads | chunks | target bytes per chunk | of the file | GET requests (chunks) "
        "| wall s (all chunks) | modelled network s (chunks) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["summary"]:
        lines.append(
            f"| {row['mode']} | {row['prepare_target_bytes']:,} | {row['chunks']} | {row['target_bytes_per_chunk_mean']:,} | "
            f"{row['fraction_of_file_per_chunk']:.0%} | {row['target_requests_total']} | {row['seconds_total']} | "
            f"{row['modelled_network_s']} |"
        )
    model = report["network_model"]
    rows = {row["mode"]: row for row in report["summary"]}
    ideal = 1 / rows["local_file"]["chunks"]
    ranged = [row for mode, row in rows.items() if mode.startswith("ranged_reads_")]
    shares = ", ".join(
        f"{row['fraction_of_file_per_chunk']:.0%} with {row['mode'].rsplit('_', 1)[1]} blocks" for row in ranged
    )
    prepared = ", ".join(
        f"{row['prepare_target_bytes'] / clip['bytes']:.0%} with {row['mode'].rsplit('_', 1)[1]} blocks"
        for row in ranged
    )
    lines += [
        "",
        f"Modelled network: {model['request_latency_s'] * 1000:.0f} ms per request plus bytes at "
        f"{model['bandwidth_bytes_per_s'] / 1e6:.0f} MB/s (loopback itself has neither). By ranged reads `prepare` "
        f"fetched {prepared}: the frame times come from the MP4's index (its moov) and the stream details from the "
        "container's start, each rounded up to whole blocks; the node cache downloads the whole file there.",
        "",
        f"A chunk's own frames are {ideal:.0%} of the file. By ranged reads a chunk fetched {shares}: the container's "
        "start (the decoder's probe) and its index, plus the chunk's frames from the keyframe before them, each rounded "
        "up to whole blocks. Smaller blocks fetch less but ask more often; the node cache fetches the file once per "
        "node (in `prepare`) and then nothing, so it pays when one node runs most of a video's chunks (the local "
        "backend, a few big GPU nodes), and costs a whole download per pod when chunks spread over many nodes.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
