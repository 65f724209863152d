"""The costs of a swap run on a GPU cluster, from what ``scaling_measure`` measured on this machine and the cluster
costs stated here (flags of the benchmarks), turned into ``scaling_sim`` runs.

A pod's frame rate is the slower of its process stage (GPU inference, then the swap's CPU work, a few frames side by
side) and its CPU cores (decode, encode, the swap's CPU work); with the target's analysis stored, detection and
landmarks leave both. Beyond its frames, a segment costs its encoder's extra work and its commit's CPU (on the pod's
cores), the take's wait where the pipeline's queue does not hide it, a seek where it does not follow the previous
one, and its commit's latency (upload and marker, in the background). The store is S3 in production: requests as
counted through the proxy, each at a stated latency, and bytes at a stated throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scaling_measure import JoinCosts, Measured
from scaling_sim import STANDING_POLL_S, Overheads, Pool, RunPlan

from facefusion_provider.output.merge import MARKER_READS_AT_ONCE
from facefusion_provider.storage import UPLOAD_MIN_PART_BYTES
from facefusion_provider.storage.compose import COMPOSE_REQUESTS_AT_ONCE
from facefusion_provider.work.span_plan import plan_segments, plan_spans

PIPELINE_QUEUE_FRAMES = 16  # worker/pipeline.py: QUEUE_BATCHES x the GPU batch (8) frames decoded ahead
LIST_PAGE_KEYS = 1000  # S3 ListObjectsV2 returns at most this many keys a request
S3_STORE = "s3 (moto)"


@dataclass(frozen=True)
class Stated:
    """Costs that need a cluster or a GPU to measure: stated, and flags to change them."""

    video_seconds: float = 3600.0
    frame_rate: float = 30.0
    bitrate_mbps: float = 8.0  # 1080p H.264 input and output
    # Of the target, the merge reads the ranges that hold its audio: all of a file that interleaves audio between every
    # frame (FFmpeg's muxer), far less of one that groups it per second (cameras). Fetched ahead, beside the remux.
    merge_target_read_fraction: float = 1.0
    gpu_inference_fps: float = 120.0  # detect + landmarks + inswapper_128 per frame on one GPU, batched
    gpu_analysis_share: float = 0.25  # of that inference, detection and landmarks: skipped with a stored analysis
    faces_per_frame: float = 1.0  # faces swapped per frame on average (face_selector_mode one: at most 1)
    frame_threads: int = 4  # execution_thread_count: frames a GPU worker processes side by side
    worker_cpu_cores: int = 4  # [facefusion] worker_cpu: the cores for decode, encode and the swap's CPU work
    model_load_s: float = 6.0  # CUDA context and onnxruntime sessions of detector, landmarker and swapper
    airflow_task_s: float = 4.0  # scheduling a task instance, starting it, deferring, the trigger's 2 s poll
    pod_start_s: float = 3.0  # a pod on a warm node with the image cached: scheduling to running
    image_pull_s: float = 90.0  # the CUDA worker image (about 4 GB) on a fresh node
    node_scale_up_s: float = 180.0  # the autoscaler adding a GPU node
    s3_mb_per_s: float = 300.0  # one pod's S3 throughput each way
    s3_request_s: float = 0.02  # one small S3 request (PUT, HEAD, GET of a marker or a claim), in-region
    s3_list_page_s: float = 0.06  # one LIST page (up to 1000 keys)
    upload_part_mb: float = 16.0  # the merge's upload parts (worker.publish): two go up after the muxer closes
    identity_s: float = 1.0  # prepare's source identity (a few images through detector and recognizer)
    audio_kbps: float = (
        128.0  # the target's sound: the merge copies it (stored by a standing worker, or from the target)
    )
    s3_copy_part_s: float = 0.25  # S3 copying one segment (UploadPartCopy, a few MB) into the output, server-side
    lease_s: float = 60.0  # FACEFUSION_CLAIM_LEASE_SECONDS default
    retry_delay_s: float = 30.0  # [facefusion] retry_delay_seconds default

    @property
    def frames(self) -> int:
        return round(self.video_seconds * self.frame_rate)

    @property
    def mb_per_frame(self) -> float:
        return self.bitrate_mbps / 8 / self.frame_rate


@dataclass(frozen=True)
class PodRate:
    """One GPU pod's frame rate: the slower of its process stage and its CPU cores (decode, inference and encode
    overlap in the worker's bounded pipeline)."""

    inference_s: float  # one frame's inference on the GPU
    swap_cpu_s: float  # the swap's CPU work on one frame's faces (and reading the stored analysis, when warm)
    codec_s: float  # decode + encode of one swapped frame on one core
    cores: int
    frame_threads: int
    side_by_side_efficiency: float  # measured: what each of the threads adds, relative to one

    @classmethod
    def of(cls, measured: Measured, stated: Stated, *, warm: bool = False) -> PodRate:
        """``warm``: the target's analysis is stored, so detection and landmarks are skipped (GPU and CPU)."""
        worker = measured.worker
        swap_cpu = worker.swap_cpu_s_per_face * stated.faces_per_frame
        inference = 1.0 / stated.gpu_inference_fps
        if warm:
            swap_cpu -= worker.detector_cpu_s_per_frame
            swap_cpu += measured.seek.analysis_load_s / 256
            inference *= 1 - stated.gpu_analysis_share
        return cls(
            inference_s=inference,
            swap_cpu_s=swap_cpu,
            codec_s=worker.decode_cpu_s_per_frame + worker.encode_cpu_s_per_frame + worker.encoder_rgb_s_per_frame,
            cores=stated.worker_cpu_cores,
            frame_threads=stated.frame_threads,
            side_by_side_efficiency=worker.side_by_side_efficiency,
        )

    @property
    def process_fps(self) -> float:
        """T frames side by side, each its inference then its CPU work; the GPU runs one batch at a time."""
        threads = max(1.0, self.frame_threads * self.side_by_side_efficiency)
        return min(1.0 / self.inference_s, threads / (self.inference_s + self.swap_cpu_s))

    @property
    def cores_fps(self) -> float:
        return self.cores / (self.codec_s + self.swap_cpu_s)

    @property
    def fps(self) -> float:
        return min(self.process_fps, self.cores_fps)

    @property
    def bound_by(self) -> str:
        return "process stage" if self.process_fps <= self.cores_fps else "CPU cores"


