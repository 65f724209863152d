"""``plan``: the chunk list of a prepared job, the input of the mapped ``swap_chunk`` tasks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.commands import fail_on_bad_input
from facefusion_provider.types import JobSpec


def chunk_list(job: JobSpec) -> list[dict[str, Any]]:
    """One dict per chunk: ``{"index": 7, "start": 448, "end": 512, "label": "frames 448-511"}``."""
    return [{**chunk.model_dump(), "label": chunk.label} for chunk in job.chunks]


class PlanChunksOperator(BaseOperator):
    """Read ``job.json`` (written by ``prepare``) and return its chunks; every chunk reads the same job, so they agree.

    :param job_uri: the job folder, from ``validate``.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, "job_uri")

    def __init__(self, *, job_uri: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_uri = job_uri

    def execute(self, context: Context) -> list[dict[str, Any]]:
        with fail_on_bad_input():
            job = FaceFusionStorageHook().read_job(self.job_uri)
        chunks = chunk_list(job)
        self.log.info("Job %s: %d frames in %d chunks", job.job_id, job.frame_end - job.frame_start, len(chunks))
        return chunks
