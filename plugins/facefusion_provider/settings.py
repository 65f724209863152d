"""Deployment settings of the Airflow side, from the Airflow config section ``[facefusion]``.

Each key is also an environment variable ``AIRFLOW__FACEFUSION__<KEY>`` (e.g. ``AIRFLOW__FACEFUSION__BACKEND=kubernetes``).
``SETTINGS`` lists every key once: ``load_settings`` reads them and ``get_provider_info`` documents them from it, so adding
a setting is one entry there plus one field on ``FaceFusionSettings``. Airflow is imported only inside ``load_settings``,
so the provider metadata can read the table without it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from facefusion_provider import __version__
from facefusion_provider.storage.uris import parse_prefixes

SECTION = "facefusion"
BACKENDS = ("local", "kubernetes")
SPAN_WORKERS = ("task", "standing")
DEFAULT_POOL = "default_pool"  # Airflow's own, present in every installation

SettingType = Literal["string", "integer", "float", "boolean"]
Number = TypeVar("Number", int, float)
Json = TypeVar("Json", dict[str, Any], list[Any])


@dataclass(frozen=True)
class SettingSpec:
    """One key of ``[facefusion]``: its type, default (as Airflow config text) and what it does."""

    name: str
    type: SettingType
    default: str
    description: str
    example: str | None = None


DEFAULT_POD_CPU = "4"
# The cores a GPU pod needs so that its GPU stays the bottleneck, by GPU model: written by bench/pod_sizing.py.
# pod-sizing:start
GPU_POD_CPU: Mapping[str, str] = {
    "l4": "7",
    "a10g": "7",
    "l40s": "20",
    "a100": "11",
    "h100": "23",
    "h200": "23",
}
# pod-sizing:end

KUBERNETES_SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "kubernetes_namespace", "string", "facefusion", "Namespace of the worker pods (backend kubernetes).", "video"
    ),
    SettingSpec(
        "kubernetes_conn_id",
        "string",
        "kubernetes_default",
        "Airflow Kubernetes connection the pod operator and its trigger use (in-cluster config when it says so).",
        "kubernetes_gpu_cluster",
    ),
    SettingSpec(
        "worker_image",
        "string",
        "",
        "Worker image of the pods (`images/worker/Dockerfile`). Empty: `facefusion-worker:<provider version>`.",
        "registry.example.com/facefusion-worker:0.1.0",
    ),
    SettingSpec(
        "service_account",
        "string",
        "facefusion-worker",
        "Service account of the worker pods; with a cloud identity bound to it, it alone can reach S3.",
        "facefusion-worker",
    ),
    SettingSpec(
        "storage_secret",
        "string",
        "",
        "Kubernetes secret whose keys become the pods' environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, "
        "`AWS_ENDPOINT_URL`, ...). Empty: the service account's identity reaches the storage.",
        "facefusion-storage",
    ),
    SettingSpec(
        "gpu_resource", "string", "nvidia.com/gpu", "Extended resource that a GPU pod asks for.", "amd.com/gpu"
    ),
    SettingSpec("gpu_count", "integer", "1", "GPUs per GPU pod.", "1"),
    SettingSpec(
        "gpu_commands",
        "string",
        "swap-span",
        "Worker commands that run on the GPU pool, comma separated; add `prepare` when its recognizer should use a GPU "
        "(off the GPU pool it computes the identity on the CPU).",
        "prepare,swap-span",
    ),
    SettingSpec(
        "node_selector",
        "string",
        '{"nvidia.com/gpu.present": "true"}',
        "Node selector of GPU pods, as a JSON object.",
        '{"cloud.google.com/gke-accelerator": "nvidia-l4"}',
    ),
    SettingSpec(
        "tolerations",
        "string",
        '[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]',
        "Tolerations of GPU pods, as a JSON list of Kubernetes toleration objects.",
        "[]",
    ),
    SettingSpec(
        "affinity",
        "string",
        "{}",
        "Affinity of GPU pods, as a JSON Kubernetes affinity object.",
        '{"nodeAffinity": {}}',
    ),
    SettingSpec(
        "startup_timeout_seconds",
        "integer",
        "900",
        "How long a pod may take to be scheduled and start: long enough for a GPU node to scale up and pull the image.",
        "1200",
    ),
    SettingSpec(
        "gpu_type",
        "string",
        "",
        "GPU model of the GPU pool (" + ", ".join(f"`{key}`" for key in GPU_POD_CPU) + "): GPU pods ask for the "
        "cores that keep that GPU busy (deploy/README.md's table by GPU type) unless `worker_cpu` is set. Empty: "
        f"{DEFAULT_POD_CPU} cores.",
        "l4",
    ),
    SettingSpec(
        "worker_cpu",
        "string",
        "",
        "CPU request of every worker pod (a Kubernetes quantity); a GPU worker decodes, encodes and pastes "
        f"execution_thread_count frames side by side on these cores. Empty: {DEFAULT_POD_CPU}, and GPU pods "
        "`gpu_type`'s cores.",
        "8",
    ),
    SettingSpec("worker_memory", "string", "8Gi", "Memory request and limit of a worker pod.", "16Gi"),
    SettingSpec(
        "worker_ephemeral_storage",
        "string",
        "20Gi",
        "Ephemeral storage request and limit of a worker pod, and the size of its /tmp (merge stages the output there).",
        "50Gi",
    ),
    SettingSpec(
        "models_uri",
        "string",
        "",
        "s3:// prefix with the model files and a SHA256SUMS; pods copy what they need once, hash-checked, into their cache.",
        "s3://facefusion-models/v1",
    ),
    SettingSpec(
        "models_volume_claim",
        "string",
        "",
        "PersistentVolumeClaim with the model files, mounted read-only at /models in every pod.",
        "facefusion-models",
    ),
    SettingSpec(
        "models_cache_host_path",
        "string",
        "",
        "Node directory (writable by uid 10001) that caches models from `models_uri` across pods. Empty: a per-pod cache.",
        "/var/cache/facefusion/models",
    ),
)
"""The ``kubernetes`` backend's keys (see ``KubernetesSettings``)."""

SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "backend",
        "string",
        "local",
        "Where worker commands run: `local` (a subprocess on the Airflow worker) or `kubernetes` (a pod per command).",
        "kubernetes",
    ),
    SettingSpec(
        "work_root",
        "string",
        "",
        "fsspec URI of the shared work (`{work_root}/work/{work_id}`) and target analyses (`{work_root}/analysis/...`). "
        "Empty: `file://$AIRFLOW_HOME/facefusion`.",
        "s3://facefusion-work",
    ),
    SettingSpec(
        "worker_command",
        "string",
        "",
        "Command line of the worker for the local backend, split like a shell would. "
        "Empty: the Python running Airflow with `-m facefusion_provider.worker`.",
        "/opt/facefusion/bin/facefusion-worker",
    ),
    SettingSpec(
        "pool",
        "string",
        "",
        "Airflow pool of the swap_span tasks. Empty: Airflow's default_pool, so a fresh Airflow runs with no setup. In "
        "production name a pool sized to the GPUs (`airflow pools set facefusion_gpu 8 'GPUs'`): a run whose pool does "
        "not exist fails as it starts, naming it.",
        "facefusion_gpu",
    ),
    SettingSpec(
        "span_wave",
        "integer",
        "0",
        "Spans (swap_span tasks) per run: the GPUs a run may use at once. Each span works its share of the segments, "
        "then takes segments from the tail of the busiest span, so one wave keeps every GPU busy to the end. "
        "0: max_active_spans_per_run.",
        "8",
    ),
    SettingSpec(
        "max_active_spans_per_run",
        "integer",
        "4",
        "At most this many swap_span tasks of one run at once (the pool caps all runs together).",
        "8",
    ),
    SettingSpec(
        "batch_max_active_spans",
        "integer",
        "0",
        "At most this many swap_span tasks of facefusion_swap_batch (the runs ingestion starts) at once over all its "
        "runs: GPUs of the pool that batch work leaves to interactive runs. 0: no cap (batch spans only yield by "
        "priority).",
        "6",
    ),
    SettingSpec(
        "span_workers",
        "string",
        "task",
        "Who works the spans: `task` (each swap_span task starts its own worker, a subprocess or a pod) or `standing` "
        "(a pool of `facefusion-worker serve` processes or pods, deploy/standing-workers.yaml, works every run's "
        "segments with its models loaded; swap_span tasks only wait, deferred, holding no pool slot, and fail when no "
        "standing worker has been alive for ten minutes, when every live one has given up on the run's work (naming "
        "why), or after span_wait_hours).",
        "standing",
    ),
    SettingSpec(
        "span_wait_hours",
        "float",
        "12",
        "With span_workers = standing, a swap_span task fails (not retried) when its segments are not all committed "
        "this long after it started waiting, so a run never waits forever.",
        "48",
    ),
    SettingSpec(
        "help_other_runs_seconds",
        "float",
        "0",
        "A swap_span worker whose own run has nothing left to claim works other live runs' free segments (same "
        "models, same work_root) for at most this long before it exits, so a batch of short runs keeps its GPUs busy "
        "instead of starting a pod per run; its own run's merge waits that long at most. 0: it exits at once.",
        "600",
    ),
    SettingSpec(
        "allowed_input_prefixes",
        "string",
        "",
        "Comma-separated folder URIs that runs may read sources and targets from (checked by validate and again by "
        "the worker; a local path by its real path, symbolic links resolved). Empty: anywhere the workers can read.",
        "s3://videos/incoming/, /data/in/",
    ),
    SettingSpec(
        "allowed_output_prefixes",
        "string",
        "",
        "Comma-separated folder URIs that runs may write outputs to (checked by validate and again by the worker; a "
        "local path by its real path, and a symbolic link in an output's folders below the prefix is refused). Empty: "
        "anywhere the workers can write.",
        "s3://videos/swapped/, /data/out/",
    ),
    SettingSpec(
        "keep_failed_work_hours",
        "float",
        "168",
        "A failed run keeps the shared work it used this long (a clear from the UI resumes it); after that another "
        "run's cleanup may remove it.",
        "24",
    ),
    SettingSpec(
        "run_lease_minutes",
        "float",
        "120",
        "A run's lease on the shared work lives this long after its last renewal (each task renews it as it starts and "
        "while it runs). Set it above the longest time a run waits queued between two tasks: a run queued longer may "
        "find its work removed by another run's cleanup, and computes it again.",
        "480",
    ),
    SettingSpec(
        "aws_conn_id",
        "string",
        "",
        "Airflow AWS connection whose credentials reach s3:// URIs. Empty: the environment or the pod's service account.",
        "aws_default",
    ),
    SettingSpec("retries", "integer", "3", "Retries of a worker task after a retryable failure.", "5"),
    SettingSpec("retry_delay_seconds", "float", "30", "Delay before the first retry of a worker task.", "60"),
    SettingSpec(
        "retry_exponential_backoff",
        "float",
        "2.0",
        "Multiplier of the retry delay from one retry to the next (0 keeps it constant).",
        "3.0",
    ),
    SettingSpec("max_retry_delay_seconds", "float", "600", "Upper bound of the retry delay.", "1800"),
    *KUBERNETES_SETTINGS,
)


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_POD_COMMANDS = ("prepare", "swap-span", "merge")


