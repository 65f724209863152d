"""The one place where the DAG gets its worker operators: the ``[facefusion] backend`` setting picks the classes.

A backend is two operator classes. ``worker`` takes ``command=`` ("prepare" or "merge"), ``work_uri=``,
``output_uri=`` and ``worker_args=`` (flags after ``--work-uri``); ``swap_span`` takes ``work_uri=``, ``output_uri=``,
``target_uri=`` and ``span=`` (one dict of ``plan``'s list, mapped with ``expand``). Both check
``commands.completed_work`` before launching anything and turn failures into task failures with
``commands.raise_for_failure``. A new backend is one loader in ``BACKEND_LOADERS``.
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
    swap_span: type[BaseOperator]


def _local() -> Backend:
    from facefusion_provider.operators.local import LocalSwapSpanOperator, LocalWorkerOperator

    return Backend(worker=LocalWorkerOperator, swap_span=LocalSwapSpanOperator)


def _kubernetes() -> Backend:
    from facefusion_provider.operators.kubernetes import KubernetesSwapSpanOperator, KubernetesWorkerOperator

    return Backend(worker=KubernetesWorkerOperator, swap_span=KubernetesSwapSpanOperator)


BACKEND_LOADERS: dict[str, Callable[[], Backend]] = {"local": _local, "kubernetes": _kubernetes}


def load_backend(name: str | None = None) -> Backend:
    """The operator classes of backend ``name`` (default: the ``[facefusion] backend`` setting)."""
    name = name or load_settings().backend
    if name not in BACKEND_LOADERS:
        raise ValueError(f"[facefusion] backend: {name!r} is not available; available: {', '.join(BACKEND_LOADERS)}")
    return BACKEND_LOADERS[name]()


def worker_operator(command: str, *, task_id: str, backend: str | None = None, **kwargs: Any) -> BaseOperator:
    """An operator that runs ``facefusion-worker <command> --work-uri <work_uri> [worker_args]`` on the chosen backend."""
    return load_backend(backend).worker(task_id=task_id, command=command, **kwargs)


def swap_span_operator(*, task_id: str, backend: str | None = None, **kwargs: Any) -> OperatorPartial:
    """The partial ``swap-span`` operator of the chosen backend; map it with ``.expand(span=plan.output)``."""
    return load_backend(backend).swap_span.partial(task_id=task_id, **kwargs)
