"""A run's inputs and output, checked the same way by ``validate`` (Airflow side), by ingestion and by the worker.

Every problem is an ``InvalidOptionError`` whose message starts with the field it concerns: the conf's names
(``target_uri``) on the Airflow side, the CLI's (``target``) in the worker.
"""

from __future__ import annotations

import difflib
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.options import (
    MAX_SOURCES,
    RENAMED_OPTIONS,
    Options,
    encodes_sound,
    parse_options,
    renamed_option_message,
    sound_encoder,
)
from facefusion_provider.types import IMAGE_EXTENSIONS
from facefusion_provider.work.audio_signatures import AUDIO_FORMATS

# Sources by extension: these are voices (FaceFusion's ``-s`` takes audio beside face images), anything else an image.
AUDIO_EXTENSIONS = frozenset(AUDIO_FORMATS)
# Processors that read a voice among the sources, and those that read a face image among them.
VOICE_PROCESSORS = frozenset({"lip_syncer"})
FACE_SOURCE_PROCESSORS = frozenset({"face_swapper"})

# Output containers the merge can write, and the encoders each one can hold.
OUTPUT_CONTAINERS: dict[str, frozenset[str]] = {
    ".mp4": frozenset({"libx264", "libx265", "libvpx-vp9", "h264_nvenc", "hevc_nvenc"}),
    ".m4v": frozenset({"libx264", "libx265", "h264_nvenc", "hevc_nvenc"}),
    ".mov": frozenset({"libx264", "libx265", "h264_nvenc", "hevc_nvenc", "prores_ks"}),
    ".mkv": frozenset({"libx264", "libx265", "libvpx-vp9", "h264_nvenc", "hevc_nvenc"}),
    ".webm": frozenset({"libvpx-vp9"}),
}
# The outputs that carry a transparent background through segments and merge, and their encoders: ProRes 4444 in
# QuickTime, VP9 with alpha in WebM (``media.encode.ALPHA_ENCODINGS``).
ALPHA_OUTPUTS = {".mov": "prores_ks", ".webm": "libvpx-vp9"}
ALPHA_IMAGE_EXTENSIONS = (".png", ".webp")  # an image output with a transparent background: PNG or WebP, not JPEG


# The sound encoders each output container holds (FaceFusion's list; an .m4v holds aac alone, as FaceFusion makes it).
OUTPUT_AUDIO_CONTAINERS: dict[str, frozenset[str]] = {
    ".mp4": frozenset({"aac", "libmp3lame", "libopus", "flac"}),
    ".m4v": frozenset({"aac"}),
    ".mov": frozenset({"aac", "libmp3lame", "pcm_s16le", "pcm_s32le"}),
    ".mkv": frozenset({"flac", "aac", "libmp3lame", "libopus", "pcm_s16le", "pcm_s32le"}),
    ".webm": frozenset({"libopus"}),
}


@dataclass(frozen=True)
class FieldNames:
    """What the fields are called where the user gave them."""

    sources: str
    target: str
    output: str
    options: str


CONF_FIELDS = FieldNames("source_uris", "target_uri", "output_uri", "options")
CONF_INPUT_FIELDS = ("source_uris", "target_uri", "output_uri")
NESTED_OPTIONS_KEY = "options"  # the older conf shape: every option under this key
# List options where an empty list is a real choice: the form sends an emptied multi-select as null, which means [].
EMPTY_LIST_OPTIONS = frozenset({"processors"})
CLI_FIELDS = FieldNames("source", "target", "output", "options")
# A marker (".{name}.facefusion.json") and a partial file (".{name}.partial-{32 hex}{ext}") go beside the output.
MAX_OUTPUT_NAME_BYTES = 200


@dataclass(frozen=True)
class RunUris:
    source_uris: list[str]
    target_uri: str
    output_uri: str | None


def run_uris(
    sources: Sequence[str],
    target: str,
    output: str | None,
    *,
    fields: FieldNames,
    relative: bool,
    allowed_inputs: Sequence[str] = (),
    allowed_outputs: Sequence[str] = (),
) -> RunUris:
    """Normalised URIs of files (never folders or buckets), inside the allow-lists, the output overwriting no input."""

    def file_uri(value: str, field: str, allowed: Sequence[str], kind: str) -> str:
        if isinstance(value, str) and value.endswith("/"):  # normalising would drop the slash that says "folder"
            storage.require_file_uri(value, field=field)  # a bucket alone ("s3://bucket/") gets its own message
            raise InvalidOptionError(f"{field}: {value!r} names a folder, not a file")
        uri = storage.require_file_uri(storage.normalize_uri(value, field=field, relative=relative), field=field)
        storage.check_allowed(uri, allowed, field=field, kind=kind)
        return uri

    if len(sources) > MAX_SOURCES:
        raise InvalidOptionError(f"{fields.sources}: {len(sources)} source images; at most {MAX_SOURCES} are allowed")
    source_uris = [
        file_uri(source, f"{fields.sources}[{i}]", allowed_inputs, "input") for i, source in enumerate(sources)
    ]
    target_uri = file_uri(target, fields.target, allowed_inputs, "input")
    output_uri = None if output is None else file_uri(output, fields.output, allowed_outputs, "output")
    if output_uri is not None:
        check_output_name(output_uri, fields.output)
    if output_uri is not None and output_uri in (target_uri, *source_uris):
        raise InvalidOptionError(f"{fields.output}: {output_uri} would overwrite an input; choose another path")
    return RunUris(source_uris, target_uri, output_uri)


