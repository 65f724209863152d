"""A run's output and its marker: the proof that this run's job is finished, whatever happened to the shared work."""

from __future__ import annotations

from facefusion_provider import storage
from facefusion_provider.job.layout import output_marker_uri
from facefusion_provider.job.records import OutputMarker


def output_done(work_id: str, output_uri: str) -> OutputMarker | None:
    """The output's marker when it names ``work_id`` and the output file exists (an unreadable marker: None)."""
    marker_uri = output_marker_uri(output_uri)
    if not storage.exists(marker_uri):
        return None
    try:
        marker = OutputMarker.model_validate_json(storage.read_bytes(marker_uri))
    except ValueError:
        return None
    if marker.work_id != work_id or not storage.exists(output_uri):
        return None
    return marker
