"""What the ingestion DAG's page says at a glance (its description and tags): whether it is configured, and how."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SETTINGS_VARIABLE = "facefusion_ingest"  # operators/ingest.py reads it
NOT_CONFIGURED_TAG = "not configured"


def ingest_description(settings: Mapping[str, Any], schedule: str | None) -> str:
    """``Not configured: ...`` without the Variable; else what it ingests, from where to where, and when."""
    if not settings:
        return (
            f"Not configured: set the Variable {SETTINGS_VARIABLE} (see this DAG's Docs). "
            "Until then it has no schedule and starts nothing."
        )
    mode = settings.get("mode", "videos")
    where = f"{settings.get('input_prefix', '?')} to {settings.get('output_prefix', '?')}"
    when = f"scans on schedule {schedule}" if schedule else "scans only when triggered"
    return f"Configured: new {mode} from {where}; {when}."


def ingest_tags(settings: Mapping[str, Any]) -> list[str]:
    if not settings:
        return ["facefusion", NOT_CONFIGURED_TAG]
    return ["facefusion", f"ingest {settings.get('mode', 'videos')}"]
