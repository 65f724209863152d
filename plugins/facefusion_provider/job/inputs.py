"""A run's inputs and output, checked the same way by ``validate`` (Airflow side) and by the worker.

Every problem is an ``InvalidOptionError`` whose message starts with the field it concerns: the conf's names
(``target_uri``) on the Airflow side, the CLI's (``target``) in the worker.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.options import Options

# Output containers the merge can write, and the encoders each one can hold.
OUTPUT_CONTAINERS: dict[str, frozenset[str]] = {
    ".mp4": frozenset({"libx264", "libx265", "libvpx-vp9", "h264_nvenc", "hevc_nvenc"}),
    ".m4v": frozenset({"libx264", "libx265", "h264_nvenc", "hevc_nvenc"}),
    ".mov": frozenset({"libx264", "libx265", "h264_nvenc", "hevc_nvenc"}),
    ".mkv": frozenset({"libx264", "libx265", "libvpx-vp9", "h264_nvenc", "hevc_nvenc"}),
    ".webm": frozenset({"libvpx-vp9"}),
}


@dataclass(frozen=True)
class FieldNames:
    """What the fields are called where the user gave them."""

    sources: str
    target: str
    output: str
    options: str


CONF_FIELDS = FieldNames("source_uris", "target_uri", "output_uri", "options")
CLI_FIELDS = FieldNames("source", "target", "output", "options")


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

    source_uris = [
        file_uri(source, f"{fields.sources}[{i}]", allowed_inputs, "input") for i, source in enumerate(sources)
    ]
    target_uri = file_uri(target, fields.target, allowed_inputs, "input")
    output_uri = None if output is None else file_uri(output, fields.output, allowed_outputs, "output")
    if output_uri is not None and output_uri in (target_uri, *source_uris):
        raise InvalidOptionError(f"{fields.output}: {output_uri} would overwrite an input; choose another path")
    return RunUris(source_uris, target_uri, output_uri)


def check_output_format(output_uri: str, options: Options, fields: FieldNames) -> None:
    """The output's extension names a container the merge writes, and that container can hold the chosen encoder."""
    extension = posixpath.splitext(urlparse(output_uri).path)[1].lower()
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


def check_sources(source_uris: Sequence[str], options: Options, fields: FieldNames) -> None:
    if "face_swapper" in options.processors and not source_uris:
        raise InvalidOptionError(f"{fields.sources}: face_swapper needs at least one source image")