def check_output_name(output_uri: str, field: str) -> None:
    """The output's file name leaves room for the names written beside it (its marker, its partial file)."""
    name = posixpath.basename(urlparse(output_uri).path)
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_OUTPUT_NAME_BYTES:
        raise InvalidOptionError(
            f"{field}: the file name is {size} bytes long; at most {MAX_OUTPUT_NAME_BYTES} are allowed (its marker and "
            f"partial file are written beside it under longer names, and a name holds {storage.MAX_NAME_BYTES})"
        )


def check_output_outside_work(output_uri: str, work_root: str, field: str) -> None:
    """The output is not inside the work root, where cleanup removes whatever it finds (real paths for local ones)."""
    output_path, root_path = storage.local_path(output_uri), storage.local_path(work_root)
    if output_path is not None and root_path is not None and urlparse(output_uri).scheme == "file":
        inside = storage.is_within(os.path.realpath(output_path), os.path.realpath(root_path))
    else:
        inside = output_uri.startswith(work_root.rstrip("/") + "/")
    if inside:
        raise InvalidOptionError(
            f"{field}: {output_uri} is inside the work root {work_root}, which cleanup empties; write the output elsewhere"
        )


def uri_extension(uri: str) -> str:
    """The lower-case extension of the file a URI names (``.mp4``), or ``""``."""
    return posixpath.splitext(urlparse(uri).path)[1].lower()


def is_image_uri(uri: str) -> bool:
    """A target named as an image (JPEG, PNG, WebP): FaceFusion's image-to-image workflow, an image output."""
    return uri_extension(uri) in IMAGE_EXTENSIONS


def check_output_format(output_uri: str, options: Options, fields: FieldNames, target_uri: str) -> None:
    """The output's extension names a container the merge writes, and that container can hold the chosen encoder;
    an image target's output is an image, a video target's a video."""
    extension = uri_extension(output_uri)
    if is_image_uri(target_uri):
        if extension not in IMAGE_EXTENSIONS:
            raise InvalidOptionError(
                f"{fields.output}: {output_uri} is not an image file (extension {extension or '(none)'!r}); the "
                f"target {target_uri} is an image, so the output is one too: allowed {', '.join(IMAGE_EXTENSIONS)}"
            )
        if options.transparent_background() and extension not in ALPHA_IMAGE_EXTENSIONS:
            raise InvalidOptionError(
                f"{fields.output}: {output_uri} is a {extension} file, which cannot carry a transparent background "
                f"(background_remover_fill_color alpha {options.background_remover_fill_color[3]}); use "
                f"{' or '.join(ALPHA_IMAGE_EXTENSIONS)}, or an opaque fill (alpha 255)"
            )
        return
    if extension in IMAGE_EXTENSIONS:
        raise InvalidOptionError(
            f"{fields.output}: {output_uri} is an image file, and the target {target_uri} is a video, so the output "
            f"is one too: allowed {', '.join(OUTPUT_CONTAINERS)} (an image output needs an image target: "
            f"{', '.join(IMAGE_EXTENSIONS)})"
        )
    encoders = OUTPUT_CONTAINERS.get(extension)
    if encoders is None:
        raise InvalidOptionError(
            f"{fields.output}: {output_uri} has extension {extension or '(none)'!r}; allowed: {', '.join(OUTPUT_CONTAINERS)}"
        )
    if options.output_video_encoder not in encoders:
        raise InvalidOptionError(
            f"{fields.options}.output_video_encoder: {options.output_video_encoder} cannot be stored in a {extension} "
            f"file; allowed there: {', '.join(sorted(encoders))}"
        )
    if options.transparent_background():
        check_alpha_output(output_uri, extension, options, fields)
    sounds = OUTPUT_AUDIO_CONTAINERS[extension]
    if encodes_sound(options) and sound_encoder(options) not in sounds:
        chosen = "" if options.output_audio_encoder else " (the voice's default)"
        raise InvalidOptionError(
            f"{fields.options}.output_audio_encoder: {sound_encoder(options)}{chosen} cannot be stored in a "
            f"{extension} file; allowed there: {', '.join(sorted(sounds))}"
        )