@dataclass(frozen=True)
class KubernetesSettings:
    """What the ``kubernetes`` backend's pods get: where they run, their resources, identity and models."""

    namespace: str
    conn_id: str
    image: str
    service_account: str
    storage_secret: str | None
    gpu_resource: str
    gpu_count: int
    gpu_commands: frozenset[str]
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    affinity: Mapping[str, Any]
    startup_timeout_seconds: int
    cpu: str  # pods off the GPU pool
    gpu_cpu: str  # GPU pods
    memory: str
    ephemeral_storage: str
    models_uri: str | None
    models_volume_claim: str | None
    models_cache_host_path: str | None

    @classmethod
    def from_raw(cls, raw: Mapping[str, str]) -> KubernetesSettings:
        gpu_commands = frozenset(name.strip() for name in raw["gpu_commands"].split(",") if name.strip())
        if unknown := gpu_commands - set(_POD_COMMANDS):
            raise ValueError(
                f"[{SECTION}] gpu_commands: {', '.join(sorted(unknown))} not among {', '.join(_POD_COMMANDS)}"
            )
        node_selector = _json(raw, "node_selector", dict)
        if not all(isinstance(value, str) for value in node_selector.values()):
            raise ValueError(f"[{SECTION}] node_selector: label values must be strings, got {raw['node_selector']}")
        tolerations = _json(raw, "tolerations", list)
        if not all(isinstance(item, dict) for item in tolerations):
            raise ValueError(f"[{SECTION}] tolerations: expected a list of objects, got {raw['tolerations']}")
        return cls(
            namespace=raw["kubernetes_namespace"],
            conn_id=raw["kubernetes_conn_id"],
            image=raw["worker_image"] or f"facefusion-worker:{__version__}",
            service_account=raw["service_account"],
            storage_secret=raw["storage_secret"] or None,
            gpu_resource=raw["gpu_resource"],
            gpu_count=_number(raw, "gpu_count", int, minimum=1),
            gpu_commands=gpu_commands,
            node_selector=node_selector,
            tolerations=tuple(tolerations),
            affinity=_json(raw, "affinity", dict),
            startup_timeout_seconds=_number(raw, "startup_timeout_seconds", int, minimum=1),
            cpu=(raw["worker_cpu"] and _quantity(raw, "worker_cpu")) or DEFAULT_POD_CPU,
            gpu_cpu=(raw["worker_cpu"] and _quantity(raw, "worker_cpu")) or _gpu_type_cpu(raw["gpu_type"]),
            memory=_quantity(raw, "worker_memory"),
            ephemeral_storage=_quantity(raw, "worker_ephemeral_storage"),
            models_uri=raw["models_uri"] or None,
            models_volume_claim=raw["models_volume_claim"] or None,
            models_cache_host_path=raw["models_cache_host_path"] or None,
        )


