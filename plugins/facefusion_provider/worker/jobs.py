"""The worker's four operations: prepare, swap-chunk, merge and run (all three in one process).

The CLI is a thin layer over these functions. Heavy modules (PyAV, numpy, the engine) are imported inside the functions
that need them, so ``facefusion-worker --help`` stays fast and pass-through jobs never load the engine.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import posixpath
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.chunking import plan_chunks
from facefusion_provider.exceptions import InputMissingError, InvalidJobError, InvalidOptionError
from facefusion_provider.options import Options, parse_options
from facefusion_provider.types import JOB_FORMAT_VERSION, Chunk, ChunkMarker, JobSpec, OutputMarker, VideoProbe
from facefusion_provider.worker import faults
from facefusion_provider.worker.prefetch import Prefetch

if TYPE_CHECKING:
    import av

    from facefusion_provider.media.containers import MediaSource
    from facefusion_provider.worker.pipeline import FrameProcessor

logger = logging.getLogger(__name__)

WORK_ROOT_FOLDER = "facefusion-provider"
MARKER_READS_AT_ONCE = 8  # the merge's marker reads in flight at once (botocore pools 10 connections per client)
# Output containers the merge can write, and the encoders each one can hold.
OUTPUT_CONTAINERS: dict[str, frozenset[str]] = {
    ".mp4": frozenset({"libx264", "libx265", "libvpx-vp9", "h264_nvenc", "hevc_nvenc"}),
    ".m4v": frozenset({"libx264", "libx265", "h264_nvenc", "hevc_nvenc"}),
    ".mov": frozenset({"libx264", "libx265", "h264_nvenc", "hevc_nvenc"}),
    ".mkv": frozenset({"libx264", "libx265", "libvpx-vp9", "h264_nvenc", "hevc_nvenc"}),
    ".webm": frozenset({"libvpx-vp9"}),
}


@dataclass(frozen=True)
class ChunkResult:
    index: int
    frame_count: int
    skipped: bool  # already committed (or the whole output is done): nothing was decoded
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class MergeResult:
    output_uri: str
    preview_uri: str
    frame_count: int
    skipped: bool  # the output already exists for this job
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    output_uri: str
    preview_uri: str
    frame_count: int
    chunk_count: int
    timings: dict[str, float]
    job_id: str
    skipped: bool = False  # the output already existed for the same inputs and options


# --- prepare -------------------------------------------------------------------------------------------------------


def prepare(
    job_uri: str,
    source_paths: Sequence[str],
    target_path: str,
    output_path: str,
    *,
    options: Options | None = None,
    models_dir: str | None = None,
    chunk_wave: int = 0,
    **option_values: Any,
) -> JobSpec:
    """Probe the target, plan the chunks, compute the source identity and write ``job.json`` (reused if it exists).

    ``chunk_wave``: how many chunks run at once; a plan of at least that many comes in whole waves of equal chunks.
    """
    resolved = resolve_options(options, option_values)
    inputs = _Inputs.of(source_paths, target_path, output_path, resolved)
    job_uri = storage.normalize_uri(job_uri, field="job_uri")
    return _prepare(job_uri, inputs, resolved, models_dir, inputs.job_id(), chunk_wave=chunk_wave)


@dataclass(frozen=True)
class _Inputs:
    source_uris: list[str]
    target_uri: str
    output_uri: str
    options: Options

    @classmethod
    def of(cls, sources: Sequence[str], target: str, output: str, options: Options) -> _Inputs:
        if isinstance(sources, str):
            sources = [sources]
        inputs = cls(
            source_uris=[storage.normalize_uri(source, field="source") for source in sources],
            target_uri=storage.normalize_uri(target, field="target"),
            output_uri=storage.normalize_uri(output, field="output"),
            options=options,
        )
        inputs.check()
        return inputs

    def check(self) -> None:
        """Fail early, naming the argument: missing inputs, an output that would overwrite the target, a bad format."""
        if self.options.processors and not self.source_uris and "face_swapper" in self.options.processors:
            raise InvalidOptionError("source: face_swapper needs at least one source image (--source)")
        for uri, role in [(self.target_uri, "target"), *((source, "source") for source in self.source_uris)]:
            if not storage.exists(uri):
                raise InputMissingError(f"{role}: {uri} does not exist")
        if self.output_uri == self.target_uri:
            raise InvalidOptionError(f"output: {self.output_uri} is the target itself; choose another output path")
        extension = posixpath.splitext(urlparse(self.output_uri).path)[1].lower()
        encoders = OUTPUT_CONTAINERS.get(extension)
        if encoders is None:
            raise InvalidOptionError(
                f"output: {self.output_uri} has extension {extension or '(none)'!r}; allowed: {', '.join(OUTPUT_CONTAINERS)}"
            )
        if self.options.output_video_encoder not in encoders:
            raise InvalidOptionError(
                f"options.output_video_encoder: {self.options.output_video_encoder} cannot be stored in a {extension} "
                f"file; allowed there: {', '.join(sorted(encoders))}"
            )

    def job_id(self) -> str:
        sources = [storage.content_id(source) for source in self.source_uris]
        return storage.compute_job_id(storage.content_id(self.target_uri), sources, self.options)


def _prepare(
    job_uri: str, inputs: _Inputs, options: Options, models_dir: str | None, job_id: str, *, chunk_wave: int = 0
) -> JobSpec:
    layout = storage.JobLayout(job_uri)
    if storage.exists(layout.job_json):
        existing = load_job(job_uri)
        if existing.job_id != job_id:
            raise InvalidJobError(
                f"{layout.job_json} belongs to job {existing.job_id}, not to these inputs and options ({job_id}); "
                "use another --job-uri or remove that folder"
            )
        logger.info("job %s: job.json exists, reusing it", job_id)
        places = {"source_uris": inputs.source_uris, "target_uri": inputs.target_uri, "output_uri": inputs.output_uri}
        if any(getattr(existing, name) != value for name, value in places.items()):
            # The same content under other paths, or another output: keep the committed chunks, use the new paths.
            existing = existing.model_copy(update=places)
            storage.write_json_atomic(layout.job_json, existing.model_dump(mode="json"))
        return existing
    from facefusion_provider.media.probe import probe_video

    with storage.open_input(inputs.target_uri) as target:
        probe = probe_video(target, inputs.target_uri)
    frame_start, frame_end = trimmed_range(options, probe.frame_count)
    chunks = plan_chunks(frame_start, frame_end, options.chunk_size, wave=chunk_wave)
    identity = _identity(inputs, options, probe, models_dir) if options.processors else {}
    spec = JobSpec(
        job_id=job_id,
        job_uri=job_uri,
        source_uris=inputs.source_uris,
        target_uri=inputs.target_uri,
        output_uri=inputs.output_uri,
        options=options,
        probe=probe,
        frame_start=frame_start,
        frame_end=frame_end,
        chunks=chunks,
        identity=identity,
    )
    storage.write_json_atomic(layout.job_json, spec.model_dump(mode="json"))
    logger.info("job %s: %d frames in %d chunks", job_id, frame_end - frame_start, len(chunks))
    return spec


def trimmed_range(options: Options, frame_count: int) -> tuple[int, int]:
    """Frames ``[start, end)`` to process; an end past the last frame is clamped, a start past it is an error."""
    start = options.trim_frame_start or 0
    if start >= frame_count:
        raise InvalidOptionError(
            f"options.trim_frame_start: {start} is past the last frame; the target has {frame_count} frames (0-{frame_count - 1})"
        )
    end = min(options.trim_frame_end or frame_count, frame_count)
    return start, end


def _identity(inputs: _Inputs, options: Options, probe: VideoProbe, models_dir: str | None) -> dict[str, Any]:
    from facefusion_provider.engine.processors import prepare_identity
    from facefusion_provider.media.decode import decode_frame
    from facefusion_provider.media.images import rgb_array

    reference = None
    if options.face_selector_mode == "reference":
        number = options.reference_frame_number
        if number >= probe.frame_count:
            raise InvalidOptionError(
                f"options.reference_frame_number: {number} is past the last frame; the target has {probe.frame_count} frames"
            )
        with storage.open_input(inputs.target_uri) as target:
            reference = rgb_array(decode_frame(target, probe, number, inputs.target_uri))
    with _local_copies(inputs.source_uris) as source_paths:
        return prepare_identity(source_paths, reference, options, models_dir)


@contextlib.contextmanager
def _local_copies(uris: Sequence[str]) -> Iterator[list[str]]:
    """Local paths of ``uris``: the files themselves where local, else downloads into a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="facefusion-sources-") as folder:
        paths = []
        for number, uri in enumerate(uris):
            path = storage.local_path(uri)
            if path is None:
                path = os.path.join(folder, f"{number}-{posixpath.basename(urlparse(uri).path)}")
                storage.get_file(uri, path)
            paths.append(path)
        yield paths