def check_alpha_output(output_uri: str, extension: str, options: Options, fields: FieldNames) -> None:
    """A transparent fill asks for an output that carries alpha: a .mov with prores_ks, or a .webm with libvpx-vp9."""
    asked = f"a transparent background (background_remover_fill_color alpha {options.background_remover_fill_color[3]})"
    works = (
        "a .mov output with output_video_encoder prores_ks (ProRes 4444) or a .webm with libvpx-vp9 (VP9 with "
        "alpha), or an opaque fill (alpha 255)"
    )
    encoder = ALPHA_OUTPUTS.get(extension)
    if encoder is None:
        raise InvalidOptionError(
            f"{fields.output}: {output_uri} is a {extension} file, which cannot carry {asked}; use {works}"
        )
    if options.output_video_encoder != encoder:
        raise InvalidOptionError(
            f"{fields.options}.output_video_encoder: {options.output_video_encoder} cannot carry {asked}; use {works}"
        )


def is_audio_source(uri: str) -> bool:
    """Whether a source is a voice (by its extension, as the user names it), not a face image."""
    return uri_extension(uri) in AUDIO_EXTENSIONS


def image_sources(source_uris: Sequence[str]) -> list[str]:
    return [uri for uri in source_uris if not is_audio_source(uri)]


def voice_source(source_uris: Sequence[str]) -> str | None:
    """The voice a run speaks: its first audio source, as FaceFusion takes it; None without one."""
    return next((uri for uri in source_uris if is_audio_source(uri)), None)


def check_sources(source_uris: Sequence[str], options: Options, fields: FieldNames) -> None:
    """A processor that reads a face image has one among the sources, one that reads a voice has an audio file."""
    for name in FACE_SOURCE_PROCESSORS & set(options.processors):
        if not image_sources(source_uris):
            raise InvalidOptionError(f"{fields.sources}: {name} needs at least one source image")
    for name in VOICE_PROCESSORS & set(options.processors):
        if voice_source(source_uris) is None:
            raise InvalidOptionError(
                f"{fields.sources}: {name} needs a voice among the sources: an audio file "
                f"({', '.join(sorted(AUDIO_EXTENSIONS))})"
            )


@dataclass(frozen=True)
class CheckedConf:
    """A run's conf as ``validate`` and ingestion accept it: checked options and normalised URIs."""

    options: Options
    source_uris: list[str]
    target_uri: str
    output_uri: str


def check_conf(
    params: Mapping[str, Any],
    conf: Mapping[str, Any],
    *,
    allowed_inputs: Sequence[str] = (),
    allowed_outputs: Sequence[str] = (),
) -> CheckedConf:
    """The one conf check (no storage access): keys, options, URIs, allow-lists, sources and output format. ``params``
    holds the flat values (the form's, with defaults), ``conf`` what was sent."""
    options = conf_options(params, conf)
    sources = params.get("source_uris")
    if not isinstance(sources, list) or not sources:
        raise InvalidOptionError(f"source_uris: expected a non-empty list of paths or URIs, got {sources!r}")
    uris = run_uris(
        sources,
        params.get("target_uri") or "",  # an empty one is named by run_uris
        params.get("output_uri") or "",
        fields=CONF_FIELDS,
        relative=False,
        allowed_inputs=allowed_inputs,
        allowed_outputs=allowed_outputs,
    )
    assert uris.output_uri is not None
    check_sources(uris.source_uris, options, CONF_FIELDS)
    check_output_format(uris.output_uri, options, CONF_FIELDS, uris.target_uri)
    return CheckedConf(options, uris.source_uris, uris.target_uri, uris.output_uri)


def conf_options(params: Mapping[str, Any], conf: Mapping[str, Any]) -> Options:
    """The options of a run: the flat fields (the form's, each with its default), with the older nested
    ``options`` object laid over them; a key given both ways with two values is an error."""
    unknown = sorted(set(conf) - {*CONF_INPUT_FIELDS, NESTED_OPTIONS_KEY, *Options.model_fields})
    if unknown:
        raise InvalidOptionError("; ".join(_unknown_key(key) for key in unknown))
    nested = conf.get(NESTED_OPTIONS_KEY) or {}
    if not isinstance(nested, dict):
        raise InvalidOptionError(f"options: expected an object of option names and values, got {nested!r}")
    for name, value in nested.items():
        if name in conf and conf[name] != value:
            raise InvalidOptionError(
                f"options.{name}: given twice, as {name} ({conf[name]!r}) and as options.{name} ({value!r}); give it once"
            )
    flat = {name: params[name] for name in Options.model_fields if name in params}
    values = {**flat, **nested}
    for name in EMPTY_LIST_OPTIONS & {name for name, value in values.items() if value is None}:
        values[name] = []  # the form's emptied multi-select
    # Any other emptied field (the form sends null) is the option's default.
    return parse_options({name: value for name, value in values.items() if value is not None}, where="options")


def _unknown_key(key: str) -> str:
    if key in RENAMED_OPTIONS:
        return f"{key}: {renamed_option_message(key)}"
    known = [*CONF_INPUT_FIELDS, *Options.model_fields]
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(known)}"
    return f"{key}: unknown conf key{hint}"
