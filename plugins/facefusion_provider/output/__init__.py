"""Assembling a run's output from the work's committed segments (no Airflow): every segment checked against its
marker (``integrity``), the output joined from the segments' and the target's indexes (``index_join``, ``mp4join``,
``movies``, ``sound``) or remuxed (``remux``), then published atomically with its preview and marker (``publish``).
``merge`` puts them together; the worker's loop (``worker``) calls it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MergeResult:
    output_uri: str
    preview_uri: str
    frame_count: int
    skipped: bool  # the output already exists for this work
    timings: dict[str, float] = field(default_factory=dict)
    method: str = "remux"  # or "index": joined from the inputs' indexes, see ``output.index_join``
