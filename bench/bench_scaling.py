"""How a swap run scales over GPUs with spans, segments, claims and helping with the tails: one hour of 1080p on 1-64 GPUs,
a killed pod, a skewed video, and a batch of ingested videos sharing the pool.

The worker's costs are measured here with its own code (``scaling_measure``: CPU per frame, a segment's commit, a
take, a resume's listing and seek, on the local disk and on S3 through moto); the cluster's costs are stated (flags):
Airflow's task overhead, pod start, model load, GPU inference, S3 latency and throughput. ``scaling_model`` then plays
each run the way the worker does: one wave of spans (``plan_spans(segments, wave=G)``), each pod paying its fixed cost
once, segments at the pod's rate plus their per-segment costs, an idle pod taking the back half of the longest run
of unclaimed segments, and the merge after the last span.

Efficiency is strong scaling of the whole run, trigger to output: ``T(1 GPU) / (G x T(G GPUs))`` with T(1) the best
one-GPU run over the segment sizes. The GPU busy fraction is the frame work of the committed segments over G times
the time in question.

    python bench/bench_scaling.py                       # measures (a few minutes), models, writes bench/results/scaling.*
    python bench/bench_scaling.py --measured bench/results/scaling.json --gpu-inference-fps 60   # model only
    python bench/bench_scaling.py --measured bench/results/scaling.json --cpu-stages bench/results/cpu-stages.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from scaling_measure import Measured, WorkerCosts, measure
from scaling_model import (
    HELPING,
    SPAN_PODS,
    STANDING,
    WORKERS_SETTING,
    Hops,
    Kill,
    PodRate,
    Stated,
    simulate,
    single_process_s,
    switch_s,
)
from worker_runs import machine

RESULTS = Path(__file__).resolve().parent / "results"
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64)
SEGMENT_SIZES = (64, 128, 256, 512, 1024, 2048)
GOALS = {8: 0.95, 32: 0.85}  # issue 13: efficiency on 8 and on 32 GPUs
LOST_GOAL_S = 10.0  # issue 13: GPU seconds lost per killed pod, about one segment
KILLS = 8  # kill times spread over a pod's working time
SKEW = (1 / 3, 2 / 3, 3.0)  # the middle third of the segments three times slower
BATCH = {"videos": 100, "video_seconds": 300.0, "gpus": 64, "busy_goal": 0.95}
BATCH_WAVES = (1, 2, 4)


# --- one hour of 1080p over 1-64 GPUs ----------------------------------------------------------------------------


def grid(measured: Measured, stated: Stated) -> list[dict[str, Any]]:
    """Every segment size on every GPU count; efficiency against the best one-GPU run."""
    cells = {(size, gpus): simulate(measured, stated, size, gpus) for size in SEGMENT_SIZES for gpus in GPU_COUNTS}
    one_gpu = min(cells[size, 1][0].makespan_s for size in SEGMENT_SIZES)
    rows = []
    for (size, gpus), (result, _, model) in cells.items():
        span_phase = (result.first_pod_s, result.last_span_end_s)
        rows.append(
            {
                "segment_frames": size,
                "segments": model.segments,
                "gpus": gpus,
                "makespan_s": round(result.makespan_s, 1),
                "efficiency": round(one_gpu / (gpus * result.makespan_s), 4),
                "gpu_busy_spans": round(result.busy_fraction(gpus, span_phase), 4),
                "helped": result.helped,
                "seeks": result.seeks,
            }
        )
    return rows


def cell(rows: list[dict[str, Any]], size: int, gpus: int) -> dict[str, Any]:
    return next(row for row in rows if row["segment_frames"] == size and row["gpus"] == gpus)


# --- a killed pod ------------------------------------------------------------------------------------------------


def killed_pod(measured: Measured, stated: Stated, size: int, gpus: int = 8) -> dict[str, Any]:
    """Span 0's pod killed at ``KILLS`` times spread over its working time: the work it loses (done on segments it
    never committed), the pool's GPU seconds the kill costs in all (makespan change x GPUs), and the retry's restart."""
    base, hops, model = simulate(measured, stated, size, gpus)
    start = base.first_pod_s + hops.span_pod_s
    times = [start + (base.last_span_end_s - start) * (k + 0.5) / KILLS for k in range(KILLS)]
    losses, delays = [], []
    for at in times:
        result, _, _ = simulate(measured, stated, size, gpus, kills=(Kill(0, 0, at),))
        losses.append(result.lost_s)
        delays.append(result.makespan_s - base.makespan_s)
    return {
        "segment_frames": size,
        "gpus": gpus,
        "segment_work_s": round(model.work_s, 2),
        "lost_mean_s": round(sum(losses) / len(losses), 2),
        "lost_max_s": round(max(losses), 2),
        "restart_gpu_s": round(hops.span_pod_s, 2),  # the new try's pod start and model load, on a GPU, no frames
        "takeover_wait_s": 0.0,  # a new try of the same task takes over its claims at once
        "makespan_delay_mean_s": round(sum(delays) / len(delays), 1),
        "pool_gpu_s_mean": round(gpus * sum(delays) / len(delays), 1),
    }


# --- a skewed video ----------------------------------------------------------------------------------------------


def skewed(measured: Measured, stated: Stated, size: int) -> list[dict[str, Any]]:
    """The middle third of the segments three times slower, with and without helping with the tails."""
    one_gpu = simulate(measured, stated, size, 1, skew=SKEW)[0].makespan_s
    rows = []
    for gpus in (8, 32):
        for helping in (True, False):
            result, _, _ = simulate(measured, stated, size, gpus, skew=SKEW, helping=helping)
            rows.append(
                {
                    "gpus": gpus,
                    "helping": helping,
                    "makespan_s": round(result.makespan_s, 1),
                    "efficiency": round(one_gpu / (gpus * result.makespan_s), 4),
                    "gpu_busy_spans": round(
                        result.busy_fraction(gpus, (result.first_pod_s, result.last_span_end_s)), 4
                    ),
                    "helped": result.helped,
                }
            )
    return rows


# --- a batch of ingested videos ----------------------------------------------------------------------------------


BATCH_PLANS = (  # (pods per GPU, spans per video, who works the spans)
    *((1, wave, SPAN_PODS) for wave in BATCH_WAVES),
    (2, 1, SPAN_PODS),
    (2, 2, SPAN_PODS),
    (1, 1, HELPING),
    (1, 4, HELPING),
    (1, 1, STANDING),
)


def batch(measured: Measured, stated: Stated, size: int) -> list[dict[str, Any]]:
    """100 five-minute videos triggered together on 64 GPUs: each run's validate, prepare, plan, merge and cleanup
    run on CPU beside the pool; the span tasks queue for the pool in run order."""
    frames = round(BATCH["video_seconds"] * stated.frame_rate)
    gpus = int(BATCH["gpus"])
    rows = []
    for pods_per_gpu, wave, mode in BATCH_PLANS:
        result, _, _ = simulate(
            measured,
            stated,
            size,
            gpus,
            runs=int(BATCH["videos"]),
            wave=wave,
            frames=frames,
            workers=mode,
            pods_per_gpu=pods_per_gpu,
        )
        rows.append(
            {
                "pods_per_gpu": pods_per_gpu,
                "spans_per_video": wave,
                "workers": mode,
                "pods": result.pods,
                "makespan_s": round(result.makespan_s, 1),
                "gpu_busy": round(result.busy_fraction(gpus, (result.first_pod_s, result.last_span_end_s)), 4),
                "gpu_busy_trigger_to_last_output": round(result.busy_fraction(gpus), 4),
                "gpu_work_s": round(result.useful_s, 1),
            }
        )
    return rows


# --- what would reach the goals ----------------------------------------------------------------------------------


SCENARIOS: tuple[tuple[str, dict[str, float], str], ...] = (
    (
        "1. span pods (`span_workers = task`): a task and a pod per hop; the span pod that commits the last segment "
        "joins the output from the indexes and reads the target's sound",
        {},
        SPAN_PODS,
    ),
    (
        "2. standing workers (`span_workers = standing`): one prepares the work from the run's lease and stores its "
        "sound; the one that commits the last segment merges",
        {},
        STANDING,
    ),
    ("3. as 2, with Airflow starting validate in 1 s", {"airflow_task_s": 1.0}, STANDING),
)


def serial_s(hops: Hops, mode: str) -> float:
    """Trigger to output less the frame work: with span pods every hop is a task (and a pod); standing workers start
    one poll after validate and merge as the last segment lands."""
    return float(hops.standing_serial_s() if mode == STANDING else hops.serial_s)


def scenarios(measured: Measured, stated: Stated, size: int) -> list[dict[str, Any]]:
    rows = []
    for name, changes, mode in SCENARIOS:
        changed = replace(stated, **changes)
        one_gpu = min(simulate(measured, changed, other, 1)[0].makespan_s for other in SEGMENT_SIZES)
        row: dict[str, Any] = {"scenario": name, "changes": changes, "workers": mode}
        for gpus in GOALS:
            result, hops, _ = simulate(measured, changed, size, gpus, workers=mode)
            row[f"efficiency_{gpus}_gpus"] = round(one_gpu / (gpus * result.makespan_s), 4)
            row["serial_s"] = round(serial_s(hops, mode), 1)
        rows.append(row)
    return rows


SENSITIVITY: tuple[dict[str, float], ...] = (  # stated costs the standing plan's figures lean on, made worse
    {"s3_copy_part_s": 0.5},
    {"s3_request_s": 0.04},
    {"airflow_task_s": 8.0},
)


def sensitivity(measured: Measured, stated: Stated, size: int) -> list[dict[str, Any]]:
    """The standing plan's efficiency with one stated cost made worse at a time."""
    rows = []
    for changes in SENSITIVITY:
        changed = replace(stated, **changes)
        one_gpu = simulate(measured, changed, size, 1)[0].makespan_s
        row: dict[str, Any] = {"changes": changes}
        for gpus in GOALS:
            result, _, _ = simulate(measured, changed, size, gpus, workers=STANDING)
            row[f"efficiency_{gpus}_gpus"] = round(one_gpu / (gpus * result.makespan_s), 4)
        rows.append(row)
    return rows


