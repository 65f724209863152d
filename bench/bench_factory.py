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
stored analysis skipping detection and landmarks (GPU and CPU) for every segment analysed before. Then the same with a
voice per row (lip sync after the swap): each run's voice prepared once (``bench/results/lip-sync.json``'s measured CPU
per minute of voice, and the voice extractor's model at a stated GPU cost) before its frames, and the lip syncer on
every frame (its measured CPU work around the model, and a stated GPU cost per face).

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
from dataclasses import dataclass, fields, replace
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

# The voice per row (lip sync): bench/bench_lip_sync.py's measured CPU seconds per minute of voice of the steps prepare
# runs once per work for a voice (the output's sound encoded as aac, the default), and its CPU ms per frame of the
# lip syncer's work around the model (wav2lip_96, one face), from bench/results/lip-sync.json.
LIP_SYNC_RESULTS = RESULTS / "lip-sync.json"
VOICE_PREPARE_STEPS = (
    "decode to 48 kHz stereo",
    "voice extraction around the model (its STFTs, chunks, overlap)",
    "mel spectrogram",
    "encode aac",
)
LIP_SYNC_MODEL = "wav2lip_96"
# Stated, not measured (no GPU and no model file here): wav2lip_96's multiply-adds per face, counted from its published
# layer list (Rudrabha/Wav2Lip models/wav2lip.py: the 6-channel 96 px face encoder, the 80 x 16 mel encoder, the
# decoder with its skips), are 3.97 G, 2.3 % of inswapper_128's 174.6 G (bench/make_inswapper_standin.py): 0.14 ms at
# the rate the model states for inswapper_128. A call with one face (FaceFusion runs the lip syncer face by face) of so
# small a network is bound by its kernel launches (about 70 convolutions with their activations), not its arithmetic:
# stated as 1 ms a face.
WAV2LIP_96_GMAC, INSWAPPER_128_GMAC = 3.97, 174.6
LIP_SYNC_GPU_MS_PER_FACE = 1.0
# Stated, not measured: the voice extractor's model (kim_vocal_2, MDX-Net) on the worker's GPU. A minute of voice at
# 48 kHz is 16 chunks of 240 x 1024 samples every 180 x 1024, each one (1, 4, 3072, 256) STFT piece through the model:
# taken as 125 ms a piece, 2 s a minute of voice.
VOICE_MODEL_GPU_S_PER_MINUTE = 2.0


@dataclass(frozen=True)
class VoiceCosts:
    """What a voice per row adds to a run: its preparation once (on the critical path), the lip syncer per frame."""

    prepare_cpu_s: float  # decode, extraction around the model, mel, the sound's encode: CPU seconds for the voice
    extractor_gpu_s: float  # the voice extractor's model on the GPU for the voice (stated)
    lip_sync_cpu_s_per_face: float  # the lip syncer's work around its model on each frame (measured, stand-ins)
    lip_sync_gpu_s_per_face: float  # its model on the GPU (stated)

    @classmethod
    def of(cls, lip_sync: dict[str, Any], voice_seconds: float) -> VoiceCosts:
        steps = {step["step"]: step["cpu_s_per_minute"] for step in lip_sync["voice"]}
        frames = {row["options"]["lip_syncer_model"]: row for row in lip_sync["results"]}[LIP_SYNC_MODEL]
        minutes = voice_seconds / 60
        return cls(
            prepare_cpu_s=round(sum(steps[step] for step in VOICE_PREPARE_STEPS) * minutes, 2),
            extractor_gpu_s=VOICE_MODEL_GPU_S_PER_MINUTE * minutes,
            lip_sync_cpu_s_per_face=frames["cpu_ms_per_frame"] / frames["faces_per_frame"] / 1000,
            lip_sync_gpu_s_per_face=LIP_SYNC_GPU_MS_PER_FACE / 1000,
        )

    @property
    def prepare_s(self) -> float:
        return self.prepare_cpu_s + self.extractor_gpu_s

    def applied(self, measured: Measured, stated: Stated) -> tuple[Measured, Stated]:
        """The costs with the voice's: its preparation in prepare's own work (beside the source identity), the lip
        syncer's CPU work in the frame's swap work, its model in the GPU's inference (detection's time unchanged)."""
        worker = measured.worker
        parts = {**worker.swap_cpu_parts_ms, "lip syncer": self.lip_sync_cpu_s_per_face * 1000}
        inference_s = 1 / stated.gpu_inference_fps + self.lip_sync_gpu_s_per_face * stated.faces_per_frame
        return replace(measured, worker=replace(worker, swap_cpu_parts_ms=parts)), replace(
            stated,
            identity_s=stated.identity_s + self.prepare_s,
            gpu_inference_fps=1 / inference_s,
            gpu_analysis_share=stated.gpu_analysis_share / stated.gpu_inference_fps / inference_s,
        )


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


