"""``prepare``: probe the target, plan the segments, compute the source identity once, and write the shared
``work.json`` (exclusively: of two runs preparing the same work at once, one writes it and both use it)."""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import Any
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidOptionError, InvalidWorkError
from facefusion_provider.options import Options, encodes_sound, frame_options, sound_encoder
from facefusion_provider.types import VideoProbe
from facefusion_provider.work.access import checked_uris, load_work, local_copies, resolve_options, work_layout
from facefusion_provider.work.ids import analysis_id, work_id
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.records import Segment, WorkSpec
from facefusion_provider.work.run_inputs import (
    CLI_FIELDS,
    VOICE_PROCESSORS,
    RunUris,
    check_sources,
    is_image_uri,
    voice_source,
)
from facefusion_provider.work.span_plan import plan_segments

logger = logging.getLogger(__name__)

MAX_OUTPUT_SIDE = 8192  # H.264 level 6.2's and HEVC level 6.2's widest frame; a 4K target at x4 (15360) is past it
FRAME_RATE_TOLERANCE = 0.01  # frames per second: 29.97 given for NTSC's 30000/1001


def prepare(
    work_uri: str,
    source_paths: Sequence[str],
    target_path: str,
    *,
    options: Options | None = None,
    models_dir: str | None = None,
    **option_values: Any,
) -> WorkSpec:
    """Write ``work.json`` of the work folder ``work_uri`` (or reuse it), whose name must be these inputs' work id."""
    resolved = resolve_options(options, option_values)
    uris = checked_uris(source_paths, target_path, None)
    check_sources(uris.source_uris, resolved, CLI_FIELDS)
    layout = work_layout(work_uri)
    return prepare_work(layout, uris, resolved, models_dir)


def content_ids(uris: RunUris) -> tuple[str, list[str]]:
    return storage.content_id(uris.target_uri), [storage.content_id(source) for source in uris.source_uris]


def prepare_work(layout: WorkLayout, uris: RunUris, options: Options, models_dir: str | None) -> WorkSpec:
    target_id, source_ids = content_ids(uris)
    expected = work_id(target_id, source_ids, options)
    if layout.work_id != expected:
        raise InvalidWorkError(
            f"{layout.work_uri}: this folder is for other inputs or options (these give work {expected}); "
            "the target or a source changed since the run was validated: start a new run"
        )
    if storage.exists(layout.work_json):
        logger.info("work %s: work.json exists, reusing it", expected)
        return load_work(layout)
    (probe, frame_start, frame_end, segments), identity = _target_and_identity(uris, options, models_dir)
    spec = WorkSpec(
        work_id=expected,
        target_content_id=target_id,
        source_content_ids=source_ids,
        source_names=[posixpath.basename(urlparse(uri).path) for uri in uris.source_uris],
        options=options,
        probe=probe,
        frame_start=frame_start,
        frame_end=frame_end,
        segments=segments,
        analysis_id=_analysis_id(target_id, options),
        identity={
            **identity,
            **_voice(layout, uris, options, probe, models_dir),
            **_sound(layout, uris, options, probe, (frame_start, frame_end)),
        },
    )
    if not storage.write_bytes_exclusive(layout.work_json, spec.model_dump_json(indent=2).encode()):
        logger.info("work %s: another run prepared it meanwhile; using its work.json", expected)
        return load_work(layout)
    logger.info("work %s: %d frames in %d segments", expected, frame_end - frame_start, len(spec.segments))
    return spec


def _target_and_identity(
    uris: RunUris, options: Options, models_dir: str | None
) -> tuple[tuple[VideoProbe, int, int, list[Segment]], dict[str, Any]]:
    """The target probed and checked, and the sources' identity: side by side where the identity needs nothing of the
    target (every mode but ``reference``), so prepare takes the longer of the two, not their sum. A target's error
    still comes first: the identity is awaited before it is raised, and its own error is dropped."""
    probe_target = _probe_image_target if is_image_uri(uris.target_uri) else _probe_video_target
    if not options.processors:
        return probe_target(uris.target_uri, options), {}
    if options.face_selector_mode == "reference":  # the reference face is found in the target's frame
        probed = probe_target(uris.target_uri, options)
        return probed, _identity(uris, options, probed[0], models_dir)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="identity") as identity_thread:
        identity = identity_thread.submit(_identity, uris, options, None, models_dir)
        probed = probe_target(uris.target_uri, options)
        return probed, identity.result()