def serial_budget(one_gpu_work_s: float, gpus: int, goal: float) -> float:
    """The most seconds of serial time (Amdahl) with which ``goal`` still holds on ``gpus``: (s + p) / (G (s + p/G))
    >= goal, with p the one-GPU frame work and nothing else lost."""
    return one_gpu_work_s * (1 - goal) / (goal * gpus - 1)


# --- all of it ---------------------------------------------------------------------------------------------------


def recommended_size(rows: list[dict[str, Any]], kills: list[dict[str, Any]]) -> int:
    """The largest segment size (fewest files, listings and requests) whose killed pod loses at most ``LOST_GOAL_S``
    and whose efficiency on 8 and on 32 GPUs is within a point of the best size's."""

    def close_to_best(size: int) -> bool:
        return all(
            cell(rows, size, gpus)["efficiency"] >= max(cell(rows, s, gpus)["efficiency"] for s in SEGMENT_SIZES) - 0.01
            for gpus in GOALS
        )

    safe = [row["segment_frames"] for row in kills if row["lost_max_s"] <= LOST_GOAL_S]
    return int(max([size for size in safe if close_to_best(size)] or safe or [SEGMENT_SIZES[0]]))


def model(measured: Measured, stated: Stated) -> dict[str, Any]:
    rate, warm_rate = PodRate.of(measured, stated), PodRate.of(measured, stated, warm=True)
    rows = grid(measured, stated)
    kills = [killed_pod(measured, stated, size) for size in SEGMENT_SIZES]
    size = recommended_size(rows, kills)
    _, hops, segment = simulate(measured, stated, size, 1)
    one_gpu_work = stated.frames * segment.frame_s
    per_size = {}
    for other in SEGMENT_SIZES:
        _, _, other_model = simulate(measured, stated, other, 1)
        per_size[other] = {
            "segments": other_model.segments,
            "work_s": round(other_model.work_s, 3),
            "per_segment_s": round(other_model.per_segment_s, 4),
            "commit_latency_s": round(other_model.commit_latency_s, 4),
            "take_s": round(other_model.take_s, 4),
            "ratios": {name: round(value, 5) for name, value in other_model.ratios().items()},
        }
    kill = next(row for row in kills if row["segment_frames"] == size)
    cold = replace(stated, pod_start_s=stated.pod_start_s + stated.image_pull_s + stated.node_scale_up_s)
    return {
        "pod_rate": {
            **asdict(rate),
            "fps": round(rate.fps, 2),
            "process_fps": round(rate.process_fps, 1),
            "cores_fps": round(rate.cores_fps, 1),
            "bound_by": rate.bound_by,
        },
        "pod_rate_with_stored_analysis": {"fps": round(warm_rate.fps, 2), "bound_by": warm_rate.bound_by},
        "hops": {name: round(value, 2) for name, value in hops.as_dict().items()},
        "serial_s": round(hops.serial_s, 1),
        "one_gpu_frame_work_s": round(one_gpu_work, 1),
        "serial_budget_s": {gpus: round(serial_budget(one_gpu_work, gpus, goal), 1) for gpus, goal in GOALS.items()},
        "single_process_s": round(single_process_s(measured, stated, size), 1),
        "segment_costs": per_size,
        "rows": rows,
        "recommended_segment_frames": size,
        "killed_pod": kills,
        "skew": skewed(measured, stated, size),
        "batch": batch(measured, stated, size),
        "scenarios": scenarios(measured, stated, size),
        "sensitivity": sensitivity(measured, stated, size),
        "switch_s": round(switch_s(measured, stated), 4),
        "cold_nodes": {
            gpus: round(
                simulate(measured, cold, size, 1)[0].makespan_s
                / (gpus * simulate(measured, cold, size, gpus)[0].makespan_s),
                4,
            )
            for gpus in GOALS
        },
        "summary": {
            "segment_frames": size,
            "spans": "one wave, one span per GPU",
            "efficiency_8_gpus": cell(rows, size, 8)["efficiency"],
            "efficiency_32_gpus": cell(rows, size, 32)["efficiency"],
            "gpu_seconds_lost_per_killed_pod": kill["lost_max_s"],
            "gpu_seconds_lost_per_killed_pod_mean": kill["lost_mean_s"],
            "restart_gpu_seconds_per_killed_pod": kill["restart_gpu_s"],
            "goals": {
                "efficiency_8_gpus": GOALS[8],
                "efficiency_32_gpus": GOALS[32],
                "gpu_seconds_lost_per_killed_pod": LOST_GOAL_S,
            },
        },
    }


