"""What the coordination protocol costs when nothing happens, counted on a real S3 endpoint (docs/protocol.md, "The
change signal"): the requests of an idle standing worker, of a run waiting for standing workers (its span trigger),
and how soon an idle standing worker picks up a new run.

moto's S3 server runs on loopback behind a proxy that logs every request. An idle ``facefusion-worker serve`` process
and, in this process, the swap_span trigger (``SpanCommittedTrigger``) each run alone for ``--seconds``; their
requests in the steady state (after ``--warmup``) are priced at S3 Standard's request prices (FACTS.md) and stated
per month. Pickup: a prepared work gets a run lease at a random moment while the worker idles; the time to its first
claim is measured ``--pickups`` times.

    python bench/bench_protocol.py                   # writes bench/results/protocol.json and protocol.md
    python bench/bench_protocol.py --seconds 30 --pickups 3 --out /tmp/protocol
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "tests" / "integration" / "s3"))

from committed import hold_run_lease, work_uri_for  # noqa: E402
from s3_servers import Exchange, FaultyProxy, MotoServer  # noqa: E402
from synth import VideoSpec, pattern_frames, write_video  # noqa: E402

from facefusion_provider import storage, worker  # noqa: E402
from facefusion_provider.work import liveness  # noqa: E402
from facefusion_provider.work.layout import RootLayout, WorkLayout, segment_claim_name  # noqa: E402

# S3 Standard, us-east-1 (FACTS.md): dollars per 1,000 requests.
PRICE_PER_1000 = {"GET": 0.0004, "HEAD": 0.0004, "PUT": 0.005, "POST": 0.005, "LIST": 0.005, "DELETE": 0.0}
SECONDS_PER_MONTH = 30 * 24 * 3600
GOALS = {"idle_worker_dollars": 1.0, "waiting_run_dollars": 0.20, "pickup_median_s": 2.0}
ROOT = "s3://work/root"
OPTIONS: dict[str, Any] = {"processors": [], "segment_size": 8, "output_video_quality": 100}


def kind(exchange: Exchange) -> str:
    """The request's price class: a GET with a listing query is a LIST."""
    query = exchange.path.partition("?")[2]
    if exchange.method == "GET" and ("list-type" in query or "prefix=" in query or "delimiter" in query):
        return "LIST"
    return str(exchange.method)


def priced(exchanges: list[Exchange], seconds: float) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for exchange in exchanges:
        counts[kind(exchange)] = counts.get(kind(exchange), 0) + 1
    per_month = {name: count * SECONDS_PER_MONTH / seconds for name, count in counts.items()}
    dollars = sum(per_month[name] * PRICE_PER_1000.get(name, 0.005) / 1000 for name in per_month)
    return {"seconds": round(seconds, 1), "requests": counts, "dollars_per_month": round(dollars, 3)}


