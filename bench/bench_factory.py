"""The content factory (many faces x one standard video): measured at small scale through Airflow, with the target's
analysis cold and then warm, and modelled at full scale: 100 one-minute 1080p videos from 100 faces on 8 GPUs.

Measured: distinct source faces, made reproducibly from public-domain images that install with the environment
(scikit-image's astronaut, matplotlib's Grace Hopper) by crops, flips, light and colour changes, each checked by the
engine's own source step (``prepare_identity``: a face is found and meshed), each swapped into the demo clip
(``tests/support/demo.py``) by the real DAG (``airflow dags test facefusion_swap`` on an isolated AIRFLOW_HOME,
local backend, default options). Cold: every run gets a fresh ``[facefusion] work_root``, so it analyses the target
itself. Warm: every run shares one work root whose analysis the first cold run stored. Cold and warm runs alternate,
so the machine's other load falls on both alike.

Modelled: ``scaling_model`` with the costs ``bench_scaling`` measured (``bench/results/scaling.json``), the target's
stored analysis skipping detection and landmarks (GPU and CPU) for every segment analysed before.

    python bench/bench_factory.py                  # 5 faces, a few minutes on 2 cores; writes bench/results/factory.*
    python bench/bench_factory.py --faces 20       # the whole set (about half an hour on 2 cores)
    python bench/bench_factory.py --model-only     # the full-scale model, keeping the measured part of factory.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # synth, readback, demo

from bench_scaling import percent
from demo import make_demo_inputs
from demo_airflow import airflow_env, dags_test, init_home, run_succeeded, swap_conf
from scaling_measure import Measured
from scaling_model import HELPING, SPAN_PODS, STANDING, WORKERS_SETTING, PodRate, Stated, run_plan, simulate
from worker_runs import machine

RESULTS = Path(__file__).resolve().parent / "results"
FACES = 20  # the set made and checked
FULL = {"runs": 100, "video_seconds": 60.0, "gpus": 8, "minutes_goal": 12.0, "busy_goal": 0.95, "reference_minutes": 40}
SEGMENT_FRAMES = 256
WAVES = (1, 2, 4)
SUMMARY_LINE = re.compile(r'(\{"analysed_frames".*?\}\}) ')
TASK_MARK = re.compile(r"^(\S+Z) .*\[DAG TEST\] (starting|end task) task_id=(\w+)")

# --- faces -------------------------------------------------------------------------------------------------------

Image = Any  # an H x W x 3 uint8 RGB array


def base_faces() -> list[tuple[str, Image]]:
    """Two people, public domain, installed with scikit-image and matplotlib (no download)."""
    import matplotlib.cbook
    import numpy as np
    from skimage import data

    from facefusion_provider.media.images import read_image

    path = matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    with open(str(path), "rb") as handle:
        hopper = read_image(handle, "grace_hopper.jpg")
    return [("astronaut", np.asarray(data.astronaut())), ("hopper", np.asarray(hopper))]  # type: ignore[no-untyped-call]


def variants() -> list[tuple[str, Callable[[Image], Image]]]:
    """Crops, flips, light and colour: the same person, other pixels (so another source, another work id)."""
    import cv2
    import numpy as np

    def crop(fraction: float) -> Callable[[Image], Image]:
        def apply(image: Image) -> Image:
            height, width = image.shape[:2]
            dy, dx = int(height * fraction / 2), int(width * fraction / 2)
            return image[dy : height - dy, dx : width - dx]

        return apply

    def gain(factor: float) -> Callable[[Image], Image]:
        return lambda image: np.clip(image.astype(np.float32) * factor, 0, 255).astype(np.uint8)

    def hue(shift: int) -> Callable[[Image], Image]:
        def apply(image: Image) -> Image:
            hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)
            hsv[..., 0] = (hsv[..., 0].astype(np.int32) + shift) % 180
            return np.asarray(cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB), np.uint8)

        return apply

    def tint(rgb: tuple[float, float, float]) -> Callable[[Image], Image]:
        return lambda image: np.clip(image.astype(np.float32) * np.asarray(rgb, np.float32), 0, 255).astype(np.uint8)

    def rotate(degrees: float) -> Callable[[Image], Image]:
        def apply(image: Image) -> Image:
            height, width = image.shape[:2]
            matrix = cv2.getRotationMatrix2D((width / 2, height / 2), degrees, 1.0)
            return np.asarray(cv2.warpAffine(image, matrix, (width, height), borderMode=cv2.BORDER_REFLECT), np.uint8)

        return apply

    def grey(image: Image) -> Image:
        return np.asarray(cv2.cvtColor(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB), np.uint8)

    def scale(factor: float) -> Callable[[Image], Image]:
        return lambda image: np.asarray(cv2.resize(image, None, fx=factor, fy=factor), np.uint8)

    return [
        ("original", lambda image: image),
        ("mirrored", lambda image: np.ascontiguousarray(image[:, ::-1])),
        ("cropped", crop(0.2)),
        ("brighter", gain(1.25)),
        ("darker", gain(0.75)),
        ("warm", tint((1.1, 1.0, 0.85))),
        ("cool", tint((0.85, 1.0, 1.1))),
        ("grey", grey),
        ("tilted", rotate(8.0)),
        ("smaller", scale(0.7)),
        ("hue", hue(12)),
        ("mirrored-cropped", lambda image: np.ascontiguousarray(crop(0.1)(image)[:, ::-1])),
        ("tilted-left", rotate(-8.0)),
    ]


def make_faces(folder: Path, count: int = FACES) -> list[dict[str, Any]]:
    """``count`` face images, the two people in turn, each one whose face the engine's source step finds and meshes."""
    from facefusion_provider import storage
    from facefusion_provider.engine.processors.chain import prepare_identity
    from facefusion_provider.exceptions import FaceFusionError
    from facefusion_provider.media.images import encode_image
    from facefusion_provider.options import Options

    folder.mkdir(parents=True, exist_ok=True)
    per_person = count // 2
    people: list[list[dict[str, Any]]] = []
    rejected: list[str] = []
    for person, image in base_faces():
        made: list[dict[str, Any]] = []
        people.append(made)
        for name, change in variants():
            if len(made) == per_person:
                break
            path = folder / f"{person}-{name}.png"
            storage.write_bytes_atomic(str(path), encode_image(change(image), "png"))
            try:
                identity = prepare_identity([str(path)], None, Options(), None)
            except FaceFusionError as error:
                rejected.append(f"{path.name}: {error}")
                path.unlink()
                continue
            made.append({"face": path.name, "path": str(path), "meshed": "classic" in identity})
    faces = [face for pair in zip(*people, strict=False) for face in pair]
    if len(faces) < count:
        raise RuntimeError(f"only {len(faces)} usable faces of {count}: {rejected}")
    return faces