def summarise(result: dict[str, Any]) -> None:
    """The headline figures beside the issue's goals, in ``result["model"]["summary"]``."""
    modelled = result["model"]
    summary, size = modelled["summary"], modelled["recommended_segment_frames"]
    costs = modelled["segment_costs"][size]["ratios"]
    skew = {f"{r['gpus']}_gpus_{'helping' if r['helping'] else 'alone'}": r["efficiency"] for r in modelled["skew"]}
    best_batch = max(modelled["batch"], key=lambda row: row["gpu_busy"])
    standing = next(row for row in modelled["scenarios"] if row["workers"] == STANDING)
    summary.update(
        {
            "skew_efficiency": skew,
            # The recommended plan runs the spans on standing workers; span pods (the default setting) beside it.
            "workers": f"{STANDING} (`{WORKERS_SETTING[STANDING]}`)",
            "efficiency_8_gpus": standing["efficiency_8_gpus"],
            "efficiency_32_gpus": standing["efficiency_32_gpus"],
            "efficiency_8_gpus_span_pods": summary["efficiency_8_gpus"],
            "efficiency_32_gpus_span_pods": summary["efficiency_32_gpus"],
            "batch_gpu_busy": best_batch["gpu_busy"],
            "batch_plan": {key: best_batch[key] for key in ("pods_per_gpu", "spans_per_video", "workers")},
            "batch_gpu_busy_span_pods": max(
                row["gpu_busy"] for row in modelled["batch"] if row["workers"] == SPAN_PODS
            ),
            "batch_gpu_busy_helping": max(row["gpu_busy"] for row in modelled["batch"] if row["workers"] == HELPING),
            "commit_cost_ratio": round(costs["per_segment"], 5),
            "commit_latency_ratio": round(costs["commit_latency"], 5),
            "resume_cost_ratio": round(costs["resume"], 5),
            "met": {
                "efficiency_8_gpus": standing["efficiency_8_gpus"] >= GOALS[8],
                "efficiency_32_gpus": standing["efficiency_32_gpus"] >= GOALS[32],
                "gpu_seconds_lost_per_killed_pod": summary["gpu_seconds_lost_per_killed_pod"] <= LOST_GOAL_S,
                "batch_gpu_busy": best_batch["gpu_busy"] >= BATCH["busy_goal"],
            },
        }
    )