def full_scale(measured: Measured, stated: Stated, voice: VoiceCosts | None = None) -> list[dict[str, Any]]:
    """100 runs, each one standard one-minute 1080p video with its own face (and ``voice``: its own voice, lip synced),
    on 8 GPUs, triggered together."""
    frames = round(FULL["video_seconds"] * stated.frame_rate)
    gpus = int(FULL["gpus"])
    runs = int(FULL["runs"])
    if voice is not None:
        measured, stated = voice.applied(measured, stated)
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
            runs=runs,
            wave=wave,
            frames=frames,
            workers=mode,
            pods_per_gpu=pods_per_gpu,
            reuse_analysis=reuse,
            started_with_runs=cold,  # the standing workers' pods start with the batch: their GPUs count from then
            worker_prepare_s=0.0 if voice is None else voice.prepare_s,
        )
        busy_from = 0.0 if cold else result.first_pod_s
        window = (busy_from, result.last_span_end_s)
        # A standing worker preparing a voice holds its GPU; only the extractor's model keeps the GPU busy then.
        idle_s = runs * voice.prepare_cpu_s if voice is not None and mode == STANDING else 0.0
        rows.append(
            {
                "spans_per_run": wave,
                "pods_per_gpu": pods_per_gpu,
                "workers": mode,
                "cold": cold,
                "analysis_reused": reuse,
                "pods": result.pods,
                "minutes": round(result.makespan_s / 60, 2),
                "gpu_busy": round(result.busy_fraction(gpus, window) - idle_s / gpus / (window[1] - window[0]), 4),
                "gpu_busy_trigger_to_last_output": round(
                    result.busy_fraction(gpus) - idle_s / gpus / result.last_span_end_s, 4
                ),
                "segments_analysed": result.analysed_segments,
                "segments_worked_cold": result.cold_segments,
                "segments": segments.segments * runs,
            }
        )
    return rows


def model(measured: Measured, stated: Stated, voice: VoiceCosts) -> dict[str, Any]:
    rows = full_scale(measured, stated)
    cold, warm = PodRate.of(measured, stated), PodRate.of(measured, stated, warm=True)
    _, hops, _ = run_plan(measured, stated, SEGMENT_FRAMES, 1, frames=round(FULL["video_seconds"] * stated.frame_rate))
    voiced_measured, voiced_stated = voice.applied(measured, stated)
    voiced_rows = full_scale(measured, stated, voice)
    return {
        "pod_fixed_s": round(hops.span_task_s + hops.span_pod_s, 2),
        "pod_fps": round(cold.fps, 2),
        "pod_fps_with_stored_analysis": round(warm.fps, 2),
        "rows": rows,
        "recommended": _best(rows),
        "summary": _summary(_best(rows)),
        "voice": {
            "costs": {
                "voice_seconds": FULL["video_seconds"],
                "prepare_cpu_s": voice.prepare_cpu_s,
                "prepare_cpu_steps": list(VOICE_PREPARE_STEPS),
                "extractor_gpu_s": voice.extractor_gpu_s,
                "lip_syncer_model": LIP_SYNC_MODEL,
                "lip_sync_cpu_ms_per_face": round(voice.lip_sync_cpu_s_per_face * 1000, 2),
                "lip_sync_gpu_ms_per_face": round(voice.lip_sync_gpu_s_per_face * 1000, 2),
                "wav2lip_96_gmac": WAV2LIP_96_GMAC,
                "inswapper_128_gmac": INSWAPPER_128_GMAC,
                "stated": ["extractor_gpu_s", "lip_sync_gpu_ms_per_face"],
            },
            "pod_fps": round(PodRate.of(voiced_measured, voiced_stated).fps, 2),
            "pod_fps_with_stored_analysis": round(PodRate.of(voiced_measured, voiced_stated, warm=True).fps, 2),
            "pod_bound_by": PodRate.of(voiced_measured, voiced_stated).bound_by,
            "cpu_bound_up_to_gpu_ms_per_face": cpu_bound_up_to(measured, stated, voice),
            "rows": voiced_rows,
            "recommended": _best(voiced_rows),
            "summary": _summary(_best(voiced_rows)),
        },
    }


