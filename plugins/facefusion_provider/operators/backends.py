"""The one place where the DAG gets its worker tasks, chosen when the DAG is built.

``[facefusion] backend`` picks the worker-command operator: ``local`` runs ``FaceFusionWorkerOperator`` (the command as
a subprocess), ``kubernetes`` runs ``FaceFusionWorkerPodOperator`` (the same call as a pod). Both take ``command=``,
``work_uri=``, ``output_uri=``, ``run_key=`` and ``worker_args=`` (``prepare``, ``merge``), or ``target_uri=`` and
``span=`` (``swap-span``, mapped with ``expand``). With ``[facefusion] span_workers = standing`` the DAG makes its span
tasks ``sensors.standing_workers.SpanCommittedSensor`` instead. A new backend is one loader in ``BACKEND_LOADERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.definitions.mappedoperator import OperatorPartial

from facefusion_provider.operators.local import FaceFusionWorkerOperator
from facefusion_provider.settings import load_settings


def _local() -> type[BaseOperator]:
    return FaceFusionWorkerOperator


def _kubernetes() -> type[BaseOperator]:
    # Imported when chosen: the Kubernetes client costs a local-backend DAG about 3 s of parsing.
    from facefusion_provider.operators.kubernetes import FaceFusionWorkerPodOperator

    return FaceFusionWorkerPodOperator


BACKEND_LOADERS: dict[str, Callable[[], type[BaseOperator]]] = {"local": _local, "kubernetes": _kubernetes}


def load_backend(name: str | None = None) -> type[BaseOperator]:
    """The worker-command operator of backend ``name`` (default: the ``[facefusion] backend`` setting)."""
    name = name or load_settings().backend
    if name not in BACKEND_LOADERS:
        raise ValueError(f"[facefusion] backend: {name!r} is not available; available: {', '.join(BACKEND_LOADERS)}")
    return BACKEND_LOADERS[name]()


def worker_operator(command: str, *, task_id: str, backend: str | None = None, **kwargs: Any) -> BaseOperator:
    """An operator that runs ``facefusion-worker <command> --work-uri <work_uri> [worker_args]`` on the chosen backend."""
    return load_backend(backend)(task_id=task_id, command=command, **kwargs)


def swap_span_operator(*, task_id: str, backend: str | None = None, **kwargs: Any) -> OperatorPartial:
    """The partial span task (map it with ``.expand(span=plan.output)``): a worker of the chosen backend per span."""
    return load_backend(backend).partial(task_id=task_id, command="swap-span", **kwargs)