# --- reporting ---------------------------------------------------------------------------------------------------


def percent(value: float) -> str:
    return f"{100 * value:.1f} %"


def yes(met: bool) -> str:
    return "met" if met else "**not met**"


def efficiency_table(rows: list[dict[str, Any]], key: str) -> list[str]:
    lines = [
        "| segment frames | segments | " + " | ".join(f"{g} GPU" for g in GPU_COUNTS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in GPU_COUNTS) + " |",
    ]
    for size in SEGMENT_SIZES:
        cells = [cell(rows, size, gpus) for gpus in GPU_COUNTS]
        lines.append(f"| {size} | {cells[0]['segments']} | " + " | ".join(percent(c[key]) for c in cells) + " |")
    return lines


def measured_lines(measured: dict[str, Any]) -> list[str]:
    worker, run, seek, join = measured["worker"], measured["run"], measured["seek"], measured["join"]
    parts = ", ".join(f"{part.replace('_', ' ')} {ms:.2f}" for part, ms in worker["swap_cpu_parts_ms"].items())
    lines = [
        f"Measured here ({measured['clip']}; {measured['cpu_cores']} cores, CPU seconds unless said):",
        "",
        f"- Per 1080p frame, one core: decode {1000 * worker['decode_cpu_s_per_frame']:.1f} ms, encode (the default "
        f"libx264 settings) {1000 * worker['encode_cpu_s_per_frame']:.1f} ms, the swapped frame back to yuv420p "
        f"{1000 * worker['encoder_rgb_s_per_frame']:.1f} ms; the inswapper path's CPU work beside inference "
        f"{sum(worker['swap_cpu_parts_ms'].values()):.1f} ms per face ({parts} ms). Frames side by side, one thread "
        f"per core: each of a pod's frame threads counts {worker['side_by_side_efficiency']:.2f}.",
        f"- Serial steps: a worker process that finds its span done {run['worker_start_s']:.2f} s (its CPU); prepare's "
        f"probe {1e6 * run['probe_s_per_frame']:.1f} us and {run['probe_bytes_per_frame']:.0f} bytes per frame; its "
        f"target checks {run.get('target_checks_s', 0.0):.2f} s (1080p: the encoder opened, seek-decodes near a "
        "keyframe; two more seeks as below for an hour's middle and last segment starts), beside the sources' "
        "identity (`identity_s`; measured by `bench/bench_serial.py --model-inputs`).",
        f"- A seek to a segment start (keyframe every {seek['keyint']} frames): {1000 * seek['seek_s']:.0f} ms wall, "
        f"{1000 * seek['seek_cpu_s']:.0f} ms CPU (the model's figure), {seek['preroll_frames']:.0f} frames decoded "
        "before it on average; a segment's stored faces read in "
        f"{1000 * seek['analysis_load_s']:.2f} ms.",
        f"- The merge's index join (CPU, from the markers' stored moovs): {1000 * join['per_segment_s']:.2f} ms per "
        f"segment, {1e6 * join['per_frame_s']:.1f} us per frame; the output's moov {join['moov_bytes_per_frame']:.0f} "
        "bytes per frame.",
        "",
        "| store | encoder per segment (CPU) | flush wait (wall / CPU) | sha256 per MB | commit (256 frames) | commit CPU | take "
        "| listing (400 segments) | claim renewal | S3 requests: take, commit, listing, first take |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, costs in measured["stores"].items():
        requests = costs["requests"]
        counted = (
            f"{requests['take']}, {requests['commit']}, {requests['scan']}, {requests['first_take']}"
            if name != "local"
            else "-"
        )
        lines.append(
            f"| {name} | {1000 * costs['encoder_segment_cpu_s']:.0f} ms | {1000 * costs['encoder_close_s']:.0f} / "
            f"{1000 * costs['encoder_close_cpu_s']:.0f} ms | "
            f"{1000 * costs['sha256_s_per_mb']:.1f} ms | {1000 * costs['commit_s']:.1f} ms | "
            f"{1000 * costs['commit_cpu_s']:.1f} ms | {1000 * costs['take_s']:.1f} ms | {1000 * costs['scan_s']:.1f} ms "
            f"| {1000 * costs['renew_s']:.2f} ms | {counted} |"
        )
    return lines


def write_markdown(result: dict[str, Any], path: Path) -> None:
    measured, stated, modelled = result["measured"], result["stated"], result["model"]
    summary, rate, rows = modelled["summary"], modelled["pod_rate"], modelled["rows"]
    size = modelled["recommended_segment_frames"]
    met = summary["met"]
    kill = next(row for row in modelled["killed_pod"] if row["segment_frames"] == size)
    lines = [
        "# Scaling: one hour of 1080p over 1-64 GPUs with spans, segments, claims and helping with the tails",
        "",
        f"Command: `{result['command']}` ({result['machine']}).",
        "",
        *(
            [
                f"The worker's CPU parts are the measured ones scaled by issue 24's cuts: each part's after/before "
                f"ratio from one run of `{result['cpu_stages']}` (bench/results/cpu-stages.md).",
                "",
            ]
            if result.get("cpu_stages")
            else []
        ),
        f"## Summary (recommended plan: standing workers, one per GPU; {size}-frame segments; the pool on S3)",
        "",
        "| measure | goal | modelled | |",
        "| --- | --- | --- | --- |",
        f"| efficiency on 8 GPUs, trigger to output, standing workers (span pods alone "
        f"{percent(summary['efficiency_8_gpus_span_pods'])}) | >= 95 % | {percent(summary['efficiency_8_gpus'])} | "
        f"{yes(met['efficiency_8_gpus'])} |",
        f"| efficiency on 32 GPUs, standing workers (span pods alone {percent(summary['efficiency_32_gpus_span_pods'])})"
        f" | >= 85 % | {percent(summary['efficiency_32_gpus'])} | {yes(met['efficiency_32_gpus'])} |",
        f"| GPU seconds lost per killed pod (worst; mean) | <= one segment, about 10 s | "
        f"{summary['gpu_seconds_lost_per_killed_pod']:.1f} s; {summary['gpu_seconds_lost_per_killed_pod_mean']:.1f} s "
        f"| {yes(met['gpu_seconds_lost_per_killed_pod'])} |",
        f"| batch: 100 x 5 min on 64 GPUs, GPU busy ({summary['batch_plan']['workers']}, "
        f"`{WORKERS_SETTING[summary['batch_plan']['workers']]}`; span pods alone "
        f"{percent(summary['batch_gpu_busy_span_pods'])}) | >= 95 % | {percent(summary['batch_gpu_busy'])} | "
        f"{yes(met['batch_gpu_busy'])} |",
        f"| skew (a third 3x slower), 8 GPUs, with / without helping | | "
        f"{percent(summary['skew_efficiency']['8_gpus_helping'])} / "
        f"{percent(summary['skew_efficiency']['8_gpus_alone'])} | |",
        f"| a segment's commit on the pod (encoder, checksum, upload CPU, marker, claim), of its work | | "
        f"{percent(summary['commit_cost_ratio'])} | |",
        f"| a resume (both listings and a seek), of one segment's work | | {percent(summary['resume_cost_ratio'])} | |",
        "",
    ]
    lines += verdict_lines(modelled)
    lines += [
        "",
        f"One pod swaps {rate['fps']:.1f} frames per second, bound by its {rate['bound_by']}: the process stage does "
        f"{rate['process_fps']:.0f} ({rate['frame_threads']} frames side by side, each inference "
        f"{1000 * rate['inference_s']:.1f} ms on the GPU, then the swap's CPU work {1000 * rate['swap_cpu_s']:.1f} ms), "
        f"the {rate['cores']} cores {rate['cores_fps']:.0f} (decode + encode {1000 * rate['codec_s']:.1f} ms and the "
        f"swap's CPU work per frame, shared); with the target's analysis stored, "
        f"{modelled['pod_rate_with_stored_analysis']['fps']:.1f}. One GPU works "
        f"{modelled['one_gpu_frame_work_s'] / 60:.0f} minutes on the hour.",
        "",
        "## The serial hops of one run (seconds)",
        "",
        "| " + " | ".join(modelled["hops"]) + " |",
        "| " + " | ".join("---" for _ in modelled["hops"]) + " |",
        "| " + " | ".join(f"{value:.1f}" for value in modelled["hops"].values()) + " |",
        "",
        f"Trigger to output, less the frame work: {modelled['serial_s']:.0f} s (validate, prepare, plan, one span's task "
        "and pod start, the last span pod's merge; cleanup follows the output). Amdahl's law allows at most "
        + ", ".join(
            f"{budget:.0f} s for {percent(GOALS[int(g)])} on {g} GPUs"
            for g, budget in modelled["serial_budget_s"].items()
        )
        + " with this much frame work, and only if nothing else is lost.",
        "",
        "## Efficiency (trigger to output), by segment size (rows) and GPUs (columns)",
        "",
        *efficiency_table(rows, "efficiency"),
        "",
        "## GPU busy while the spans run (frame work over G x the span phase)",
        "",
        *efficiency_table(rows, "gpu_busy_spans"),
        "",
        "## Makespan in minutes at the recommended segment size",
        "",
        "| | " + " | ".join(f"{g} GPU" for g in GPU_COUNTS) + " |",
        "| --- | " + " | ".join("---" for _ in GPU_COUNTS) + " |",
        f"| {size} frames | " + " | ".join(f"{cell(rows, size, g)['makespan_s'] / 60:.1f}" for g in GPU_COUNTS) + " |",
        "",
        f"Against one `facefusion-worker run` process on one GPU ({modelled['single_process_s']:.0f} s): "
        + ", ".join(
            f"{percent(modelled['single_process_s'] / (g * cell(rows, size, g)['makespan_s']))} on {g} GPUs"
            for g in GOALS
        )
        + ". Cold nodes (each pod first waits "
        f"{stated['node_scale_up_s'] + stated['image_pull_s']:.0f} s for a node and its image): "
        + ", ".join(f"{percent(value)} on {g} GPUs" for g, value in modelled["cold_nodes"].items())
        + ".",
        "",
        "## A segment's costs beyond its frames, per segment size (S3, the pod's time)",
        "",
        "| segment frames | segments (1 h) | frame work s | per segment on the pod | of the work | commit latency "
        "| take | of the work (unhidden) | resume (listings + seek) | of the work |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for other, values in modelled["segment_costs"].items():
        ratios = values["ratios"]
        lines.append(
            f"| {other} | {values['segments']} | {values['work_s']:.2f} | {1000 * values['per_segment_s']:.0f} ms | "
            f"{percent(ratios['per_segment'])} | {1000 * values['commit_latency_s']:.0f} ms | "
            f"{1000 * values['take_s']:.0f} ms | {percent(ratios['take'])} ({percent(ratios['take_unhidden'])}) | "
            f"{1000 * (ratios['resume'] * values['work_s']):.0f} ms | {percent(ratios['resume'])} |"
        )
    lines += [
        "",
        "The commit runs in a thread beside the next segment: its CPU (encoder flush and keyframe, checksum, the "
        "upload's and the marker's requests) takes the pod's cores; the take (both listings, the claim, a marker "
        "check) waits on the decode thread, hidden while the pipeline's 16 queued frames last.",
        "",
        "## A killed pod (span 0 killed at 8 times through its work, 8 GPUs)",
        "",
        "| segment frames | segment work s | lost work, mean | lost work, worst | restart (new pod, models) | takeover "
        "wait | makespan later by | pool GPU seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in modelled["killed_pod"]:
        lines.append(
            f"| {row['segment_frames']} | {row['segment_work_s']:.1f} | {row['lost_mean_s']:.1f} s | "
            f"{row['lost_max_s']:.1f} s | {row['restart_gpu_s']:.1f} s | {row['takeover_wait_s']:.0f} s | "
            f"{row['makespan_delay_mean_s']:.1f} s | {row['pool_gpu_s_mean']:.0f} |"
        )
    lines += [
        "",
        f"Lost work is what the killed pod had done on segments it never committed: the one in flight and any still "
        f"uploading. The new try (after Airflow's {stated['retry_delay_s']:.0f} s retry delay) takes over its "
        f"claims at once; other pods meanwhile take the span's unclaimed tail, and its claimed segment after the "
        f"{stated['lease_s']:.0f} s lease, working other segments while they wait, so the wait loses nothing. The "
        f"restart's {kill['restart_gpu_s']:.1f} s hold a GPU without frames; the pool's GPU seconds count everything "
        "the kill costs the run (G x the later output), including the retry delay, in which the killed pod's GPU has "
        "no task.",
        "",
        f"## A skewed video: the middle third of the segments three times slower ({size}-frame segments)",
        "",
        "| GPUs | helping | makespan min | efficiency | GPU busy in the span phase | segments helped |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in modelled["skew"]:
        lines.append(
            f"| {row['gpus']} | {'yes' if row['helping'] else 'no'} | {row['makespan_s'] / 60:.1f} | "
            f"{percent(row['efficiency'])} | {percent(row['gpu_busy_spans'])} | {row['helped']} |"
        )
    lines += [
        "",
        f"## Batch: {BATCH['videos']} videos of {BATCH['video_seconds'] / 60:.0f} minutes on {BATCH['gpus']} GPUs, "
        "triggered together",
        "",
        "Each run's validate, prepare, plan, merge and cleanup run on CPU beside the pool; span tasks queue for the "
        "pool in run order. GPU busy: frame work over G x the time from the first pod to the last span's end (and "
        "over trigger to last output).",
        "",
        "| who works the spans | pods per GPU | spans per video | pods started | makespan min | GPU busy | "
        "trigger to last output |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in modelled["batch"]:
        lines.append(
            f"| {row['workers']} (`{WORKERS_SETTING[row['workers']]}`) | {row['pods_per_gpu']} | "
            f"{row['spans_per_video'] if row['workers'] != STANDING else '-'} | {row['pods']} | "
            f"{row['makespan_s'] / 60:.1f} | {percent(row['gpu_busy'])} | "
            f"{percent(row['gpu_busy_trigger_to_last_output'])} |"
        )
    lines += [
        "",
        "Two pods per GPU (GPU time-slicing, a pool of 2 x G slots) let one pod start and load its models while the "
        "other works; pods working at once share the GPU (modelled as equal shares of one pod's rate, as if the "
        "pod's cores were the GPU's share of the node). Span pods that then work other runs "
        "(`help_other_runs_seconds`, unbounded here) start one pod per GPU instead of one per run, but every later "
        "run's span task still passes through a pool slot to find its span committed. Standing workers "
        "(`facefusion-worker serve`, one per GPU, up before the batch) take the oldest run's free segments; span tasks "
        f"wait deferred, holding no slot; moving to another run's work costs {1000 * modelled['switch_s']:.0f} ms "
        "(its work.json, its frame processor with the models loaded: measured here; ten requests) and a seek.",
        "",
        "## Who works the spans, and what the rest of a run costs",
        "",
        "| scenario | serial s | 8 GPUs | 32 GPUs |",
        "| --- | --- | --- | --- |",
    ]
    for row in modelled["scenarios"]:
        lines.append(
            f"| {row['scenario']} | {row['serial_s']:.1f} | {percent(row['efficiency_8_gpus'])} | "
            f"{percent(row['efficiency_32_gpus'])} |"
        )
    lines += [
        "",
        "The standing plan with one stated cost made worse (the others as stated):",
        "",
        "| stated | 8 GPUs | 32 GPUs |",
        "| --- | --- | --- |",
    ]
    for row in modelled["sensitivity"]:
        changed = ", ".join(f"{key} {value:g} (stated {stated[key]:g})" for key, value in row["changes"].items())
        lines.append(f"| {changed} | {percent(row['efficiency_8_gpus'])} | {percent(row['efficiency_32_gpus'])} |")
    lines += [
        "",
        "## Inputs",
        "",
        *measured_lines(measured),
        "",
        "Stated (flags of the script): " + ", ".join(f"{key} {value}" for key, value in stated.items()) + ".",
        "",
        "![efficiency](scaling.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


def verdict_lines(modelled: dict[str, Any]) -> list[str]:
    """Which goals hold, and what stands in the way of any that does not."""
    summary, rows, budget = modelled["summary"], modelled["rows"], modelled["serial_budget_s"]
    size = summary["segment_frames"]
    hops = modelled["hops"]
    by_mode = {row["workers"]: row for row in reversed(modelled["scenarios"])}  # each mode's first row
    lines = [
        f"The spans themselves scale: the GPUs work frames {percent(cell(rows, size, 8)['gpu_busy_spans'])} of the "
        f"span phase on 8 GPUs and {percent(cell(rows, size, 32)['gpu_busy_spans'])} on 32 with span pods (each pod's "
        f"{hops['span task (Airflow)'] + hops['span pod before its first frame']:.0f} s of task, pod start and model "
        "load is the rest). The time no GPU count shortens is "
        f"{by_mode[SPAN_PODS]['serial_s']:.0f} s per run with span pods (a task, and mostly a pod, per hop) and "
        f"{by_mode[STANDING]['serial_s']:.1f} s with standing workers (validate, a poll, prepare's work, a close look; then "
        f"from the last commit the merge, {hops['standing: last commit to output']:.1f} s), against Amdahl budgets of "
        f"{budget[8]:.0f} s for 95 % on 8 GPUs and {budget[32]:.0f} s for 85 % on 32 with "
        f"{modelled['one_gpu_frame_work_s'] / 60:.0f} GPU-minutes of frames.",
    ]
    for gpus, goal in GOALS.items():
        reached = [row for row in modelled["scenarios"] if row[f"efficiency_{gpus}_gpus"] >= goal]
        best = reached[0] if reached else max(modelled["scenarios"], key=lambda row: row[f"efficiency_{gpus}_gpus"])
        figure = f"{percent(best[f'efficiency_{gpus}_gpus'])}, {best['serial_s']:.1f} s serial"
        if reached:
            lines.append(f"{percent(goal)} on {gpus} GPUs holds in scenario {best['scenario'][:1]} ({figure}).")
        else:
            lines.append(
                f"{percent(goal)} on {gpus} GPUs holds in none of the scenarios (at best {figure}, scenario "
                f"{best['scenario'][:1]}): with {modelled['one_gpu_frame_work_s'] / gpus:.0f} s of frames per GPU, "
                "the span phase's own tail (workers finishing up to a segment apart) and per-segment costs take the "
                "rest."
            )
    return lines


def write_plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modelled = result["model"]
    rows, size = modelled["rows"], modelled["recommended_segment_frames"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for other in SEGMENT_SIZES:
        cells = [cell(rows, other, gpus) for gpus in GPU_COUNTS]
        width = 2.5 if other == size else 1
        left.plot(GPU_COUNTS, [c["efficiency"] for c in cells], marker="o", lw=width, label=f"{other} frames")
    spans = [cell(rows, size, gpus)["gpu_busy_spans"] for gpus in GPU_COUNTS]
    left.plot(GPU_COUNTS, spans, ls="--", color="black", label=f"{size} frames: GPU busy in the span phase")
    for gpus, goal in GOALS.items():
        left.plot([gpus], [goal], marker="*", color="red", markersize=14, ls="none")
    left.plot([], [], marker="*", color="red", ls="none", label="goals (8 GPUs 95 %, 32 GPUs 85 %)")
    left.set_xscale("log", base=2)
    left.set_xticks(GPU_COUNTS, [str(g) for g in GPU_COUNTS])
    left.set_xlabel("GPUs (one span each)")
    left.set_ylabel("efficiency, T(1) / (G x T(G)), trigger to output")
    left.set_ylim(0, 1.05)
    left.set_title("One hour of 1080p, by segment size")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    kills = modelled["killed_pod"]
    sizes = [row["segment_frames"] for row in kills]
    right.plot(sizes, [row["lost_max_s"] for row in kills], marker="o", label="lost per killed pod, worst (s)")
    right.plot(sizes, [row["lost_mean_s"] for row in kills], marker="o", label="lost per killed pod, mean (s)")
    right.axhline(LOST_GOAL_S, color="red", ls=":", lw=0.8, label="goal, 10 s")
    overhead = right.twinx()
    ratios = [100 * modelled["segment_costs"][s]["ratios"]["per_segment"] for s in sizes]
    overhead.plot(sizes, ratios, color="grey", ls="--", marker="s", label="per-segment cost, % of its work")
    overhead.set_ylabel("per-segment cost, % of the segment's work")
    right.set_xscale("log", base=2)
    right.set_xticks(sizes, [str(s) for s in sizes])
    right.set_xlabel("segment frames")
    right.set_ylabel("GPU seconds")
    right.set_title("Segment size: what a kill loses, what a segment costs (8 GPUs)")
    handles = right.get_legend_handles_labels()
    more = overhead.get_legend_handles_labels()
    right.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper left")
    right.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# The worker's measured parts, and the bench_cpu_stages.py stage (1080p) whose after/before ratio scales each.
CUT_STAGES = {
    "detector": "detect: pre/post-processing",
    "align": "swap: align (warp to arcface_128)",
    "tiling": "swap: pixel-boost tiling",
    "swapper_tensors": "swap: model input/output conversion",
    "crop_mask": "swap: mask",
    "color_correction": "swap: colour correction",
    "paste_back": "swap: paste back",
}
WRITE_BACK_STAGE = "convert: processed frame -> encoder's yuv420p"


def with_cuts(worker: WorkerCosts, cpu_stages: dict[str, Any]) -> WorkerCosts:
    """``worker`` with each part the CPU cuts changed scaled by its after/before ratio, both measured in one run of
    bench_cpu_stages.py (this machine's absolute figures differ between runs; the ratios hold). Decode, the encoder
    and the parts the cuts left alone keep their measured costs. Today the swap's crops are pasted into the encoder's
    planes: paste back has no stage of its own after, and its cost is in the write-back's ratio."""
    sizes = cpu_stages["sizes"]["1080p"]
    before, after = sizes["inswapper"]["before"]["stages_ms"], sizes["inswapper"]["after"]["stages_ms"]
    parts = {
        part: round(ms * after.get(CUT_STAGES[part], 0.0) / before[CUT_STAGES[part]], 3) if part in CUT_STAGES else ms
        for part, ms in worker.swap_cpu_parts_ms.items()
    }
    write_back = sizes["write_back"]["after"][WRITE_BACK_STAGE] / sizes["write_back"]["before"][WRITE_BACK_STAGE]
    return replace(worker, swap_cpu_parts_ms=parts, encoder_rgb_s_per_frame=worker.encoder_rgb_s_per_frame * write_back)


def with_serial_inputs(measured: Measured, found: list[dict[str, Any]]) -> Measured:
    """``measured`` with prepare's target checks (CPU, the fastest sample of each process, their median) and the index
    join's CPU (the median of the processes' medians) as bench_serial.py measured them."""
    checks = statistics.median(min(sample["target_checks_cpu_s"] for sample in one["prepare"]) for one in found)
    return replace(
        measured,
        run=replace(measured.run, target_checks_s=round(checks, 4)),
        join=replace(
            measured.join,
            per_segment_s=statistics.median(one["join"]["per_segment_s"] for one in found),
            per_frame_s=statistics.median(one["join"]["per_frame_s"] for one in found),
        ),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    defaults = Stated()
    for item in fields(Stated):
        value = getattr(defaults, item.name)
        parser.add_argument("--" + item.name.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--measured", type=Path, help="reuse the `measured` block of an earlier scaling.json")
    parser.add_argument(
        "--cpu-stages",
        type=Path,
        help="scale the measured worker costs by the after/before ratios of a bench_cpu_stages.py run (issue 24's cuts)",
    )
    parser.add_argument(
        "--serial",
        type=Path,
        help="take prepare's target checks and the index join's CPU from a bench_serial.py --model-inputs run "
        "(its `after` tree)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    stated = Stated(**{item.name: getattr(args, item.name) for item in fields(Stated)})
    scaled_by, unscaled = None, None  # the cuts already in the measured costs, and the costs before them
    if args.measured:
        earlier = json.loads(args.measured.read_text())
        scaled_by, unscaled = earlier.get("cpu_stages"), earlier.get("measured_before_cuts")
        # Scaling again starts from the costs as measured, never from a scaled copy.
        measured = Measured.from_dict(unscaled if args.cpu_stages and unscaled else earlier["measured"])
    else:
        with tempfile.TemporaryDirectory(prefix="bench-scaling-") as scratch:
            measured = measure(Path(scratch))
    serial_by = None
    if args.serial:
        serial = json.loads(args.serial.read_text())
        measured, serial_by = with_serial_inputs(measured, serial["model_inputs"]["after"]), serial["command"]
    if args.cpu_stages:
        unscaled = measured.as_dict()
        measured = replace(measured, worker=with_cuts(measured.worker, json.loads(args.cpu_stages.read_text())))
    result: dict[str, Any] = {
        "command": "python bench/bench_scaling.py" + ("" if not argv else " " + " ".join(argv)),
        "cpu_stages": json.loads(args.cpu_stages.read_text())["command"] if args.cpu_stages else scaled_by,
        "serial_inputs": serial_by,
        "machine": machine(),
        "measured": measured.as_dict(),
        "measured_before_cuts": unscaled,
        "stated": asdict(stated),
        "model": model(measured, stated),
    }
    summarise(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out / "scaling.md")
    write_plot(result, args.out / "scaling.png")
    print(json.dumps(result["model"]["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
