"""The one place where the DAG gets its worker operators: the ``[facefusion] backend`` setting picks the classes.

A backend is two operator classes. ``worker`` takes ``command=`` ("prepare" or "merge"), ``job_uri=`` and
``worker_args=`` (flags after ``--job-uri``); ``swap_chunk`` takes ``job_uri=`` and ``chunk=`` (one dict of ``plan``'s
list, mapped with ``expand``). Both check ``commands.completed_work`` before launching anything and turn failures into
task failures with ``commands.raise_for_failure``. A new backend is one loader in ``BACKEND_LOADERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.definitions.mappedoperator import OperatorPartial

from facefusion_provider.settings import load_settings


@dataclass(frozen=True)
class Backend:
    worker: type[BaseOperator]
    swap_chunk: type[BaseOperator]


def _local() -> Backend:
    from facefusion_provider.operators.local import LocalSwapChunkOperator, LocalWorkerOperator

    return Backend(worker=LocalWorkerOperator, swap_chunk=LocalSwapChunkOperator)


def _kubernetes() -> Backend:
    from facefusion_provider.operators.kubernetes import KubernetesSwapChunkOperator, KubernetesWorkerOperator

    return Backend(worker=KubernetesWorkerOperator, swap_chunk=KubernetesSwapChunkOperator)


BACKEND_LOADERS: dict[str, Callable[[], Backend]] = {"local": _local, "kubernetes": _kubernetes}


def load_backend(name: str | None = None) -> Backend:
    """The operator classes of backend ``name`` (default: the ``[facefusion] backend`` setting)."""
    name = name or load_settings().backend
    if name not in BACKEND_LOADERS:
        raise ValueError(f"[facefusion] backend: {name!r} is not available; available: {', '.join(BACKEND_LOADERS)}")
    return BACKEND_LOADERS[name]()


def worker_operator(
    command: str, *, task_id: str, job_uri: Any, backend: str | None = None, **kwargs: Any
) -> BaseOperator:
    """An operator that runs ``facefusion-worker <command> --job-uri <job_uri> [worker_args]`` on the chosen backend."""
    return load_backend(backend).worker(task_id=task_id, command=command, job_uri=job_uri, **kwargs)


def swap_chunk_operator(*, task_id: str, job_uri: Any, backend: str | None = None, **kwargs: Any) -> OperatorPartial:
    """The partial ``swap-chunk`` operator of the chosen backend; map it with ``.expand(chunk=plan.output)``."""
    return load_backend(backend).swap_chunk.partial(task_id=task_id, job_uri=job_uri, **kwargs)