def idle_worker(proxy: FaultyProxy, env: dict[str, str], seconds: float, warmup: float) -> dict[str, Any]:
    process = subprocess.Popen(
        [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", ROOT, "--idle-exit", "3600"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(warmup)
        proxy.forget_exchanges()
        began = time.monotonic()
        time.sleep(seconds)
        result = priced(proxy.exchanges(), time.monotonic() - began)
    finally:
        process.terminate()
        process.wait(timeout=60)
    # Its own lease's renewal (a PUT every quarter TTL) may fall outside a short window: priced as stated.
    every = liveness.renew_every(liveness.DEFAULT_TTL_SECONDS[liveness.LeaseKind.WORKER])
    renewal = SECONDS_PER_MONTH / every * PRICE_PER_1000["PUT"] / 1000
    puts = result["requests"].get("PUT", 0)
    result["lease_renewal_dollars_per_month"] = round(renewal, 3)
    result["dollars_per_month"] = round(result["dollars_per_month"] + renewal * (0 if puts else 1), 3)
    return result


def waiting_run(proxy: FaultyProxy, work_uri: str, seconds: float, warmup: float) -> dict[str, Any]:
    from facefusion_provider.triggers.span_committed import RENEW_SECONDS, SpanCommittedTrigger

    trigger = SpanCommittedTrigger(work_uri, 0, 2, run_key="waiting-run", no_worker_seconds=3600)

    async def wait() -> None:
        async for _ in trigger.run():
            return

    async def measured() -> dict[str, Any]:
        task = asyncio.create_task(wait())
        await asyncio.sleep(warmup)
        proxy.forget_exchanges()
        began = time.monotonic()
        await asyncio.sleep(seconds)
        result = priced(proxy.exchanges(), time.monotonic() - began)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return result

    result = asyncio.run(measured())
    # Its lease's renewal (a GET and a PUT every RENEW_SECONDS) falls outside a short window: priced as stated.
    renewal = SECONDS_PER_MONTH / RENEW_SECONDS * (PRICE_PER_1000["GET"] + PRICE_PER_1000["PUT"]) / 1000
    result["lease_renewal_dollars_per_month"] = round(renewal, 3)
    result["dollars_per_month"] = round(result["dollars_per_month"] + renewal, 3)
    return result


def pickups(env: dict[str, str], target: str, count: int, seed: int) -> list[float]:
    """Seconds from a run's lease (its announcement) to the first claim of an idle standing worker."""
    rng = random.Random(seed)
    process = subprocess.Popen(
        [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", ROOT, "--idle-exit", "3600"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = []
    try:
        for number in range(count):
            options = {**OPTIONS, "output_video_quality": 90 + number}  # another work each time
            work_uri = work_uri_for(ROOT, [], target, **options)
            worker.prepare(work_uri, [], target, **options)
            layout = WorkLayout(work_uri)
            time.sleep(rng.uniform(4.0, 8.0))  # the worker has backed off to its longest look
            began = time.monotonic()
            hold_run_lease(layout, f"run-{number}", target)
            while not storage.exists(layout.claim(segment_claim_name(0), 1)):
                time.sleep(0.02)
            seconds.append(round(time.monotonic() - began, 3))
    finally:
        process.terminate()
        process.wait(timeout=60)
    return seconds


def write_markdown(report: dict[str, Any], path: Path) -> None:
    idle, waiting, pickup = report["idle_worker"], report["waiting_run"], report["pickup_seconds"]
    lines = [
        "# The protocol's cost when nothing happens (measured on moto)",
        "",
        f"`{report['command']}` on {report['machine']['platform']} ({report['machine']['cpus']} CPUs).",
        "Requests counted by a proxy in front of moto's S3 server, in the steady state, priced at S3 Standard's",
        "request prices (GET/HEAD $0.0004, PUT/LIST $0.005 per 1,000) and stated per month.",
        "",
        "| what | requests in the window | $ per month | goal |",
        "| --- | --- | --- | --- |",
        f"| an idle standing worker ({idle['seconds']} s, + its lease's renewal {idle['lease_renewal_dollars_per_month']}) "
        f"| {idle['requests']} | {idle['dollars_per_month']} | "
        f"<= {GOALS['idle_worker_dollars']} |",
        f"| a run waiting for standing workers ({waiting['seconds']} s, + lease renewal "
        f"{waiting['lease_renewal_dollars_per_month']}) | {waiting['requests']} | {waiting['dollars_per_month']} | "
        f"<= {GOALS['waiting_run_dollars']} |",
        f"| pickup of a new run by an idle worker: median of {len(pickup)} | {pickup} s | "
        f"{statistics.median(pickup):.2f} s | <= {GOALS['pickup_median_s']} s |",
        "",
        "Before this change (stated from the code it replaced): an idle worker listed the works and each work's leases",
        "every second (two LISTs a second: about $26 a month), and a waiting run's trigger listed its segments and the",
        "workers every 5 s (about $5 a month).",
    ]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each steady-state window")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds before a window starts")
    parser.add_argument("--pickups", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    args = parser.parse_args(argv)
    moto = MotoServer()
    proxy = FaultyProxy(moto.port)
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"protocol-bench-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        moto.client().create_bucket(Bucket="work")
        s3_env = {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "FACEFUSION_S3_ENDPOINT_URL": proxy.url,
        }
        os.environ.update(s3_env)
        env = {**os.environ, **s3_env}
        target = str(scratch / "target.mp4")
        write_video(target, VideoSpec(width=64, height=48), pattern_frames(16, 64, 48))
        work_uri = work_uri_for(ROOT, [], target, **OPTIONS)
        worker.prepare(work_uri, [], target, **OPTIONS)
        storage.write_bytes_atomic(RootLayout(ROOT).worker("a-standing-worker"), b"{}")  # the trigger waits on
        report = {
            "command": ("python bench/bench_protocol.py " + shlex.join(argv or sys.argv[1:])).strip(),
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
            "goals": GOALS,
            "idle_worker": idle_worker(proxy, env, args.seconds, args.warmup),
            "waiting_run": waiting_run(proxy, work_uri, args.seconds, args.warmup),
            "pickup_seconds": pickups(env, target, args.pickups, args.seed),
        }
    finally:
        proxy.stop()
        moto.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "protocol.json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, args.out / "protocol.md")
    print((args.out / "protocol.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