def _probe_video_target(target_uri: str, options: Options) -> tuple[VideoProbe, int, int, list[Segment]]:
    """The video target probed, its output size, rate and encoder checked, its frames cut into segments (each start
    seek-decoded once)."""
    from facefusion_provider.media.decode import check_seek_decode
    from facefusion_provider.media.encode import check_encoder, encoder_settings, judged_here
    from facefusion_provider.media.probe import probe_video

    with storage.open_input(target_uri) as target:
        probe = probe_video(target, target_uri)
        size = output_frame_size(options, probe)
        check_frame_rate(options, probe)
        if judged_here(options.output_video_encoder, os.environ):
            check_encoder(encoder_settings(options, probe, size), *size, Fraction(probe.frame_rate))
        frame_start, frame_end = trimmed_range(options, probe.frame_count)
        segments = plan_segments(frame_start, frame_end, options.segment_size)
        check_seek_decode(target, probe, seek_check_starts(segments), target_uri)
    return probe, frame_start, frame_end, segments


def _probe_image_target(target_uri: str, options: Options) -> tuple[VideoProbe, int, int, list[Segment]]:
    """An image target (FaceFusion's image-to-image workflow): one frame in one segment, its output size checked."""
    from facefusion_provider.media.images import probe_image

    with storage.open_input(target_uri) as target:
        probe = probe_image(target, target_uri)
    output_frame_size(options, probe)
    frame_start, frame_end = trimmed_range(options, probe.frame_count)
    return probe, frame_start, frame_end, plan_segments(frame_start, frame_end, options.segment_size)