# --- runs through Airflow ----------------------------------------------------------------------------------------


def task_seconds(log: str, task: str) -> float:
    """Seconds from ``[DAG TEST] starting`` to ``end`` of ``task`` in a ``dags test`` log (mapped: first to last)."""
    from datetime import datetime

    marks = [
        (kind, datetime.fromisoformat(stamp.replace("Z", "+00:00")))
        for stamp, kind, name in (match.groups() for match in map(TASK_MARK.match, log.splitlines()) if match)
        if name == task
    ]
    starts = [at for kind, at in marks if kind == "starting"]
    ends = [at for kind, at in marks if kind == "end task"]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else float("nan")


def span_summaries(log: str) -> list[dict[str, Any]]:
    """The worker's JSON summary line of each swap_span task (SpanResult)."""
    return [json.loads(match.group(1)) for match in SUMMARY_LINE.finditer(log)]


def one_run(env: dict[str, str], conf: dict[str, Any], root: Path) -> dict[str, Any]:
    run_env = {**env, "AIRFLOW__FACEFUSION__WORK_ROOT": root.absolute().as_uri()}
    began = time.perf_counter()
    result = dags_test(conf, run_env)
    seconds = time.perf_counter() - began
    log = result.stdout + result.stderr
    if not run_succeeded(result):
        raise RuntimeError(f"dags test failed:\n{log[-4000:]}")
    spans = span_summaries(log)
    return {
        "seconds": round(seconds, 2),
        "swap_span_task_s": round(task_seconds(log, "swap_span"), 2),
        "span_worker_s": round(sum(span["timings"]["total_s"] for span in spans), 2),
        "model_load_s": round(sum(span["timings"]["load_s"] for span in spans), 2),
        "analysed_frames": sum(span["analysed_frames"] for span in spans),
        "analysis_reused_frames": sum(span["analysis_reused_frames"] for span in spans),
        "spans": len(spans),
    }