# --- swap-chunk ----------------------------------------------------------------------------------------------------


def swap_chunk(job_uri: str, index: int, *, models_dir: str | None = None) -> ChunkResult:
    """Process chunk ``index`` and commit it; a committed chunk (or a finished output) returns at once."""
    faults.maybe_inject("swap-chunk", index)
    job_uri = storage.normalize_uri(job_uri, field="job_uri")
    spec = load_job(job_uri)
    return _swap_chunk(spec, storage.JobLayout(job_uri), chunk_of(spec, index), _Processors(spec, models_dir))


class _Processors:
    """Builds the engine's frame processor once, only when a chunk really needs it."""

    def __init__(self, spec: JobSpec, models_dir: str | None) -> None:
        self._spec, self._models_dir = spec, models_dir
        self._processor: FrameProcessor | None = None
        self.load_seconds = 0.0

    def get(self) -> FrameProcessor | None:
        if not self._spec.options.processors:
            return None
        if self._processor is None:
            began = time.perf_counter()
            from facefusion_provider.engine.processors import build_frame_processor

            self._processor = build_frame_processor(self._spec.options, self._spec.identity, self._models_dir)
            self.load_seconds = time.perf_counter() - began
        return self._processor


def chunk_of(spec: JobSpec, index: int) -> Chunk:
    if not 0 <= index < len(spec.chunks):
        raise InvalidOptionError(
            f"index: {index} is not a chunk of job {spec.job_id}; allowed: 0-{len(spec.chunks) - 1}"
        )
    return spec.chunks[index]