def _json(raw: Mapping[str, str], name: str, kind: type[Json]) -> Json:
    try:
        value = json.loads(raw[name])
    except ValueError:
        raise ValueError(f"[{SECTION}] {name}: not valid JSON: {raw[name]!r}") from None
    if not isinstance(value, kind):
        raise ValueError(
            f"[{SECTION}] {name}: expected a JSON {'object' if kind is dict else 'list'}, got {raw[name]!r}"
        )
    return value


def _gpu_type_cpu(gpu_type: str) -> str:
    if gpu_type and gpu_type not in GPU_POD_CPU:
        raise ValueError(f"[{SECTION}] gpu_type: {gpu_type!r} is not among {', '.join(GPU_POD_CPU)}")
    return GPU_POD_CPU.get(gpu_type, DEFAULT_POD_CPU)


def _quantity(raw: Mapping[str, str], name: str) -> str:
    if not _QUANTITY.match(raw[name]):
        raise ValueError(f"[{SECTION}] {name}: {raw[name]!r} is not a Kubernetes quantity such as 4, 500m or 8Gi")
    return raw[name]


@dataclass(frozen=True)
class FaceFusionSettings:
    backend: str
    work_root: str
    worker_command: tuple[str, ...]
    pool: str
    span_wave: int
    max_active_spans_per_run: int
    batch_max_active_spans: int
    help_other_runs_seconds: float
    span_workers: str
    span_wait: timedelta
    allowed_input_prefixes: tuple[str, ...]
    allowed_output_prefixes: tuple[str, ...]
    keep_failed_work: timedelta
    run_lease: timedelta
    aws_conn_id: str | None
    retries: int
    retry_delay: timedelta
    retry_exponential_backoff: float
    max_retry_delay: timedelta
    kubernetes: KubernetesSettings

    @classmethod
    def from_values(cls, values: Mapping[str, str], *, airflow_home: str) -> FaceFusionSettings:
        """Settings from raw config text; keys left out or empty take the defaults of ``SETTINGS``."""
        raw = {spec.name: (values.get(spec.name) or spec.default).strip() for spec in SETTINGS}
        backend = raw["backend"].lower()
        if backend not in BACKENDS:
            raise ValueError(f"[{SECTION}] backend: {backend!r} is not one of {', '.join(BACKENDS)}")
        return cls(
            backend=backend,
            work_root=raw["work_root"] or Path(airflow_home, "facefusion").absolute().as_uri(),
            worker_command=tuple(shlex.split(raw["worker_command"]))
            or (sys.executable, "-m", "facefusion_provider.worker"),
            pool=raw["pool"] or DEFAULT_POOL,
            span_wave=_number(raw, "span_wave", int, minimum=0),
            max_active_spans_per_run=_number(raw, "max_active_spans_per_run", int, minimum=1),
            batch_max_active_spans=_number(raw, "batch_max_active_spans", int, minimum=0),
            help_other_runs_seconds=_number(raw, "help_other_runs_seconds", float, minimum=0.0),
            span_workers=_choice(raw, "span_workers", SPAN_WORKERS),
            span_wait=timedelta(hours=_number(raw, "span_wait_hours", float, minimum=0.001)),
            allowed_input_prefixes=_prefixes(raw, "allowed_input_prefixes"),
            allowed_output_prefixes=_prefixes(raw, "allowed_output_prefixes"),
            keep_failed_work=timedelta(hours=_number(raw, "keep_failed_work_hours", float, minimum=0.0)),
            run_lease=timedelta(minutes=_number(raw, "run_lease_minutes", float, minimum=1.0)),
            aws_conn_id=raw["aws_conn_id"] or None,
            retries=_number(raw, "retries", int, minimum=0),
            retry_delay=timedelta(seconds=_number(raw, "retry_delay_seconds", float, minimum=0.0)),
            retry_exponential_backoff=_number(raw, "retry_exponential_backoff", float, minimum=0.0),
            max_retry_delay=timedelta(seconds=_number(raw, "max_retry_delay_seconds", float, minimum=0.0)),
            kubernetes=KubernetesSettings.from_raw(raw),
        )