GPU_COST_FACTORS = (1, 2, 4, 8, 16)  # the stated lip syncer GPU cost times these: where the pod stops being CPU bound


def cpu_bound_up_to(measured: Measured, stated: Stated, voice: VoiceCosts) -> float:
    """The largest of the stated lip syncer GPU cost's multiples (ms a face) at which a pod is still bound by its CPU
    cores, analysing the target: up to there the stated figure changes nothing."""
    bound = 0.0
    for factor in GPU_COST_FACTORS:
        scaled = replace(voice, lip_sync_gpu_s_per_face=voice.lip_sync_gpu_s_per_face * factor)
        if PodRate.of(*scaled.applied(measured, stated)).bound_by != "CPU cores":
            break
        bound = scaled.lip_sync_gpu_s_per_face * 1000
    return bound


def _best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return min((row for row in rows if row["analysis_reused"] and not row["cold"]), key=lambda row: row["minutes"])


def _summary(best: dict[str, Any]) -> dict[str, Any]:
    return {
        "minutes": best["minutes"],
        "gpu_busy": best["gpu_busy"],
        "spans_per_run": best["spans_per_run"],
        "workers": best["workers"],
        "met": {
            "minutes": best["minutes"] <= FULL["minutes_goal"],
            "gpu_busy": best["gpu_busy"] >= FULL["busy_goal"],
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
        *model_table(modelled["rows"]),
    ]
    lines += ["", *verdict(modelled, modelled["pod_fixed_s"]), "", *voice_section(modelled)]
    lines += ["", "![factory](factory.png)"]
    path.write_text("\n".join(lines) + "\n")


def model_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| who works the spans | spans a run | pods per GPU | target analysis reused | pods started | minutes | "
        "GPU busy | trigger to last output | segments worked without the analysis |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['workers']}{', started with the batch' if row['cold'] else ''} (`{WORKERS_SETTING[row['workers']]}`) | "
            f"{row['spans_per_run'] if row['workers'] != STANDING else '-'} | {row['pods_per_gpu']} | "
            f"{'yes' if row['analysis_reused'] else 'no (100 different videos)'} | {row['pods']} | {row['minutes']:.1f} "
            f"| {percent(row['gpu_busy'])} | {percent(row['gpu_busy_trigger_to_last_output'])} | "
            f"{row['segments_worked_cold'] if row['analysis_reused'] else row['segments']} of {row['segments']} |"
        )
    return lines


