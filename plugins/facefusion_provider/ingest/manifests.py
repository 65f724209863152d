"""Manifests: JSON Lines or CSV files, one job a line, each checked by the swap DAG's own conf check."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from typing import Any

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.ingest.config import ANYWHERE, AllowedPrefixes
from facefusion_provider.options import Options
from facefusion_provider.work.run_inputs import CONF_INPUT_FIELDS, NESTED_OPTIONS_KEY, check_conf

CSV_SOURCE_SEPARATOR = ";"  # several source images in one CSV cell


def manifest_entries(uri: str, data: bytes) -> list[tuple[int, Any]]:
    """``(line number, job)`` of each non-empty line; a line that does not parse is its error message instead."""
    text = data.decode("utf-8", errors="replace")
    if uri.lower().endswith(".csv"):
        return _csv_entries(text)
    entries: list[tuple[int, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((number, json.loads(line)))
        except ValueError as error:
            entries.append((number, f"not a JSON object: {error}"))
    return entries


def _csv_entries(text: str) -> list[tuple[int, Any]]:
    """A header row (source_uris, target_uri, output_uri, optional options), then one job a row; several source
    images are separated by ';' and options is a JSON object."""
    reader = csv.DictReader(io.StringIO(text))
    entries: list[tuple[int, Any]] = []
    for row in reader:
        number = reader.line_num
        if not any((value or "").strip() for value in row.values()):
            continue
        entry: dict[str, Any] = {key: (value or "").strip() for key, value in row.items() if key is not None}
        if None in row:
            entries.append((number, "more cells than the header names"))
            continue
        entry["source_uris"] = [
            s.strip() for s in entry.get("source_uris", "").split(CSV_SOURCE_SEPARATOR) if s.strip()
        ]
        try:
            entry["options"] = json.loads(entry["options"]) if entry.get("options") else {}
        except ValueError as error:
            entries.append((number, f"options: not a JSON object: {error}"))
            continue
        entries.append((number, entry))
    return entries


def checked_job(
    entry: Any, defaults: Mapping[str, Any] | None = None, allowed: AllowedPrefixes = ANYWHERE
) -> dict[str, Any]:
    """A manifest's job checked by the swap DAG's conf check (``check_conf``: keys, options over ``defaults``, URIs,
    output format), its options flat or nested as a conf takes them; or an ``InvalidOptionError`` naming the field.
    Whether the files exist is checked by the swap run's ``validate``. Its options are those the line gives."""
    if isinstance(entry, str):
        raise InvalidOptionError(entry)
    if not isinstance(entry, dict):
        raise InvalidOptionError(f"expected an object with {', '.join(CONF_INPUT_FIELDS)} and options, got {entry!r}")
    checked = check_conf(
        {**(defaults or {}), **entry}, entry, allowed_inputs=allowed.inputs, allowed_outputs=allowed.outputs
    )
    given = {name: value for name, value in entry.items() if name in Options.model_fields}
    return {
        "source_uris": checked.source_uris,
        "target_uri": checked.target_uri,
        "output_uri": checked.output_uri,
        "options": {**given, **(entry.get(NESTED_OPTIONS_KEY) or {})},
    }