def _swap_chunk(spec: JobSpec, layout: storage.JobLayout, chunk: Chunk, processors: _Processors) -> ChunkResult:
    if committed_marker(layout, spec, chunk) is not None or output_done(spec.job_id, spec.output_uri):
        logger.info("chunk %d (%s) is already done", chunk.index, chunk.label)
        return ChunkResult(chunk.index, chunk.frame_count, skipped=True)
    from facefusion_provider.media.decode import DecodeStats, decode_frames
    from facefusion_provider.media.encode import VideoEncoder, encoder_settings
    from facefusion_provider.media.merge import chunk_pts_offset
    from facefusion_provider.media.preview import thumbnail_pair
    from facefusion_provider.worker.pipeline import run_pipeline

    began = time.perf_counter()
    processor = processors.get()
    probe = spec.probe
    firsts: dict[str, av.VideoFrame] = {}

    def remember_first(frames: Iterator[av.VideoFrame]) -> Iterator[av.VideoFrame]:
        for frame in frames:
            firsts.setdefault("original", frame)
            yield frame

    with tempfile.TemporaryDirectory(prefix="facefusion-chunk-") as folder:
        path = os.path.join(folder, f"{chunk.index:05d}.mp4")
        with storage.open_input(spec.target_uri) as target:
            decoding = DecodeStats()
            frames = decode_frames(target, probe, chunk.start, chunk.end, spec.target_uri, stats=decoding)
            try:
                with VideoEncoder(
                    path,
                    encoder_settings(spec.options, probe),
                    width=probe.width,
                    height=probe.height,
                    frame_rate=Fraction(probe.frame_rate),
                    time_base=Fraction(probe.time_base),
                    pts_offset=chunk_pts_offset(probe, chunk.start),
                    label=chunk_label(spec, chunk),
                ) as encoder:

                    def encode(frame: av.VideoFrame, pts: int) -> None:
                        firsts.setdefault("output", frame)
                        encoder.encode(frame, pts)

                    stages = run_pipeline(remember_first(frames), encode, processor)
                    count = encoder.close()
            finally:
                frames.close()
        if count != chunk.frame_count:
            raise InvalidJobError(f"chunk {chunk.index}: encoded {count} frames, expected {chunk.frame_count}")
        upload_began = time.perf_counter()
        size, digest = os.path.getsize(path), storage.file_sha256(path)
        storage.put_file_atomic(path, layout.chunk_video(chunk.index))
        thumbnails = thumbnail_pair(firsts["original"], firsts["output"], probe.rotation)
        storage.write_bytes_atomic(chunk_preview_uri(layout, chunk.index), thumbnails)
        upload = time.perf_counter() - upload_began
    total = time.perf_counter() - began
    timings = {
        **stages.as_dict(),
        "load_s": processors.load_seconds,
        "upload_s": upload,
        "total_s": total,
        "fps": count / total if total else 0.0,
        "decoded_frames": float(decoding.decoded),  # the chunk's frames plus the pre-roll from the keyframe before it
    }
    marker = ChunkMarker(
        job_id=spec.job_id,
        index=chunk.index,
        start=chunk.start,
        end=chunk.end,
        frame_count=count,
        sha256=digest,
        size=size,
        timings=timings,
    )
    storage.write_json_atomic(layout.chunk_marker(chunk.index), marker.model_dump(mode="json"))
    logger.info("chunk %d (%s): %d frames in %.2f s", chunk.index, chunk.label, count, total)
    return ChunkResult(chunk.index, count, skipped=False, timings=timings)