def seek_check_starts(segments: Sequence[Segment]) -> list[int]:
    """Where prepare tries a seek-decode: the first, middle and last segment starts (a few GOPs' decode in all)."""
    return [segments[0].start, segments[len(segments) // 2].start, segments[-1].start]


def trimmed_range(options: Options, frame_count: int) -> tuple[int, int]:
    """Frames ``[start, end)`` to process; an end past the last frame is clamped, a start past it is an error."""
    start = options.trim_frame_start or 0
    if start >= frame_count:
        raise InvalidOptionError(
            f"options.trim_frame_start: {start} is past the last frame; the target has {frame_count} frames (0-{frame_count - 1})"
        )
    end = min(options.trim_frame_end or frame_count, frame_count)
    return start, end


def output_frame_size(options: Options, probe: VideoProbe) -> tuple[int, int]:
    """The output frames' size, as the processors and ``output_video_scale`` make it from the target's; a chain that
    reads faces after a size change, or an output past ``MAX_OUTPUT_SIDE``, is refused naming the option."""
    from facefusion_provider.engine.processors.registry import check_chain, output_size

    check_chain(options)
    scale_field = "output_image_scale" if probe.still_image else "output_video_scale"
    scaled = frame_options(options, still_image=probe.still_image)
    width, height = output_size(scaled, probe.width, probe.height)
    if max(width, height) > MAX_OUTPUT_SIDE:
        enlarged = scaled.output_video_scale > 1.0 or "frame_enhancer" not in options.processors
        field = scale_field if enlarged else "frame_enhancer_model"
        raise InvalidOptionError(
            f"options.{field}: the target's {probe.width}x{probe.height} frames would become {width}x{height}; "
            f"neither side of the output may pass {MAX_OUTPUT_SIDE} pixels (H.264's and HEVC's largest level): "
            "choose a smaller scale"
        )
    return width, height


def check_frame_rate(options: Options, probe: VideoProbe) -> None:
    """Refuse an ``output_video_fps`` other than the target's: segments are cut on the target's frames, and another
    rate would drop or repeat frames across their borders (FaceFusion resamples with FFmpeg's fps filter)."""
    wanted = options.output_video_fps
    rate = Fraction(probe.frame_rate)
    if wanted is not None and abs(wanted - float(rate)) > FRAME_RATE_TOLERANCE:
        raise InvalidOptionError(
            f"options.output_video_fps: {wanted:g} differs from the target's {float(rate):.3f} fps; only the "
            "target's own rate is supported (another would drop or repeat frames across segments): leave it empty"
        )


def _analysis_id(target_id: str, options: Options) -> str | None:
    """The target analysis the chain reads, by the landmarks its processors need; None when none of them reads faces."""
    from facefusion_provider.engine.processors.registry import analysis_needs

    needs = analysis_needs(options)
    return analysis_id(target_id, options, needs.landmarks) if needs.faces else None


def _voice(
    layout: WorkLayout, uris: RunUris, options: Options, probe: VideoProbe, models_dir: str | None
) -> dict[str, Any]:
    """For a chain that reads a voice: the first audio source's voice (separated by ``voice_extractor_model``) as a
    mel spectrogram, computed once and stored with the work (every span reads that file); a source that does not
    decode is refused naming its field and file."""
    if not VOICE_PROCESSORS & set(options.processors):
        return {}
    from facefusion_provider.engine.processors.lip_syncer import voice_identity, voice_mel_of
    from facefusion_provider.engine.store import store_from_environment
    from facefusion_provider.engine.voice import pack_mel
    from facefusion_provider.media.audio import read_voice_samples

    uri = voice_source(uris.source_uris)
    assert uri is not None  # check_sources refused a chain that reads a voice without one
    field = f"{CLI_FIELDS.sources}[{uris.source_uris.index(uri)}]"
    with local_copies([uri]) as (path,):
        samples = read_voice_samples(path, f"{field} ({uri})")
    # prepare runs off the GPU pool unless [facefusion] gpu_commands names it: the CPU is a fallback for the extractor
    providers = [*options.execution_providers, *(["cpu"] if "cpu" not in options.execution_providers else [])]
    extracting = options.model_copy(update={"execution_providers": providers})
    data = pack_mel(voice_mel_of(samples, extracting, store_from_environment(models_dir)))
    if not storage.write_bytes_exclusive(layout.voice_file, data):  # another preparer's: the one every span reads
        data = storage.read_bytes(layout.voice_file)
    return voice_identity(layout.voice_file, data, Fraction(probe.frame_rate))


def _sound(
    layout: WorkLayout, uris: RunUris, options: Options, probe: VideoProbe, frames: tuple[int, int]
) -> dict[str, Any]:
    """The output's sound, encoded once and stored with the work where it is not the target's copied as it is: the
    voice (lip sync) or the target's sound, from the first frame worked for the video's duration (FaceFusion's ``-t``:
    a longer sound is cut, a shorter one stays shorter), starting at the output's first frame. Nothing where there is
    no sound."""
    if not encodes_sound(options):
        return {}
    from facefusion_provider.media.audio import encode_sound, sound_extension
    from facefusion_provider.storage.scratch import scratch_folder

    first, end = frames
    time_base = Fraction(probe.time_base)
    begins = probe.pts[first] * time_base
    ends = (
        probe.pts[end] * time_base
        if end < probe.frame_count
        else probe.pts[0] * time_base + Fraction(probe.duration_seconds)
    )
    voiced = bool(VOICE_PROCESSORS & set(options.processors))
    uri = voice_source(uris.source_uris) if voiced else uris.target_uri
    assert uri is not None  # check_sources refused a chain that reads a voice without one
    encoder, extension = sound_encoder(options), sound_extension(sound_encoder(options))
    with local_copies([uri]) as (path,), scratch_folder("sound-") as folder:
        encoded = os.path.join(folder, f"sound{extension}")
        samples = encode_sound(
            path,
            uri,
            encoded,
            encoder=encoder,
            quality=options.output_audio_quality,
            volume=options.output_audio_volume,
            start=0.0 if voiced else float(begins),
            duration=float(ends - begins),
        )
        if not samples:
            return {}
        with open(encoded, "rb") as handle:
            data = handle.read()
    stored = layout.encoded_sound(extension)
    if not storage.write_bytes_exclusive(stored, data):  # another preparer's: the one every merge reads
        data = storage.read_bytes(stored)
    return {"sound": {"uri": stored, "sha256": hashlib.sha256(data).hexdigest(), "encoder": encoder}}


def _identity(uris: RunUris, options: Options, probe: VideoProbe | None, models_dir: str | None) -> dict[str, Any]:
    """The sources' identity (``prepare_identity``); ``probe``: the target's, read in ``reference`` mode only."""
    from facefusion_provider.engine.processors.chain import prepare_identity
    from facefusion_provider.media.decode import decode_frame
    from facefusion_provider.media.images import rgb_array

    reference = None
    if options.face_selector_mode == "reference":
        assert probe is not None, "reference mode reads the target's frame"
        number = options.reference_frame_number
        if number >= probe.frame_count:
            raise InvalidOptionError(
                f"options.reference_frame_number: {number} is past the last frame; the target has {probe.frame_count} frames"
            )
        with storage.open_input(uris.target_uri) as target:
            reference = rgb_array(decode_frame(target, probe, number, uris.target_uri))
    # prepare runs off the GPU pool unless [facefusion] gpu_commands names it: a few images' identity is cheap on the CPU
    providers = [*options.execution_providers, *(["cpu"] if "cpu" not in options.execution_providers else [])]
    with local_copies(uris.source_uris) as source_paths:
        return prepare_identity(
            source_paths, reference, options.model_copy(update={"execution_providers": providers}), models_dir
        )
