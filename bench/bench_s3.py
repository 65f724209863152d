"""S3 input benchmark: what each span reads of the target on S3, by ranged reads and with the node-local ETag cache.

A 720p clip (keyframe every 2 s) goes to an S3 server on loopback (moto, in its own process) behind a proxy that counts
every byte of every answer. ``prepare`` runs once per mode; the segments are grouped into spans as the DAG plans them
by default, and every span runs alone as its own ``facefusion-worker swap-span`` process, as one pod would, while the
other spans' segments are claimed as if their own workers were busy on other nodes (so no span's worker helps with
another's segments; each span's worker takes its own claims over, as a retry of its task would). Then one more
``swap-span`` process works every segment of a fresh work, as one node running the whole video. Three ways: target
as a local file (baseline), ranged reads from S3 (default), and ``FACEFUSION_INPUT_CACHE_DIR`` set (the node downloads
the target once). Frames pass through (``processors=[]``), so the numbers are I/O and decode, not inference. Loopback
has no latency, so bytes are the real measure; the model in the results adds a stated network cost to say where the
cache pays.

    python bench/bench_s3.py                     # writes bench/results/s3.json and bench/results/s3.md
    python bench/bench_s3.py --seconds 4 --blocks 1024 --out /tmp/s3bench
"""

from __future__ import annotations

import argparse
import contextlib
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # synth, readback, demo
sys.path.insert(0, str(REPO / "tests" / "integration" / "s3"))  # the tests' S3 server and counting proxy

from s3_servers import FaultyProxy, MotoServer  # noqa: E402
from synth import VideoSpec, pattern_frames, write_video  # noqa: E402
from worker_runs import run_worker, write_report  # noqa: E402

from facefusion_provider import storage  # noqa: E402
from facefusion_provider.contract import (  # noqa: E402
    INPUT_CACHE_DIR_VARIABLE,
    S3_READ_BLOCK_VARIABLE,
    TASK_KEY_VARIABLE,
)
from facefusion_provider.options import Options  # noqa: E402
from facefusion_provider.work.claims import SegmentClaims, scan_work  # noqa: E402
from facefusion_provider.work.ids import work_id  # noqa: E402
from facefusion_provider.work.layout import WorkLayout  # noqa: E402
from facefusion_provider.work.records import Span, WorkSpec  # noqa: E402
from facefusion_provider.work.span_plan import plan_spans  # noqa: E402

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


def work_uri_for(work_root: str, sources: list[str], target: str, options: Options) -> str:
    """The work folder that ``validate`` would name for these inputs and options (as the tests compute it)."""
    ids = [storage.content_id(storage.normalize_uri(source)) for source in sources]
    work = work_id(storage.content_id(storage.normalize_uri(target)), ids, options)
    return WorkLayout.under(work_root, work).work_uri


def span_owner(span: Span) -> str:
    return f"bench/swap_span/{span.index}"


