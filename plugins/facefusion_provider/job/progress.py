"""A span's progress as the worker reports it at each commit and the operator keeps it (Airflow's task state store)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

PROGRESS_PREFIX = "facefusion.progress "  # a worker log line with this, then the JSON of a ``SpanProgress``


class SpanProgress(BaseModel):
    model_config = ConfigDict(extra="forbid")

    span: int
    segments_committed: int  # of the span's own segments, by any worker
    segments_total: int
    committed_here: int  # segments this worker committed, its own and other spans'
    frames_done: int  # frames this worker encoded

    def line(self) -> str:
        return PROGRESS_PREFIX + self.model_dump_json()