def _choice(raw: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = raw[name].lower()
    if value not in choices:
        raise ValueError(f"[{SECTION}] {name}: {value!r} is not one of {', '.join(choices)}")
    return value


def _prefixes(raw: Mapping[str, str], name: str) -> tuple[str, ...]:
    try:
        return parse_prefixes(raw[name], field=f"[{SECTION}] {name}")
    except ValueError as error:
        raise ValueError(str(error)) from None


def _number(raw: Mapping[str, str], name: str, kind: Callable[[str], Number], *, minimum: Number) -> Number:
    try:
        value = kind(raw[name])
    except ValueError:
        raise ValueError(f"[{SECTION}] {name}: expected a number, got {raw[name]!r}") from None
    if value < minimum:
        raise ValueError(f"[{SECTION}] {name}: must be at least {minimum}, got {value}")
    return value


# Former setting names: refused with a message that names the new one.
RENAMED_SETTINGS: dict[str, str] = {"chunk_wave": "span_wave"}


def load_settings() -> FaceFusionSettings:
    """The current settings from Airflow's configuration (airflow.cfg, then ``AIRFLOW__FACEFUSION__*`` variables)."""
    from airflow.sdk import conf

    for old, new in RENAMED_SETTINGS.items():
        if conf.has_option(SECTION, old):  # silently ignoring it would change how many spans a run has
            raise ValueError(f"[{SECTION}] {old}: no longer a setting: it is called {new} now; set {new} instead")
    values = {spec.name: str(conf.get(SECTION, spec.name, fallback="")) for spec in SETTINGS}
    airflow_home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
    return FaceFusionSettings.from_values(values, airflow_home=airflow_home)