def measure_mode(
    mode: str,
    *,
    target: str,
    key: str,
    face: str,
    env: dict[str, str],
    proxy: FaultyProxy,
    segment_size: int,
    wave: int,
    scratch: Path,
) -> dict[str, Any]:
    """Prepare a work (its own work root) and run every span alone as its own process, then every segment of a second
    work in one process; what each read of the target."""
    env = dict(env)
    if mode == "node_cache":
        env[INPUT_CACHE_DIR_VARIABLE] = str(scratch / "cache")
    if mode.startswith("ranged_reads_"):
        env[S3_READ_BLOCK_VARIABLE] = str(int(mode.rsplit("_", 1)[1].removesuffix("KiB")) * 1024)
    options = Options(processors=[], segment_size=segment_size)
    prepare_options = ["--processors", "--segment-size", str(segment_size)]

    work_uri = work_uri_for(f"s3://work/bench/{mode}", [face], target, options)
    proxy.forget_exchanges()
    seconds, stdout, _ = run_worker(
        ["prepare", "--work-uri", work_uri, "--source", face, "--target", target, *prepare_options], env
    )
    fetched, requests = target_traffic(proxy, key)
    prepare = {"seconds": seconds, "target_bytes": fetched, "target_requests": requests}
    layout = WorkLayout(work_uri)
    spec = WorkSpec.model_validate_json(storage.read_bytes(layout.work_json))
    spans = plan_spans(spec.segments, wave)
    rows = []
    # Every span's segments claimed by "its own worker elsewhere"; each span's worker then takes its own claims over.
    holders = {span.index: SegmentClaims(layout, owner=span_owner(span)) for span in spans}
    state = scan_work(layout)
    for span in spans:
        for index in range(span.first, span.last):
            if not holders[span.index].take(index, state):
                raise RuntimeError(f"{mode}: could not claim segment {index}")
    with contextlib.ExitStack() as renewing:
        for holder in holders.values():
            renewing.enter_context(holder.renewing())
        for span in spans:
            for index in range(span.first, span.last):
                holders[span.index].release(index)
            proxy.forget_exchanges()
            segments = ["--segments", f"{span.first}:{span.last}", "--span", str(span.index)]
            seconds, stdout, _ = run_worker(
                ["swap-span", "--work-uri", work_uri, "--target", target, *segments],
                {**env, TASK_KEY_VARIABLE: span_owner(span)},
            )
            fetched, requests = target_traffic(proxy, key)
            summary = json.loads(stdout.strip().splitlines()[-1])
            if summary["helped_in_run"] or summary["committed"] != span.last - span.first:
                raise RuntimeError(f"{mode}: span {span.index} did not work exactly its own segments: {summary}")
            rows.append(
                {
                    "span": span.index,
                    "segments": f"{span.first}:{span.last}",
                    "frames": span.end - span.start,
                    "decoded_frames": summary["decoded_frames"],
                    "seconds": seconds,
                    "target_bytes": fetched,
                    "target_requests": requests,
                }
            )

    # One process over every segment (the local backend, or one node running the whole video), on a fresh work.
    whole_uri = work_uri_for(f"s3://work/bench/{mode}-whole", [face], target, options)
    run_worker(["prepare", "--work-uri", whole_uri, "--source", face, "--target", target, *prepare_options], env)
    proxy.forget_exchanges()
    seconds, stdout, _ = run_worker(
        ["swap-span", "--work-uri", whole_uri, "--target", target, "--segments", f"0:{len(spec.segments)}"], env
    )
    fetched, requests = target_traffic(proxy, key)
    whole = {
        "segments": len(spec.segments),
        "frames": spec.frame_end - spec.frame_start,
        "decoded_frames": json.loads(stdout.strip().splitlines()[-1])["decoded_frames"],
        "seconds": seconds,
        "target_bytes": fetched,
        "target_requests": requests,
    }
    return {"mode": mode, "prepare": prepare, "segments": len(spec.segments), "spans": rows, "one_process": whole}


def summarise(result: dict[str, Any], size: int) -> dict[str, Any]:
    rows = result["spans"]
    total_bytes = sum(r["target_bytes"] for r in rows)
    requests = sum(r["target_requests"] for r in rows)
    prepare, whole = result["prepare"], result["one_process"]
    per_span = [r["target_bytes"] / size for r in rows]
    return {
        "mode": result["mode"],
        "prepare_target_bytes": prepare["target_bytes"],
        "segments": result["segments"],
        "spans": len(rows),
        "seconds_total": round(sum(r["seconds"] for r in rows), 2),
        "target_bytes_total": total_bytes,
        "target_bytes_per_span_mean": round(total_bytes / len(rows)),
        "target_requests_total": requests,
        "fraction_of_file_per_span": round(total_bytes / len(rows) / size, 3),
        "fraction_of_file_per_span_min": round(min(per_span), 3),
        "fraction_of_file_per_span_max": round(max(per_span), 3),
        "own_share_per_span": round(1 / len(rows), 3),
        "modelled_network_s": round(requests * REQUEST_LATENCY_S + total_bytes / BANDWIDTH_BYTES_S, 2),
        "one_process_seconds": round(whole["seconds"], 2),
        "one_process_target_bytes": whole["target_bytes"],
        "one_process_target_requests": whole["target_requests"],
        "one_process_fraction_of_file": round(whole["target_bytes"] / size, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=12, help="length of the 720p clip")
    parser.add_argument("--fps", type=int, default=25)
    parser.add_argument("--gop", type=int, default=50, help="frames between keyframes")
    parser.add_argument("--segment-size", type=int, default=50, help="frames per segment")
    parser.add_argument("--wave", type=int, default=0, help="spans per run (0: the DAG's default)")
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
        s3_env = {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "FACEFUSION_S3_ENDPOINT_URL": proxy.url,
        }
        os.environ.update(s3_env)  # this process reads work.json and holds claims on the same S3
        env = {**os.environ, **s3_env}

        def measure(mode: str, target: str, key: str, source: str) -> dict[str, Any]:
            return measure_mode(
                mode,
                target=target,
                key=key,
                face=source,
                env=env,
                proxy=proxy,
                segment_size=args.segment_size,
                wave=args.wave,
                scratch=scratch,
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
    command = "python bench/bench_s3.py " + shlex.join(sys.argv[1:] if argv is None else argv)
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
            "segment_frames": args.segment_size,
        },
        "network_model": {"request_latency_s": REQUEST_LATENCY_S, "bandwidth_bytes_per_s": BANDWIDTH_BYTES_S},
        "summary": summary,
        "modes": results,
    }
    write_report(args.out, "s3", report, markdown)
    return 0