def chunk_preview_uri(layout: storage.JobLayout, index: int) -> str:
    """The chunk's first frame, original above output: the merge builds the preview from a few of these."""
    return storage.join(layout.chunks_dir, f"{index:05d}.preview.jpg")


def chunk_label(spec: JobSpec, chunk: Chunk) -> str:
    """Stored in the chunk file itself: the merge refuses a file that holds another job's or another chunk's frames."""
    return f"facefusion-provider job {spec.job_id} chunk {chunk.index} {chunk.label}"


def committed_marker(layout: storage.JobLayout, spec: JobSpec, chunk: Chunk) -> ChunkMarker | None:
    """The chunk's commit marker when it exists and belongs to this job and this chunk's frames."""
    uri = layout.chunk_marker(chunk.index)
    if not storage.exists(uri):
        return None
    marker = ChunkMarker.model_validate(storage.read_json(uri))
    if marker.job_id != spec.job_id or (marker.start, marker.end) != (chunk.start, chunk.end):
        return None
    return marker


def output_done(job_id: str, output_uri: str) -> OutputMarker | None:
    """The output's marker when it names ``job_id`` and the output file exists: the job is finished."""
    marker_uri = storage.output_marker_uri(output_uri)
    if not storage.exists(marker_uri):
        return None
    marker = OutputMarker.model_validate(storage.read_json(marker_uri))
    if marker.job_id != job_id or not storage.exists(output_uri):
        return None
    return marker


# --- merge ---------------------------------------------------------------------------------------------------------


def merge(job_uri: str) -> MergeResult:
    """Remux the committed chunks and the target's other streams into the output, then write preview and marker."""
    faults.maybe_inject("merge")
    job_uri = storage.normalize_uri(job_uri, field="job_uri")
    spec = load_job(job_uri)
    return _merge(spec, storage.JobLayout(job_uri))


def preview_uri_of(output_uri: str) -> str:
    """``<output without extension>.preview.jpg``."""
    path = urlparse(output_uri).path
    return output_uri[: len(output_uri) - len(path)] + posixpath.splitext(path)[0] + ".preview.jpg"


