"""The ingestion DAG's Params as a checked model, and the deployment's allow-lists they must lie inside."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.storage.uris import check_allowed

IngestMode = Literal["videos", "faces", "manifests"]
VIDEO_EXTENSIONS = (".mp4", ".mov", ".m4v", ".mkv")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
MANIFEST_EXTENSIONS = (".jsonl", ".csv")
DEFAULT_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "videos": VIDEO_EXTENSIONS,
    "faces": IMAGE_EXTENSIONS,
    "manifests": MANIFEST_EXTENSIONS,
}


class IngestRecord(BaseModel):
    """A record of ingestion: its config, a listed file, a ledger object."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class IngestConfig(IngestRecord):
    """The ingestion DAG's Params, checked."""

    mode: IngestMode = Field(default="videos", description="What a new file under input_prefix means.")
    input_prefix: str = Field(description="Prefix whose new files are ingested, e.g. s3://bucket/incoming/.")
    output_prefix: str = Field(description="Where the outputs go.")
    ledger_prefix: str = Field(description="Where the claims and outcomes live (one object per attempt).")
    source_uris: list[str] = Field(default_factory=list, description="videos mode: the fixed source face image(s).")
    target_uris: list[str] = Field(default_factory=list, description="faces mode: the standard target video(s).")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of every swap run.")
    extensions: list[str] | None = Field(default=None, min_length=1)
    min_size_bytes: int = Field(default=1, ge=0)
    max_size_bytes: int = Field(default=20 * 1024**3, ge=1)
    max_runs_per_scan: int = Field(default=10, ge=1, le=1024)
    max_attempts: int = Field(default=3, ge=1, le=100)
    orphan_after_minutes: float = Field(default=30.0, ge=0)
    settle_minutes: float = Field(default=2.0, ge=0)

    @field_validator("input_prefix", "output_prefix", "ledger_prefix")
    @classmethod
    def _folder(cls, value: str) -> str:
        if "://" not in value or value.split("://", 1)[1].strip("/") == "":
            raise ValueError(f"expected a URI with a bucket or folder, such as s3://bucket/prefix/, got {value!r}")
        return value.rstrip("/") + "/"

    @field_validator("extensions")
    @classmethod
    def _dotted_lowercase(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        return sorted({ext.lower() if ext.startswith(".") else "." + ext.lower() for ext in value})

    @model_validator(mode="after")
    def _consistent(self) -> IngestConfig:
        if self.max_size_bytes < self.min_size_bytes:
            raise ValueError(f"max_size_bytes ({self.max_size_bytes}) is below min_size_bytes ({self.min_size_bytes})")
        if self.output_prefix == self.input_prefix:
            raise ValueError("output_prefix must differ from input_prefix: every output would overwrite its input")
        if self.mode == "videos" and not self.source_uris:
            raise ValueError("source_uris: the videos mode needs the source face image(s) to swap in")
        if self.mode == "faces" and not self.target_uris:
            raise ValueError("target_uris: the faces mode needs the target video(s) to swap each face into")
        return self

    @property
    def file_extensions(self) -> tuple[str, ...]:
        return tuple(self.extensions) if self.extensions else DEFAULT_EXTENSIONS[self.mode]

    def excluded_prefixes(self) -> tuple[str, ...]:
        """Our own outputs and ledger (allowed under the input prefix): never inputs to ingest."""
        return (self.output_prefix, self.ledger_prefix)


@dataclass(frozen=True)
class AllowedPrefixes:
    """The deployment's allow-lists (``[facefusion] allowed_input_prefixes`` and ``allowed_output_prefixes``); an
    empty list allows anywhere."""

    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


ANYWHERE = AllowedPrefixes()  # no allow-lists


def check_allowed_config(config: IngestConfig, allowed: AllowedPrefixes) -> None:
    """Every prefix and fixed input of ``config`` lies inside the allow-lists, so no run the scan starts fails on them."""
    for field_name, uri, prefixes, kind in (
        ("input_prefix", config.input_prefix, allowed.inputs, "input"),
        ("output_prefix", config.output_prefix, allowed.outputs, "output"),
        ("ledger_prefix", config.ledger_prefix, allowed.outputs, "output"),
        *((f"source_uris[{i}]", uri, allowed.inputs, "input") for i, uri in enumerate(config.source_uris)),
        *((f"target_uris[{i}]", uri, allowed.inputs, "input") for i, uri in enumerate(config.target_uris)),
    ):
        check_allowed(uri, prefixes, field=field_name, kind=kind)


def parse_ingest_config(values: Mapping[str, Any]) -> IngestConfig:
    """Check the Params; a problem is an ``InvalidOptionError`` naming the param."""
    try:
        return IngestConfig.model_validate(dict(values))
    except ValidationError as error:
        raise InvalidOptionError("invalid ingestion params: " + describe_errors(error)) from None


def describe_errors(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'params'}: {item['msg']}".replace("Value error, ", "")
        for item in error.errors()
    )