def _percent_range(low: float, high: float) -> str:
    return f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%}-{high:.0%}"


def markdown(report: dict[str, Any]) -> str:
    clip = report["clip"]
    rows = {row["mode"]: row for row in report["summary"]}
    first = report["summary"][0]
    spans = ", ".join(r["segments"] for r in report["modes"][0]["spans"])
    lines = [
        "# S3 input: ranged reads against the node-local cache",
        "",
        f"`{report['command']}` on {report['machine']['cpus']} CPUs. Target: {clip['width']}x{clip['height']}, "
        f"{clip['seconds']} s at {clip['fps']} fps, keyframe every {clip['gop']} frames, {clip['bytes']:,} bytes; "
        f"{first['segments']} segments of {clip['segment_frames']} frames in {first['spans']} spans as the DAG plans "
        f"them by default (segments {spans}). Each span runs alone as its own `swap-span` process (passthrough), the "
        "other spans' segments claimed meanwhile as if by their own workers on other nodes; then one `swap-span` "
        "process works every segment of a fresh work (one node, the whole video).",
        "",
        "| mode | prepare reads | spans | target bytes per span | of the file (min-max) | GET requests (spans) "
        "| wall s (all spans) | modelled network s (spans) | one process, all segments: of the file (GETs) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["summary"]:
        lines.append(
            f"| {row['mode']} | {row['prepare_target_bytes']:,} | {row['spans']} | "
            f"{row['target_bytes_per_span_mean']:,} | {row['fraction_of_file_per_span']:.0%} "
            f"({_percent_range(row['fraction_of_file_per_span_min'], row['fraction_of_file_per_span_max'])}) | "
            f"{row['target_requests_total']} | {row['seconds_total']} | {row['modelled_network_s']} | "
            f"{row['one_process_fraction_of_file']:.0%} ({row['one_process_target_requests']}) |"
        )
    model = report["network_model"]
    ranged = [row for mode, row in rows.items() if mode.startswith("ranged_reads_")]
    shares = ", ".join(
        f"{row['fraction_of_file_per_span']:.0%} with {row['mode'].rsplit('_', 1)[1]} blocks" for row in ranged
    )
    prepared = ", ".join(
        f"{row['prepare_target_bytes'] / clip['bytes']:.0%} with {row['mode'].rsplit('_', 1)[1]} blocks"
        for row in ranged
    )
    whole = ", ".join(
        f"{row['one_process_fraction_of_file']:.0%} with {row['mode'].rsplit('_', 1)[1]} blocks" for row in ranged
    )
    once = (
        ": no block twice within a process"
        if all(row["one_process_target_bytes"] <= clip["bytes"] for row in ranged)
        else ": more than the file, so some blocks twice"
    )
    lines += [
        "",
        f"Modelled network: {model['request_latency_s'] * 1000:.0f} ms per request plus bytes at "
        f"{model['bandwidth_bytes_per_s'] / 1e6:.0f} MB/s (loopback itself has neither). By ranged reads `prepare` "
        f"fetched {prepared}: the frame times come from the MP4's index (its moov) and the stream details from the "
        "container's start, each rounded up to whole blocks; the node cache downloads the whole file there.",
        "",
        f"A span's own frames are {first['own_share_per_span']:.0%} of the file on average. By ranged reads a span "
        f"fetched {shares} on average: the container's start (the decoder's probe) and its index, plus the span's "
        "frames from the keyframe before them, each rounded up to whole blocks. Smaller blocks fetch less but ask "
        f"more often. One process working every segment fetched {whole}{once}. The node cache fetches the file "
        "once per node (in `prepare`) and then nothing, so it pays when "
        "one node runs most of a video's spans (the local backend, a few big GPU nodes), and costs a whole download "
        "per pod when spans spread over many nodes.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