def _merge(spec: JobSpec, layout: storage.JobLayout) -> MergeResult:
    preview_uri = preview_uri_of(spec.output_uri)
    done = output_done(spec.job_id, spec.output_uri)
    if done is not None:
        logger.info("output %s is already done", spec.output_uri)
        return MergeResult(spec.output_uri, preview_uri, done.frame_count, skipped=True)
    from facefusion_provider.media.merge import ChunkSpan, merge_chunks
    from facefusion_provider.worker.publish import OutputPublisher

    began = time.perf_counter()
    markers = _committed_markers(spec, layout)
    expected = spec.frame_end - spec.frame_start
    spans = [
        ChunkSpan(marker.start, marker.end, chunk_label(spec, chunk))
        for marker, chunk in zip(markers, spec.chunks, strict=True)
    ]
    with (
        tempfile.TemporaryDirectory(prefix="facefusion-merge-") as folder,
        OutputPublisher(spec.output_uri, folder, expected_bytes=sum(m.size for m in markers)) as publisher,
    ):
        fetches = [functools.partial(_local_chunk, layout, marker, folder) for marker in markers]
        markers_read = time.perf_counter()
        # The next chunks download (and are checked) while the remux reads the current one; an S3 output's media
        # data uploads while it is written.
        with (
            Prefetch(fetches, storage.merge_prefetch(), functools.partial(_discard_download, folder)) as prefetch,
            storage.open_input(spec.target_uri) as target,
            _merge_original(spec, target) as original,
        ):
            merge_chunks(
                spans,
                original,
                spec.probe,
                publisher.path,
                name=spec.target_uri,
                paths=prefetch.results(),
                moov_last=publisher.moov_last,
            )
        remuxed = time.perf_counter()
        published_file = publisher.finish()
        with published_file.open() as output:
            _verify_output(spec, output)
        size, digest = published_file.size, published_file.sha256()
        verified = time.perf_counter()
        publisher.publish()
    published = time.perf_counter()
    storage.write_bytes_atomic(preview_uri, _preview(spec, layout))
    marker = OutputMarker(
        job_id=spec.job_id, output_uri=spec.output_uri, frame_count=expected, sha256=digest, size=size
    )
    storage.write_json_atomic(storage.output_marker_uri(spec.output_uri), marker.model_dump(mode="json"))
    finished = time.perf_counter()
    timings = {
        "markers_s": markers_read - began,
        "remux_s": remuxed - markers_read,  # fetching the chunks overlaps it
        "fetch_wait_s": prefetch.wait_seconds,  # the part of remux_s spent waiting for the next chunk
        "fetch_work_s": prefetch.work_seconds,  # downloading and hashing, summed over the fetch threads
        "verify_s": verified - remuxed,  # the moov moved in front, the frame times checked, the checksum
        "publish_s": published - verified,
        "preview_s": finished - published,
        "total_s": finished - began,
    }
    logger.info("merged %d frames into %s in %.2f s", expected, spec.output_uri, finished - began)
    return MergeResult(spec.output_uri, preview_uri, expected, skipped=False, timings=timings)


@contextlib.contextmanager
def _merge_original(spec: JobSpec, target: MediaSource) -> Iterator[MediaSource]:
    """The target as the merge reads it: a remote MP4/MOV through a ``RangeReader`` that fetches the samples of the
    streams the merge copies ahead of the demuxer, several at once, instead of every block of the file.

    Everything else (a local file, another container, a target without streams to copy) is ``target`` itself.
    """
    remote = None if isinstance(target, str) or not spec.probe.streams else target
    fetch = None if remote is None else storage.range_fetcher(spec.target_uri, remote)
    planned = None if remote is None or fetch is None else _copied_sample_ranges(remote)
    if remote is None or fetch is None or planned is None:
        yield target
        return
    ranges, size = planned
    pieces = storage.range_pieces(ranges)
    with Prefetch([functools.partial(fetch, *piece) for piece in pieces], storage.RANGE_FETCHES_AT_ONCE) as fetching:
        reader = storage.RangeReader(remote, pieces, fetching.results(), size)
        yield cast("IO[bytes]", reader)  # a raw binary file; typeshed's IO[bytes] is nominal
    logger.info(
        "%s: the merge took %d bytes from %d ranged reads ahead and %d bytes in %d reads outside them (file: %d bytes)",
        spec.target_uri,
        reader.fetched_bytes,
        len(pieces),
        reader.fallback_bytes,
        reader.fallback_reads,
        size,
    )


