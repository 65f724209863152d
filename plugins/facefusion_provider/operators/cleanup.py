"""``cleanup``: after a successful merge, remove the job's intermediates and publish the output as an Airflow Asset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, BaseOperator, Context
from pydantic import JsonValue

from facefusion_provider.hooks.storage import FaceFusionStorageHook

# One asset for every output of the DAG; each event's extra names the file (output_uri) and the job that made it.
SWAP_OUTPUT_ASSET = Asset(name="facefusion_swap_output", uri="x-facefusion://facefusion_swap/output")


class CleanupJobOperator(BaseOperator):
    """Remove ``job_uri`` once the output's marker names ``job_id`` (a failed run keeps its chunks for resume), then
    record an event on each outlet asset with ``{"output_uri", "job_id", "frame_count", "sha256"}`` as its extra.

    :param job_uri: the job folder to remove.
    :param job_id: the job that must own the output before anything is removed.
    :param output_uri: the merged output.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, "job_uri", "job_id", "output_uri")

    def __init__(self, *, job_uri: str, job_id: str, output_uri: str, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [SWAP_OUTPUT_ASSET])
        super().__init__(**kwargs)
        self.job_uri = job_uri
        self.job_id = job_id
        self.output_uri = output_uri

    def execute(self, context: Context) -> dict[str, JsonValue]:
        hook = FaceFusionStorageHook()
        marker = hook.output_marker(self.output_uri)
        if marker is None or marker.job_id != self.job_id:
            # Retryable: an object store may show the output a moment after merge wrote it.
            raise RuntimeError(f"{self.output_uri} carries no marker of job {self.job_id}: keeping {self.job_uri}")
        hook.remove_job(self.job_uri)
        self.log.info("Removed %s; output %s (%d frames)", self.job_uri, self.output_uri, marker.frame_count)
        extra: dict[str, JsonValue] = {
            "output_uri": self.output_uri,
            "job_id": self.job_id,
            "frame_count": marker.frame_count,
            "sha256": marker.sha256,
        }
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = extra
        return extra