def mean_list_pages(segments: int) -> float:
    """LIST requests of one ``scan_work`` averaged over a run: ``segments/`` holds a file and a marker per committed
    segment, ``claims/`` a claim per claimed one; a run goes from none to all of them."""
    steps = range(0, segments + 1, max(1, segments // 50))

    def pages(keys: int) -> int:
        return max(1, math.ceil(keys / LIST_PAGE_KEYS))

    return sum(pages(2 * done) + pages(done) for done in steps) / len(steps)


@dataclass(frozen=True)
class SegmentModel:
    """One segment's costs beyond its frames for ``frames`` frames a segment and ``segments`` segments a work."""

    frames: int
    segments: int
    frame_s: float
    encoder_cpu_s: float
    commit_cpu_s: float
    take_s: float
    commit_latency_s: float
    # The decoder's pre-roll before a seek's first frame, and the encode thread's wait in the encoder's flush at a
    # segment's end: their measured CPU seconds over the pod's cores (its threads run on all of them; CPU time stays
    # steady on a loaded machine, where wall time does not).
    seek_s: float
    flush_s: float
    scan_s: float
    slack_s: float  # the pipeline's queue: a wait on the decode thread shorter than this costs nothing
    cores: int

    @classmethod
    def of(
        cls,
        measured: Measured,
        stated: Stated,
        frames: int,
        segments: int,
        *,
        store: str = S3_STORE,
        warm: bool = False,
    ) -> SegmentModel:
        costs = measured.stores.get(store) or measured.stores["local"]
        frame_s = 1.0 / PodRate.of(measured, stated, warm=warm).fps
        megabytes = frames * stated.mb_per_frame
        measured_mb = costs.segment_bytes_per_frame * 256 / 1e6
        sha_s = costs.sha256_s_per_mb * megabytes
        commit_cpu = max(0.0, costs.commit_cpu_s - costs.sha256_s_per_mb * measured_mb) + sha_s
        if costs.requests:  # S3: the measured requests at a stated latency, the bytes at a stated throughput
            take_requests = costs.requests["take"] - costs.requests["scan"]
            scan_s = mean_list_pages(segments) * stated.s3_list_page_s
            take_s = scan_s + take_requests * stated.s3_request_s
            latency = sha_s + megabytes / stated.s3_mb_per_s + costs.requests["commit"] * stated.s3_request_s
        else:  # the local disk: as measured, the listings in proportion to the files listed
            scan_s = costs.scan_s * segments / 400
            take_s = costs.take_s - costs.scan_s + scan_s
            latency = costs.commit_s - costs.sha256_s_per_mb * measured_mb + sha_s
        return cls(
            frames=frames,
            segments=segments,
            frame_s=frame_s,
            encoder_cpu_s=costs.encoder_segment_cpu_s,
            commit_cpu_s=commit_cpu,
            take_s=take_s,
            commit_latency_s=latency,
            seek_s=measured.seek.seek_cpu_s / stated.worker_cpu_cores,
            flush_s=costs.encoder_close_cpu_s / stated.worker_cpu_cores,
            scan_s=scan_s,
            slack_s=PIPELINE_QUEUE_FRAMES * frame_s,
            cores=stated.worker_cpu_cores,
        )

    @property
    def work_s(self) -> float:
        return self.frames * self.frame_s

    @property
    def per_segment_s(self) -> float:
        """What every segment adds to the pod's time: CPU shared by the pod's cores, and the waits the pipeline's
        queue does not hide: the take on the decode thread, the encoder's flush on the encode thread."""
        waits = max(0.0, self.take_s - self.slack_s) + max(0.0, self.flush_s - self.slack_s)
        return (self.encoder_cpu_s + self.commit_cpu_s) / self.cores + waits

    @property
    def seek_stall_s(self) -> float:
        return max(0.0, self.seek_s - self.slack_s)

    @property
    def resume_s(self) -> float:
        """A new try's look at the work before its first frame: both listings, then a seek to its first segment."""
        return self.scan_s + self.seek_s

    def overheads(self) -> Overheads:
        return Overheads(self.per_segment_s, self.seek_stall_s, self.commit_latency_s)

    def ratios(self) -> dict[str, float]:
        """Each cost as a fraction of the segment's own frame work on the pod."""
        work = self.work_s
        return {
            "commit_cpu": (self.encoder_cpu_s + self.commit_cpu_s) / self.cores / work,
            "commit_latency": self.commit_latency_s / work,
            "take": self.take_s / work,
            "take_unhidden": max(0.0, self.take_s - self.slack_s) / work,
            "per_segment": self.per_segment_s / work,
            "seek": self.seek_s / work,
            "resume": self.resume_s / work,
        }


@dataclass(frozen=True)
class Hops:
    """The serial hops of one run (DESIGN.md: validate, prepare, plan, the spans, merge, cleanup), in seconds."""

    validate_s: float
    prepare_s: float
    plan_s: float
    span_task_s: float  # Airflow's part of each span task (holds a pool slot)
    span_pod_s: float  # each span pod before its first frame: pod start, worker start, model load, first listing
    merge_s: float
    cleanup_s: float
    # Standing workers: one prepares the work from the run's lease, one poll after validate; the others join one poll
    # after that; the worker that commits the last segment merges (the stored sound, no Airflow task, no pod).
    standing_ready_s: float = 0.0
    standing_merge_s: float = 0.0

    @classmethod
    def of(cls, measured: Measured, stated: Stated, frames: int, segments: SegmentModel) -> Hops:
        run = measured.run
        pod = stated.pod_start_s + run.worker_start_s
        probe = frames * (run.probe_s_per_frame + run.probe_bytes_per_frame / 1e6 / stated.s3_mb_per_s)
        prepare_work = stated.identity_s + probe + 3 * stated.s3_request_s  # the probe, the identity, work.json
        return cls(
            validate_s=stated.airflow_task_s,
            prepare_s=stated.airflow_task_s + pod + prepare_work,
            plan_s=stated.airflow_task_s,
            span_task_s=stated.airflow_task_s,
            span_pod_s=pod + stated.model_load_s + segments.scan_s + 3 * stated.s3_request_s,
            merge_s=stated.airflow_task_s + pod + index_merge_s(measured, stated, frames, segments.segments),
            cleanup_s=stated.airflow_task_s,
            standing_ready_s=stated.airflow_task_s + STANDING_POLL_S / 2 + prepare_work + STANDING_POLL_S / 2,
            standing_merge_s=index_merge_s(measured, stated, frames, segments.segments, stored_sound=True),
        )

    def standing_serial_s(self) -> float:
        """Trigger to output, less the frame work, with standing workers."""
        return self.standing_ready_s + self.standing_merge_s

    @property
    def before_spans_s(self) -> float:
        return self.validate_s + self.prepare_s + self.plan_s

    @property
    def serial_s(self) -> float:
        """Trigger to output, less the spans' frame work: what no GPU count shortens (one span pod included)."""
        return self.before_spans_s + self.span_task_s + self.span_pod_s + self.merge_s

    def as_dict(self) -> dict[str, float]:
        return {
            "validate": self.validate_s,
            "prepare": self.prepare_s,
            "plan": self.plan_s,
            "span task (Airflow)": self.span_task_s,
            "span pod before its first frame": self.span_pod_s,
            "merge": self.merge_s,
            "cleanup (after the output)": self.cleanup_s,
            "standing: validate to frames": self.standing_ready_s,
            "standing: last commit to output": self.standing_merge_s,
        }


def index_merge_s(
    measured: Measured, stated: Stated, frames: int, segments: int, *, stored_sound: bool = False
) -> float:
    """The merge joining the output from the indexes (``output/merge.py``, ``output/mp4join.py``), on S3: one listing,
    the markers read side by side (each holds its segment's moov), the join's CPU (measured), the target's moov, then
    one multipart upload in which S3 copies every segment of at least its smallest part and the stored sound, and
    this process sends the head and whatever is smaller; a run whose sound is not stored reads it from the target
    (``merge_target_read_fraction`` of it: a muxer interleaves the sound between frames)."""
    join = measured.join or JoinCosts(0.0, 0.0, 0.0)
    segment_mb = frames / segments * stated.mb_per_frame
    copied = segments if segment_mb * 1e6 >= UPLOAD_MIN_PART_BYTES else 0
    sound_mb = stated.video_seconds * stated.audio_kbps / 8 / 1000
    moved_mb = (segments - copied) * segment_mb + frames * join.moov_bytes_per_frame / 1e6
    if not stored_sound:
        moved_mb += sound_mb + stated.merge_target_read_fraction * frames * stated.mb_per_frame
    requests = (
        math.ceil((2 * segments + 16) / LIST_PAGE_KEYS) * stated.s3_list_page_s
        + math.ceil(segments / MARKER_READS_AT_ONCE) * stated.s3_request_s
        + 3 * stated.s3_request_s  # the target's moov: its head, its size, the moov
        + math.ceil((copied + int(stored_sound)) / COMPOSE_REQUESTS_AT_ONCE) * stated.s3_copy_part_s
        + 2 * stated.s3_request_s  # the upload begun and completed
        + 4 * stated.s3_request_s  # the preview's thumbnails, the preview, the output's marker
    )
    return float(requests + segments * join.per_segment_s + frames * join.per_frame_s + moved_mb / stated.s3_mb_per_s)


def segment_works(
    frames: int, size: int, frame_s: float, *, skew: tuple[float, float, float] | None = None
) -> tuple[float, ...]:
    """Each segment's frame work; ``skew`` (first, last, factor): segments in that fraction of the video that much
    slower (a crowd scene: more faces, more work)."""
    segments = plan_segments(0, frames, size)
    factors = [1.0] * len(segments)
    if skew is not None:
        first, last, factor = skew
        for segment in segments:
            if first * len(segments) <= segment.index < last * len(segments):
                factors[segment.index] = factor
    return tuple(segment.frame_count * frame_s * factor for segment, factor in zip(segments, factors, strict=True))


def run_plan(
    measured: Measured,
    stated: Stated,
    size: int,
    wave: int,
    *,
    frames: int | None = None,
    ready_s: float | None = None,
    skew: tuple[float, float, float] | None = None,
    reuse_analysis: bool = False,
    target: str = "",
    standing: bool = False,
) -> tuple[RunPlan, Hops, SegmentModel]:
    """One run of ``frames`` (default: the stated video) in segments of ``size``, ``wave`` spans; ``standing``: the
    segments are free for standing workers once one of them has prepared the work (``Hops.standing_ready_s``), and
    the one that commits the last merges."""
    frames = frames or stated.frames
    segments = plan_segments(0, frames, size)
    model = SegmentModel.of(measured, stated, size, len(segments))
    hops = Hops.of(measured, stated, frames, model)
    spans = plan_spans(segments, wave)
    warm = None
    if reuse_analysis:
        warm_s = SegmentModel.of(measured, stated, size, len(segments), warm=True).frame_s
        warm = segment_works(frames, size, warm_s, skew=skew)
    plan = RunPlan(
        ready_s=(hops.standing_ready_s if standing else hops.before_spans_s) if ready_s is None else ready_s,
        work_s=segment_works(frames, size, model.frame_s, skew=skew),
        spans=tuple((span.first, span.last) for span in spans),
        overheads=model.overheads(),
        after_s=hops.standing_merge_s if standing else hops.merge_s,
        warm_work_s=warm,
        target=target,
    )
    return plan, hops, model


SWITCH_REQUESTS = 10  # moving to another run's work: work.json (2), two scans (4), the target (1), the write probe (3)


def switch_s(measured: Measured, stated: Stated) -> float:
    """A standing or helping worker moving to another run's work (the seek is counted apart)."""
    return float(measured.seek.switch_s + SWITCH_REQUESTS * stated.s3_request_s)


def pool_of(stated: Stated, hops: Hops, gpus: int, *, measured: Measured | None = None, **options: Any) -> Pool:
    """The pool for ``hops``; standing workers (``standing=True``) are up, models loaded, before the runs."""
    return Pool(
        gpus=gpus,
        task_s=hops.span_task_s,
        pod_fixed_s=hops.span_pod_s,
        lease_s=stated.lease_s,
        retry_delay_s=stated.retry_delay_s,
        switch_s=switch_s(measured, stated) if measured is not None else 0.0,
        look_s=stated.s3_list_page_s,
        **options,
    )


def single_process_s(measured: Measured, stated: Stated, size: int) -> float:
    """``facefusion-worker run`` on one GPU machine: one process, one model load, the same S3 reads and writes."""
    frames = stated.frames
    segments = plan_segments(0, frames, size)
    model = SegmentModel.of(measured, stated, size, len(segments))
    hops = Hops.of(measured, stated, frames, model)
    merge_work = hops.merge_s - stated.airflow_task_s - stated.pod_start_s - measured.run.worker_start_s
    prepare_work = hops.prepare_s - stated.airflow_task_s - stated.pod_start_s - measured.run.worker_start_s
    return float(
        measured.run.worker_start_s
        + prepare_work
        + stated.model_load_s
        + frames * model.frame_s
        + len(segments) * model.per_segment_s
        + merge_work
    )