def voice_section(modelled: dict[str, Any]) -> list[str]:
    voice = modelled["voice"]
    costs, best = voice["costs"], voice["summary"]
    faces = modelled["summary"]
    standing = next(row for row in voice["rows"] if row["workers"] == STANDING and not row["cold"])
    pods = next(row for row in voice["rows"] if row["workers"] == SPAN_PODS and row["spans_per_run"] == 1)
    return [
        f"## Modelled with a voice per row: {FULL['runs']} faces, each speaking its own one-minute voice (lip sync)",
        "",
        f"**{best['minutes']:.1f} minutes end to end** (faces alone {faces['minutes']:.1f}; goal <= "
        f"{FULL['minutes_goal']:.0f}): {'met' if best['met']['minutes'] else '**not met**'}; **GPU busy "
        f"{percent(best['gpu_busy'])}** (goal >= 95 %): {'met' if best['met']['gpu_busy'] else '**not met**'} "
        f"({best['workers']}, `{WORKERS_SETTING[best['workers']]}`).",
        "",
        "Each run: `face_swapper` then `lip_syncer` (`" + costs["lip_syncer_model"] + "`), its own voice of "
        f"{costs['voice_seconds']:.0f} s. Its voice is prepared once, before any of its frames (on the run's critical "
        f"path): {costs['prepare_cpu_s']:.1f} CPU s measured ({', '.join(costs['prepare_cpu_steps'])}: "
        "bench/results/lip-sync.md, the extractor's model aside) plus the voice extractor's model, "
        f"**stated** at {costs['extractor_gpu_s']:.1f} s on the GPU (kim_vocal_2, MDX-Net: 16 pieces of (1, 4, 3072, "
        "256) a minute of voice; not measured: no GPU, no model file here). The lip syncer adds its work around the "
        f"model to each frame's CPU work, {costs['lip_sync_cpu_ms_per_face']:.1f} ms a face (measured on its stand-in), "
        f"and its model to the GPU's, **stated** at {costs['lip_sync_gpu_ms_per_face']:.1f} ms a face: wav2lip_96 is "
        f"{costs['wav2lip_96_gmac']:.2f} G multiply-adds a face (its published layer list), "
        f"{percent(costs['wav2lip_96_gmac'] / costs['inswapper_128_gmac'])} of inswapper_128's "
        f"{costs['inswapper_128_gmac']:.1f} G, so a one-face call is bound by its kernel launches, not its arithmetic. "
        f"A pod then works {voice['pod_fps']:.1f} frames per second analysing the target, "
        f"{voice['pod_fps_with_stored_analysis']:.1f} with its stored analysis (faces alone "
        f"{modelled['pod_fps']:.1f} and {modelled['pod_fps_with_stored_analysis']:.1f}), bound by its "
        f"{voice['pod_bound_by']} up to a lip syncer of {voice['cpu_bound_up_to_gpu_ms_per_face']:.0f} ms a face on the "
        "GPU: the stated GPU figure changes nothing below that.",
        "",
        "With standing workers the worker that starts a run prepares its voice: that time is charged to the run's "
        "work (the worker holds its GPU meanwhile), and GPU busy counts only the extractor's model of it, not its CPU "
        "steps. Span pods prepare in their own prepare pod, beside the pool (put `prepare` in `[facefusion] "
        "gpu_commands` for the extractor's GPU figure to hold: on a CPU its model takes far longer).",
        "",
        *model_table(voice["rows"]),
        "",
        f"Standing workers: {standing['minutes']:.1f} minutes, {percent(standing['gpu_busy'])} busy; span pods (one a "
        f"run): {pods['minutes']:.1f} minutes, {percent(pods['gpu_busy'])}; best {best['minutes']:.1f} minutes with "
        f"{best['workers']}. A voice per row adds, beside the lip syncer's CPU on every frame, its preparation "
        f"({costs['prepare_cpu_s'] + costs['extractor_gpu_s']:.1f} s a run, once): a standing worker does it on its "
        f"own GPU pod, so its {costs['prepare_cpu_s']:.1f} CPU s leave that GPU idle ({FULL['runs']} runs: "
        f"{FULL['runs'] * costs['prepare_cpu_s'] / FULL['gpus']:.0f} s of each of the {FULL['gpus']} GPUs), while span "
        "pods have it done beside the pool, by the prepare task. Preparing the next run's voice beside the frames "
        "(a thread of the standing worker, not built) would hide those CPU seconds.",
    ]


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
    parser.add_argument("--lip-sync", type=Path, default=LIP_SYNC_RESULTS, help="bench_lip_sync's results")
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
        "model": model(
            measured_costs, stated, VoiceCosts.of(json.loads(args.lip_sync.read_text()), FULL["video_seconds"])
        ),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "factory.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out / "factory.md")
    write_plot(result, args.out / "factory.png")
    summaries = {"model": result["model"]["summary"], "model with a voice per row": result["model"]["voice"]["summary"]}
    print(json.dumps({"measured": measured["summary"], **summaries}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