def _copied_sample_ranges(target: IO[bytes]) -> tuple[list[storage.ByteRange], int] | None:
    """Where the samples of every track but the video ones lie in ``target``, as sorted ranges with the gaps FFmpeg
    reads through closed, and the file's size; None when its moov does not describe it or no such sample exists.

    These are the samples of the streams the merge copies (audio, subtitle, data; a track it cannot copy costs only its
    own bytes). A demuxer that discards the other streams reads just these, seeking over every larger gap. Only the
    largest gaps stay open where the file's size allows fewer GETs (``storage.RANGE_BYTES_PER_GET``).
    """
    import numpy as np

    from facefusion_provider.media.mp4index import read_movie_index

    movie = read_movie_index(target)
    tracks = [] if movie is None else [track for track in movie.tracks if track.handler != "vide"]
    if movie is None or not any(track.sample_count for track in tracks):
        return None
    offsets = np.concatenate([track.offsets for track in tracks])
    order = np.argsort(offsets, kind="stable")
    starts = offsets[order]
    ends = np.minimum(starts + np.concatenate([track.sizes for track in tracks])[order], movie.file_size)
    reach = np.maximum.accumulate(ends)  # the end of everything up to each sample
    gaps = starts[1:] - reach[:-1]
    most_breaks = max(0, movie.file_size // storage.RANGE_BYTES_PER_GET - 1)
    gap = storage.RANGE_GAP_BYTES
    if np.count_nonzero(gaps > gap) > most_breaks:
        gap = max(gap, int(np.partition(gaps, len(gaps) - most_breaks - 1)[len(gaps) - most_breaks - 1]))
    breaks = np.flatnonzero(gaps > gap) + 1
    firsts, lasts = np.append(0, breaks), np.append(breaks - 1, len(starts) - 1)
    ranges = [
        (start, end) for start, end in zip(starts[firsts].tolist(), reach[lasts].tolist(), strict=True) if start < end
    ]
    return (ranges, movie.file_size) if ranges else None


def _verify_output(spec: JobSpec, output: MediaSource) -> None:
    """The written file holds exactly the job's frames at the original frame times (read back from its packets).

    Times are compared from the first frame on: a muxer may move the whole timeline (Matroska starts it at the earliest
    audio packet) and a coarser clock rounds each timestamp to its tick (Matroska counts milliseconds).
    """
    from facefusion_provider.media.probe import video_timestamps

    pts, time_base = video_timestamps(output, spec.output_uri)
    source_base = Fraction(spec.probe.time_base)
    wanted = spec.probe.pts[spec.frame_start : spec.frame_end]
    expected = [(p - wanted[0]) * source_base for p in wanted]
    found = [(p - pts[0]) * time_base for p in pts]
    if len(found) != len(expected) or any(abs(a - b) > time_base for a, b in zip(found, expected, strict=False)):
        raise InvalidJobError(
            f"{spec.output_uri}: the merged video holds {len(pts)} frames, expected {len(expected)} at the target's "
            "frame times; it was not published"
        )


def _preview(spec: JobSpec, layout: storage.JobLayout) -> bytes:
    """The contact sheet from the thumbnail pairs that a few chunks stored when they were processed."""
    from facefusion_provider.media.preview import contact_sheet, preview_chunks

    columns: list[MediaSource] = []
    for index in preview_chunks(len(spec.chunks)):
        uri = chunk_preview_uri(layout, index)
        if storage.exists(uri):
            columns.append(io.BytesIO(storage.read_bytes(uri)))
        else:
            logger.warning("chunk %d has no thumbnail (%s); the preview leaves it out", index, uri)
    if not columns:
        raise InvalidJobError(f"job {spec.job_id}: no chunk has a thumbnail for the preview; rerun the chunks")
    return contact_sheet(columns)


def _committed_markers(spec: JobSpec, layout: storage.JobLayout) -> list[ChunkMarker]:
    # Many small objects, two requests each on S3: read side by side, the wait is the latency, not the bytes.
    reads = [functools.partial(committed_marker, layout, spec, chunk) for chunk in spec.chunks]
    with Prefetch(reads, MARKER_READS_AT_ONCE) as reading:
        markers = list(reading.results())
    missing = [chunk.index for chunk, marker in zip(spec.chunks, markers, strict=True) if marker is None]
    if missing:
        raise InvalidJobError(
            f"job {spec.job_id}: chunks {', '.join(map(str, missing))} of {len(spec.chunks)} are not committed; "
            "run swap-chunk for them before merge"
        )
    present = [marker for marker in markers if marker is not None]
    counted = sum(marker.frame_count for marker in present)
    if counted != spec.frame_end - spec.frame_start:
        raise InvalidJobError(
            f"job {spec.job_id}: chunks hold {counted} frames, expected {spec.frame_end - spec.frame_start}"
        )
    return present


def _local_chunk(layout: storage.JobLayout, marker: ChunkMarker, folder: str) -> str:
    """A local path of the committed chunk, its checksum verified against the marker.

    A remote chunk is downloaded into ``folder`` and hashed in the same read; a local one is hashed where it is.
    """
    uri = layout.chunk_video(marker.index)
    path = storage.local_path(uri)
    if path is None:
        path = os.path.join(folder, f"{marker.index:05d}.mp4")
        digest = storage.get_file_sha256(uri, path)
    elif not os.path.isfile(path):
        raise InvalidJobError(
            f"{uri}: the chunk file is missing although its marker exists; delete the marker and rerun"
        )
    else:
        digest = storage.file_sha256(path)
    if digest != marker.sha256:
        _discard_download(folder, path)
        raise InvalidJobError(
            f"{uri}: checksum differs from its marker (corrupt chunk); delete {layout.chunk_marker(marker.index)} and rerun"
        )
    return path


def _discard_download(folder: str, path: str) -> None:
    """Deletes a chunk that was downloaded into ``folder``; a chunk read in place belongs to the job and stays."""
    if os.path.dirname(path) == folder:
        os.unlink(path)


# --- run -----------------------------------------------------------------------------------------------------------


def run(
    source_paths: Sequence[str],
    target_path: str,
    output_path: str,
    work_root: str | None = None,
    *,
    keep_work: bool = False,
    models_dir: str | None = None,
    options: Options | None = None,
    **option_values: Any,
) -> RunResult:
    """The whole job in this process: prepare, every chunk, merge; the job folder is removed afterwards."""
    began = time.perf_counter()
    resolved = resolve_options(options, option_values)
    inputs = _Inputs.of(source_paths, target_path, output_path, resolved)
    job_id = inputs.job_id()
    preview_uri = preview_uri_of(inputs.output_uri)
    done = output_done(job_id, inputs.output_uri)
    if done is not None:
        return RunResult(
            inputs.output_uri,
            preview_uri,
            done.frame_count,
            0,
            {"total_s": time.perf_counter() - began},
            job_id,
            skipped=True,
        )
    layout = storage.JobLayout.under(work_root or default_work_root(), job_id)
    spec = _prepare(layout.job_uri, inputs, resolved, models_dir, job_id)
    prepared = time.perf_counter()
    processors = _Processors(spec, models_dir)
    for chunk in spec.chunks:
        _swap_chunk(spec, layout, chunk, processors)
    swapped = time.perf_counter()
    merged = _merge(spec, layout)
    if not keep_work:
        storage.remove_tree(layout.job_uri)
    finished = time.perf_counter()
    timings = {
        "prepare_s": prepared - began,
        "swap_s": swapped - prepared,
        "merge_s": merged.timings.get("total_s", 0.0),
        "total_s": finished - began,
    }
    return RunResult(merged.output_uri, merged.preview_uri, merged.frame_count, len(spec.chunks), timings, job_id)


def default_work_root() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return os.path.join(cache, WORK_ROOT_FOLDER)


# --- shared --------------------------------------------------------------------------------------------------------


def resolve_options(options: Options | None, values: dict[str, Any]) -> Options:
    """``options`` with ``values`` laid over it; every value is validated with a message naming the option."""
    if options is None and not values:
        return Options()
    base = options.model_dump() if options is not None else {}
    return parse_options({**base, **values})


def load_job(job_uri: str) -> JobSpec:
    """``job.json`` of the job folder; InvalidJobError when it is missing, from another format, or unreadable."""
    uri = storage.JobLayout(storage.normalize_uri(job_uri, field="job_uri")).job_json
    if not storage.exists(uri):
        raise InvalidJobError(f"{uri}: no job.json; run prepare for this job first")
    data = storage.read_json(uri)
    if not isinstance(data, dict) or data.get("format_version") != JOB_FORMAT_VERSION:
        found = data.get("format_version") if isinstance(data, dict) else None
        raise InvalidJobError(
            f"{uri}: job format {found}, this worker reads format {JOB_FORMAT_VERSION}; prepare it again"
        )
    try:
        return JobSpec.model_validate(data)
    except ValueError as error:
        raise InvalidJobError(f"{uri}: not a valid job.json ({error})") from None
