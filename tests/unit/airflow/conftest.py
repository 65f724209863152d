"""Job folders on the local filesystem, written the way the worker writes them, for operator tests without Airflow's DB."""

from __future__ import annotations

import os
import tempfile

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from facefusion_provider import storage
from facefusion_provider.chunking import plan_chunks
from facefusion_provider.options import Options
from facefusion_provider.types import ChunkMarker, JobSpec, OutputMarker, VideoProbe


@pytest.fixture(autouse=True)
def _isolated_airflow(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No [facefusion] setting or fault switch leaks in from the environment that runs the tests."""
    for name in list(os.environ):
        if name.startswith("AIRFLOW__FACEFUSION__") or name.startswith("FACEFUSION_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
    yield


def _write_job(
    work_root: Path, output: Path, *, frames: int = 40, chunk_size: int = 8, job_id: str = "job0"
) -> JobSpec:
    """A committed ``job.json`` for a ``frames``-frame target, as ``prepare`` leaves it."""
    layout = storage.JobLayout.under(work_root.as_uri(), job_id)
    probe = VideoProbe(
        container="mp4",
        codec="h264",
        width=64,
        height=48,
        pix_fmt="yuv420p",
        frame_rate="25/1",
        time_base="1/12800",
        frame_count=frames,
        pts=[i * 512 for i in range(frames)],
        duration_seconds=frames / 25,
    )
    job = JobSpec(
        job_id=job_id,
        job_uri=layout.job_uri,
        source_uris=[(work_root / "face.png").as_uri()],
        target_uri=(work_root / "in.mp4").as_uri(),
        output_uri=output.as_uri(),
        options=Options(chunk_size=chunk_size, processors=[]),
        probe=probe,
        frame_start=0,
        frame_end=frames,
        chunks=plan_chunks(0, frames, chunk_size),
    )
    storage.write_json_atomic(layout.job_json, job.model_dump(mode="json"))
    return job


def _commit_chunk(job: JobSpec, index: int) -> Path:
    """Commit chunk ``index`` the way ``swap-chunk`` does: the file, then its marker."""
    layout = storage.JobLayout(job.job_uri)
    chunk = job.chunks[index]
    storage.write_bytes_atomic(layout.chunk_video(index), b"chunk")
    marker = ChunkMarker(
        job_id=job.job_id,
        index=index,
        start=chunk.start,
        end=chunk.end,
        frame_count=chunk.frame_count,
        sha256="0" * 64,
        size=5,
    )
    storage.write_json_atomic(layout.chunk_marker(index), marker.model_dump(mode="json"))
    return Path(storage.local_path(layout.chunk_marker(index)) or "")


def _commit_output(job: JobSpec, *, job_id: str | None = None) -> None:
    """Write the output and its marker the way ``merge`` does (optionally naming another job)."""
    storage.write_bytes_atomic(job.output_uri, b"video")
    marker = OutputMarker(
        job_id=job_id or job.job_id,
        output_uri=job.output_uri,
        frame_count=job.probe.frame_count,
        sha256="1" * 64,
        size=5,
    )
    storage.write_json_atomic(storage.output_marker_uri(job.output_uri), marker.model_dump(mode="json"))


@pytest.fixture
def write_job() -> Callable[..., JobSpec]:
    return _write_job


@pytest.fixture
def commit_chunk() -> Callable[[JobSpec, int], Path]:
    return _commit_chunk


@pytest.fixture
def commit_output() -> Callable[..., None]:
    return _commit_output