def schedule(count: int) -> Iterator[tuple[str, int]]:
    """cold 0 (it stores the shared analysis), then warm 0, cold 1, warm 1, ...: alternating, so drifting load on the
    machine falls on both alike."""
    yield "cold", 0
    for number in range(count):
        yield "warm", number
        if number + 1 < count:
            yield "cold", number + 1


def measure_runs(out: Path, faces: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    source_dummy, target = make_demo_inputs(str(out / "inputs"))
    del source_dummy  # the demo's own face is not one of these
    env = airflow_env(out / "airflow")
    init_home(env)
    shared = out / "roots" / "cold-0"  # cold run 0 stores the analysis there; every warm run reads it
    rows = []
    for phase, number in schedule(count):
        face = faces[number]
        root = out / "roots" / f"cold-{number}" if phase == "cold" else shared
        conf = swap_conf([face["path"]], target, str(out / "outputs" / f"{phase}-{number:02d}.mp4"))
        row = {"phase": phase, "face": face["face"], **one_run(env, conf, root)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def summarise_runs(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def median(phase: str, key: str) -> float:
        return round(float(statistics.median(row[key] for row in rows if row["phase"] == phase)), 2)

    keys = ("seconds", "swap_span_task_s", "span_worker_s", "analysed_frames", "analysis_reused_frames")
    cold = {key: median("cold", key) for key in keys}
    warm = {key: median("warm", key) for key in keys}
    return {
        "cold": cold,
        "warm": warm,
        "ratio_run": round(warm["seconds"] / cold["seconds"], 3),
        "ratio_span_task": round(warm["swap_span_task_s"] / cold["swap_span_task_s"], 3),
        "ratio_span_worker": round(warm["span_worker_s"] / cold["span_worker_s"], 3),
    }


# --- the full-scale model ----------------------------------------------------------------------------------------


def full_scale(measured: Measured, stated: Stated) -> list[dict[str, Any]]:
    """100 runs, each one standard one-minute 1080p video with its own face, on 8 GPUs, triggered together."""
    frames = round(FULL["video_seconds"] * stated.frame_rate)
    gpus = int(FULL["gpus"])
    rows = []
    plans = [(wave, 1, SPAN_PODS, True, False) for wave in WAVES]
    plans += [(1, 2, SPAN_PODS, True, False), (1, 1, HELPING, True, False), (1, 1, STANDING, True, False)]
    plans += [(1, 1, STANDING, True, True), (1, 1, STANDING, False, False)]
    for wave, pods_per_gpu, mode, reuse, cold in plans:
        result, _, segments = simulate(
            measured,
            stated,
            SEGMENT_FRAMES,
            gpus,
            runs=int(FULL["runs"]),
            wave=wave,
            frames=frames,
            workers=mode,
            pods_per_gpu=pods_per_gpu,
            reuse_analysis=reuse,
            started_with_runs=cold,  # the standing workers' pods start with the batch: their GPUs count from then
        )
        busy_from = 0.0 if cold else result.first_pod_s
        rows.append(
            {
                "spans_per_run": wave,
                "pods_per_gpu": pods_per_gpu,
                "workers": mode,
                "cold": cold,
                "analysis_reused": reuse,
                "pods": result.pods,
                "minutes": round(result.makespan_s / 60, 2),
                "gpu_busy": round(result.busy_fraction(gpus, (busy_from, result.last_span_end_s)), 4),
                "gpu_busy_trigger_to_last_output": round(result.busy_fraction(gpus), 4),
                "segments_analysed": result.analysed_segments,
                "segments_worked_cold": result.cold_segments,
                "segments": segments.segments * int(FULL["runs"]),
            }
        )
    return rows


def model(measured: Measured, stated: Stated) -> dict[str, Any]:
    rows = full_scale(measured, stated)
    best = min((row for row in rows if row["analysis_reused"] and not row["cold"]), key=lambda row: row["minutes"])
    cold, warm = PodRate.of(measured, stated), PodRate.of(measured, stated, warm=True)
    _, hops, _ = run_plan(measured, stated, SEGMENT_FRAMES, 1, frames=round(FULL["video_seconds"] * stated.frame_rate))
    return {
        "pod_fixed_s": round(hops.span_task_s + hops.span_pod_s, 2),
        "pod_fps": round(cold.fps, 2),
        "pod_fps_with_stored_analysis": round(warm.fps, 2),
        "rows": rows,
        "recommended": best,
        "summary": {
            "minutes": best["minutes"],
            "gpu_busy": best["gpu_busy"],
            "spans_per_run": best["spans_per_run"],
            "workers": best["workers"],
            "met": {
                "minutes": best["minutes"] <= FULL["minutes_goal"],
                "gpu_busy": best["gpu_busy"] >= FULL["busy_goal"],
            },
        },
    }


# --- reporting ---------------------------------------------------------------------------------------------------


def write_markdown(result: dict[str, Any], path: Path) -> None:
    measured, modelled = result["measured"], result["model"]
    summary = measured["summary"]
    full = modelled["summary"]
    lines = [
        "# Content factory: many faces x one standard video",
        "",
        f"Command: `{result['command']}` ({result['machine']}).",
        "",
        "## Measured through Airflow (small scale)",
        "",
        f"Command: `{measured.get('command', result['command'])}`.",
        "",
        f"{measured['faces_run']} of {len(measured['faces'])} faces (each checked by the engine's source step), each "
        f"swapped into the demo clip ({measured['clip']}) by `airflow dags test facefusion_swap` with the default options "
        "(the classic swapper: its analysis is detection and the 468-point mesh). Cold: a fresh `[facefusion] work_root` "
        "per run (nothing shared). Warm: one shared work root, whose target analysis the first cold run stored.",
        "",
        "| | seconds per run (dags test) | swap_span task s | span worker s | frames analysed | analysis reused |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for phase in ("cold", "warm"):
        row = summary[phase]
        lines.append(
            f"| {phase} (median) | {row['seconds']:.1f} | {row['swap_span_task_s']:.1f} | {row['span_worker_s']:.1f} | "
            f"{row['analysed_frames']:.0f} | {row['analysis_reused_frames']:.0f} |"
        )
    lines += [
        f"| warm / cold | {summary['ratio_run']:.3f} | {summary['ratio_span_task']:.3f} | "
        f"{summary['ratio_span_worker']:.3f} | | |",
        "",
        "Every run pays Airflow's and the worker processes' fixed costs (`dags test` start, six tasks, three worker "
        "processes, model loads) whatever the cache; the stored analysis shortens only the frame work of the span.",
        "",
        "Runs in order:",
        "",
        "| phase | face | seconds | swap_span task s | span worker s | analysed | reused |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in measured["runs"]:
        lines.append(
            f"| {row['phase']} | {row['face']} | {row['seconds']:.1f} | {row['swap_span_task_s']:.1f} | "
            f"{row['span_worker_s']:.1f} | {row['analysed_frames']} | {row['analysis_reused_frames']} |"
        )
    lines += [
        "",
        f"## Modelled at full scale: {FULL['runs']} one-minute 1080p videos from {FULL['runs']} faces on "
        f"{FULL['gpus']} GPUs",
        "",
        f"**{full['minutes']:.1f} minutes end to end** (goal <= {FULL['minutes_goal']:.0f}, the reference design under "
        f"{FULL['reference_minutes']}): {'met' if full['met']['minutes'] else '**not met**'}; **GPU busy "
        f"{percent(full['gpu_busy'])}** (goal >= 95 %): {'met' if full['met']['gpu_busy'] else '**not met**'} "
        f"({full['workers']}, `{WORKERS_SETTING[full['workers']]}`).",
        "",
        f"One standard target, {FULL['runs']} runs triggered together, {SEGMENT_FRAMES}-frame segments; each run's "
        "validate, prepare, plan, merge and cleanup on CPU beside the pool. A pod swaps "
        f"{modelled['pod_fps']:.1f} frames per second analysing the target, {modelled['pod_fps_with_stored_analysis']:.1f} "
        "with its stored analysis (bench_scaling's measured costs; detection and landmarks are a stated share of the "
        "GPU's inference). GPU busy: frame work over G x the time from the first pod to the last span's end.",
        "",
        "| who works the spans | spans a run | pods per GPU | target analysis reused | pods started | minutes | "
        "GPU busy | trigger to last output | segments worked without the analysis |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in modelled["rows"]:
        lines.append(
            f"| {row['workers']}{', started with the batch' if row['cold'] else ''} (`{WORKERS_SETTING[row['workers']]}`) | "
            f"{row['spans_per_run'] if row['workers'] != STANDING else '-'} | {row['pods_per_gpu']} | "
            f"{'yes' if row['analysis_reused'] else 'no (100 different videos)'} | {row['pods']} | {row['minutes']:.1f} "
            f"| {percent(row['gpu_busy'])} | {percent(row['gpu_busy_trigger_to_last_output'])} | "
            f"{row['segments_worked_cold'] if row['analysis_reused'] else row['segments']} of {row['segments']} |"
        )
    lines += ["", *verdict(modelled, modelled["pod_fixed_s"]), "", "![factory](factory.png)"]
    path.write_text("\n".join(lines) + "\n")


def verdict(modelled: dict[str, Any], hops_s: float) -> list[str]:
    rows = modelled["rows"]
    pods = min(
        (row for row in rows if row["workers"] == SPAN_PODS and row["pods_per_gpu"] == 1),
        key=lambda row: row["minutes"],
    )
    helping = next(row for row in rows if row["workers"] == HELPING)
    standing = next(row for row in rows if row["workers"] == STANDING and row["analysis_reused"] and not row["cold"])
    started = next(row for row in rows if row["cold"])
    shared = next(row for row in rows if row["pods_per_gpu"] == 2)
    no_reuse = next(row for row in rows if not row["analysis_reused"])
    frames_s = FULL["video_seconds"] * 30 / modelled["pod_fps_with_stored_analysis"]
    return [
        f"With span pods alone (`span_workers = task`) every run starts a pod that pays about {hops_s:.0f} s (Airflow "
        f"task, pod start, model load) for about {frames_s:.0f} s of frames: at best {pods['minutes']:.1f} minutes "
        f"and {percent(pods['gpu_busy'])} busy ({pods['spans_per_run']} span a run; more spans only start more pods; "
        f"two pods a GPU, time-slicing, {shared['minutes']:.1f} minutes and {percent(shared['gpu_busy'])}).",
        "",
        "Span pods that go on to other live runs' free segments once their own run is done (`help_other_runs_seconds`, "
        f"unbounded here) start {helping['pods']} pods instead of {pods['pods']}: {helping['minutes']:.1f} minutes, "
        f"{percent(helping['gpu_busy'])} busy; the rest is every later run's span task passing through a pool slot, "
        "for Airflow's task time, to find its span committed.",
        "",
        f"Standing workers (`span_workers = standing`: `facefusion-worker serve`, one per GPU, up before the batch) "
        f"start no pod per run and hold no pool slot while runs wait: {standing['minutes']:.1f} minutes, "
        f"{percent(standing['gpu_busy'])} busy (started with the batch, their GPUs counted from the trigger: "
        f"{started['minutes']:.1f} minutes, {percent(started['gpu_busy'])}). Each takes a run nobody has started, whole (one seek, one switch of "
        "identity), and the tail is split between them. The first runs, started together, each analyse the target "
        f"({standing['segments_worked_cold']} segments worked without the stored analysis): nothing claims a "
        "segment's analysis, so runs that start together repeat it; every later run reuses it.",
        "",
        f"The stored analysis saves little here: a pod is bound by its CPU cores, and detection is "
        f"{percent(1 - modelled['pod_fps'] / modelled['pod_fps_with_stored_analysis'])} of a frame's cost there "
        f"(100 different videos, nothing reused: {no_reuse['minutes']:.1f} minutes).",
    ]


def write_plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["measured"]["runs"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for phase, colour in (("cold", "tab:red"), ("warm", "tab:blue")):
        chosen = [row for row in runs if row["phase"] == phase]
        names = [f"{row['face'].removesuffix('.png')}, {phase}" for row in chosen]
        left.bar(
            names,
            [row["swap_span_task_s"] for row in chosen],
            color=colour,
            label=f"{phase}: swap_span task",
        )
        left.bar(
            names,
            [row["seconds"] - row["swap_span_task_s"] for row in chosen],
            bottom=[row["swap_span_task_s"] for row in chosen],
            color=colour,
            alpha=0.3,
            label=f"{phase}: the rest of the run",
        )
    left.set_ylabel("seconds per run (airflow dags test)")
    left.set_title("Measured: the demo clip per face, analysis cold vs warm")
    left.tick_params(axis="x", labelsize=6, rotation=90)
    left.legend(fontsize=7)
    rows = result["model"]["rows"]
    labels = [
        f"{r['spans_per_run']} span, {r['pods_per_gpu']} pod/GPU"
        + {SPAN_PODS: "", HELPING: ", then other runs", STANDING: ", standing"}[r["workers"]]
        + (" (started with the batch)" if r["cold"] else "")
        + ("" if r["analysis_reused"] else ", no reuse")
        for r in rows
    ]
    right.barh(labels, [r["minutes"] for r in rows], color="tab:grey")
    right.axvline(FULL["minutes_goal"], color="red", ls=":", label="goal, 12 min")
    for index, row in enumerate(rows):
        right.text(row["minutes"] + 0.2, index, f"{percent(row['gpu_busy'])} busy", va="center", fontsize=7)
    right.set_xlabel("minutes, trigger to last output")
    right.set_title("Modelled: 100 one-minute 1080p videos, 100 faces, 8 GPUs")
    right.tick_params(axis="y", labelsize=7)
    right.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--faces", type=int, default=20, help=f"faces run through Airflow (of the {FACES} made)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-factory"), help="scratch folder (kept)")
    parser.add_argument("--scaling", type=Path, default=RESULTS / "scaling.json", help="bench_scaling's results")
    parser.add_argument("--model-only", action="store_true", help="keep the measured part of the existing results")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    scaling = json.loads(args.scaling.read_text())
    measured_costs = Measured.from_dict(scaling["measured"])
    stated = Stated(
        **{item.name: scaling["stated"][item.name] for item in fields(Stated) if item.name in scaling["stated"]}
    )
    stated = replace(stated, video_seconds=FULL["video_seconds"])
    if args.model_only:
        measured = json.loads((args.out / "factory.json").read_text())["measured"]
    else:
        faces = make_faces(args.work / "faces")
        rows = measure_runs(args.work, faces, min(args.faces, len(faces)))
        measured = {
            "command": "python bench/bench_factory.py" + ("" if not argv else " " + " ".join(argv)),
            "faces": faces,
            "faces_run": min(args.faces, len(faces)),
            "clip": "demo: carphone at 352x288, 300 frames, one 300-frame segment",
            "runs": rows,
            "summary": summarise_runs(rows),
        }
    result = {
        "command": "python bench/bench_factory.py" + ("" if not argv else " " + " ".join(argv)),
        "machine": machine(),
        "measured": measured,
        "model": model(measured_costs, stated),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "factory.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out / "factory.md")
    write_plot(result, args.out / "factory.png")
    print(json.dumps({"measured": measured["summary"], "model": result["model"]["summary"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
