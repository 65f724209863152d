"""Content-addressed ids: the shared work of a run (``work_id``), the target analysis it reads (``analysis_id``), and
a run's key in storage (``run_key``)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from facefusion_provider.options import ANALYSIS_OPTIONS, Options
from facefusion_provider.work.records import WORK_FORMAT_VERSION


def _digest(value: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:24]


def work_id(target_content_id: str, source_content_ids: list[str], options: Options) -> str:
    """The same target, sources and pixel options give the same work folder, and so reuse its segments; where a run
    writes its output plays no part."""
    return _digest(
        {
            "format": WORK_FORMAT_VERSION,
            "target": target_content_id,
            "sources": source_content_ids,
            "options": options.pixel_options(),
        }
    )


def analysis_id(target_content_id: str, options: Options, landmarks: str) -> str:
    """What every frame's faces depend on besides the pixels: the target, the options that change detection and
    selection (and the segment grid they are stored by), and the dense ``landmarks`` the processors read (the engine
    says which: ``engine.processors.registry.analysis_needs``). The source faces play no part."""
    values = options.model_dump(mode="json")
    return _digest(
        {
            "format": WORK_FORMAT_VERSION,
            "target": target_content_id,
            "options": {name: values[name] for name in sorted(ANALYSIS_OPTIONS)},
            "landmarks": landmarks,
        }
    )


def run_key(dag_id: str, run_id: str) -> str:
    """A storage-safe, unique name for an Airflow run (run ids hold ':' and '+'), readable at its start."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{dag_id}.{run_id}")[:80]
    return f"{readable}.{hashlib.sha256(f'{dag_id}/{run_id}'.encode()).hexdigest()[:12]}"
