"""The kubernetes backend: each worker command runs as a pod of the worker image, GPU commands on the GPU pool.

The pod runs the same argv as the local backend's subprocess. Storage credentials reach it only as references (a
secret's keys through ``envFrom``, or the service account's cloud identity), never as values in the spec, XCom or logs.
The worker writes its failure report to the termination message; a non-retryable report fails the task at once.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value
from airflow.sdk import Context, get_current_context
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from kubernetes.client import models as k8s

from facefusion_provider import metric_names
from facefusion_provider.contract import (
    MODELS_CACHE_VARIABLE,
    MODELS_DIR_VARIABLE,
    MODELS_URI_VARIABLE,
    TERMINATION_LOG_VARIABLE,
    WorkerFailure,
    parse_failure_report,
)
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.links.output import OUTPUT_LINKS
from facefusion_provider.operators.commands import (
    WorkerCall,
    failure_exception,
    record_failure,
    task_worker_env,
    worker_call_of,
    worker_env,
)
from facefusion_provider.operators.spans import nothing_to_do, record_line_progress, record_progress
from facefusion_provider.settings import KubernetesSettings, load_settings

WORKER_UID = 10001  # the image's non-root user (images/worker/Dockerfile)
TERMINATION_LOG = "/dev/termination-log"
TMP_PATH = "/tmp"  # noqa: S108 -- an emptyDir of its own: the root filesystem is read-only
MODELS_PATH = "/models"
MODELS_CACHE_PATH = "/var/cache/facefusion/models"
LABEL_PREFIX = "facefusion.io"


def literal_for_kubernetes(value: str) -> str:
    """``value`` as Kubernetes must read it in a container's args, command or env: the kubelet replaces ``$(VAR)``
    with the container's variable and ``$$`` with ``$``, so every ``$`` is doubled and the container gets ``value``."""
    return value.replace("$", "$$")


class WorkerPodCallbacks(KubernetesPodOperatorCallback):
    """Progress reaches the task state store as on the local backend: from the worker's progress lines where the
    operator streams the pod's log, and from the committed segments when the pod ends."""

    @staticmethod
    def progress_callback(*, line: str, **kwargs: Any) -> None:
        try:
            context = get_current_context()
        except RuntimeError:  # a log read outside a running task (a test, a dry run) has no task to record for
            return
        record_line_progress(context, line)

    @staticmethod
    def on_pod_completion(
        *, pod: k8s.V1Pod, context: Context | None = None, operator: Any = None, **kwargs: Any
    ) -> None:
        span = getattr(operator, "span", None)
        if context is None or not span:
            return
        try:
            committed = FaceFusionStorageHook().committed_segments(operator.work_uri)
        except Exception as error:  # progress is for people: a storage hiccup here must not fail a finished pod
            operator.log.warning("Could not read the span's committed segments for its progress: %s", error)
            return
        segments = range(int(span["first"]), int(span["last"]))
        done = sum(index in committed for index in segments)
        record_progress(context, {"segments_committed": done, "segments_total": len(segments)})


class FaceFusionWorkerPodOperator(KubernetesPodOperator):
    """Run ``facefusion-worker <command> --work-uri URI [flags]`` in a pod of the worker image: the Kubernetes
    backend's worker-command operator (the same call as ``FaceFusionWorkerOperator``, launched as a pod).

    Work that is already done (this run's output carries this work's marker, a prepared work, a committed span) starts
    no pod. GPU commands (``[facefusion] gpu_commands``) ask for ``gpu_count`` of ``gpu_resource`` and carry the GPU
    pool's node selector, tolerations and affinity. The pod is deferrable and durable (a restarted Airflow worker
    follows the running pod instead of starting a second), waits ``startup_timeout_seconds`` for node scale-up and
    image pulls, is deleted when it succeeds and kept when it fails, and runs as a non-root user on a read-only root
    filesystem with every capability dropped. Every argument and variable built from the conf is written so that
    Kubernetes passes it on literally (``literal_for_kubernetes``).

    :param command: ``prepare``, ``swap-span`` or ``merge``.
    :param work_uri: the shared work folder, from ``validate``.
    :param output_uri: this run's output, from ``validate``.
    :param output_done: whether ``validate`` found the output done already (decided once per run): nothing to do.
    :param run_key: this run's lease key, from ``validate``; the worker gets it as ``FACEFUSION_RUN_KEY``.
    :param run_lease: the lease ``validate`` wrote under ``run_key``: held again as the task starts.
    :param worker_args: flags after ``--work-uri`` (``prepare``'s inputs and options, ``merge``'s target and output).
    :param target_uri: ``swap-span``: this run's target.
    :param span: ``swap-span``: one item of ``plan``'s list (mapped: one pod per span).
    :param pod_settings: the pods' settings; default from the ``[facefusion]`` section.
    """

    template_fields: Sequence[str] = (
        *KubernetesPodOperator.template_fields,
        "work_uri",
        "output_uri",
        "output_done",
        "run_key",
        "run_lease",
        "worker_args",
        "target_uri",
        "span",
    )
    ui_color = "#e4f0e8"
    operator_extra_links = (*KubernetesPodOperator.operator_extra_links, *OUTPUT_LINKS)

    def __init__(
        self,
        *,
        command: str,
        work_uri: str,
        output_uri: str,
        output_done: bool = False,
        run_key: str = "",
        run_lease: dict[str, Any] | None = None,
        worker_args: Sequence[str] = (),
        target_uri: str | None = None,
        span: dict[str, Any] | None = None,
        pod_settings: KubernetesSettings | None = None,
        **kwargs: Any,
    ) -> None:
        settings = pod_settings or load_settings().kubernetes
        super().__init__(**{**pod_defaults(settings, command), **kwargs})
        self.command = command
        self.work_uri = work_uri
        self.output_uri = output_uri
        self.output_done = output_done
        self.run_key = run_key
        self.run_lease = run_lease
        self.worker_args = worker_args
        self.target_uri = target_uri
        self.span = span
        self.pod_settings = settings

    def call(self) -> WorkerCall:
        return worker_call_of(self)

    def execute(self, context: Context) -> Any:
        reason = nothing_to_do(FaceFusionStorageHook(), self.call(), context)
        if reason:
            self.log.info("Nothing to do, no pod started: %s", reason)
            return None
        return super().execute(context)

    def build_pod_request_obj(self, context: Context | None = None, *, dry_run: bool = False) -> k8s.V1Pod:
        """The parent's pod with the worker's container args, environment, labels and annotations (``worker_pod``)."""
        call = self.call()
        # Without a task (a dry run) there is no try, task key or metric label to give.
        task_env = task_worker_env(context, os.environ, call) if context else worker_env(1)
        env = worker_pod_env(task_env, self.pod_settings)
        pod = super().build_pod_request_obj(context, dry_run=dry_run)
        return worker_pod(pod, self.base_container_name, call, env)

    def post_complete_action(
        self, *, pod: k8s.V1Pod, remote_pod: k8s.V1Pod, context: Context, result: dict[str, Any] | None, **kwargs: Any
    ) -> None:
        """The parent's (delete a succeeded pod, keep a failed one), then the worker's failure class decides retries,
        as on the local backend: a non-retryable report fails the task at once, and so does one whose class has had its
        retries (a full disk: one); any other failure is retried."""
        try:
            super().post_complete_action(pod=pod, remote_pod=remote_pod, context=context, result=result, **kwargs)
        except AirflowFailException:
            raise
        except AirflowException as error:
            failure = pod_failure(remote_pod, self.base_container_name)
            if failure is None:
                raise
            where = f" (pod {remote_pod.metadata.namespace}/{remote_pod.metadata.name}, kept for debugging)"
            if not failure.retryable and context is not None:
                record_failure(context, failure.failure_class, failure.message)
            try_number = 1 if context is None else int(context["ti"].try_number)
            raise failure_exception(failure, where, try_number=try_number) from error


def pod_defaults(settings: KubernetesSettings, command: str) -> dict[str, Any]:
    """The pod operator's arguments for ``command`` from the settings (an operator's own arguments win)."""
    gpu = command in settings.gpu_commands
    return {
        "kubernetes_conn_id": settings.conn_id,
        "namespace": settings.namespace,
        "image": settings.image,
        "name": f"facefusion-{command}",
        "service_account_name": settings.service_account,
        "container_resources": pod_resources(settings, gpu=gpu),
        "node_selector": dict(settings.node_selector) if gpu else {},
        "tolerations": [dict(item) for item in settings.tolerations] if gpu else [],
        "affinity": dict(settings.affinity) if gpu else None,
        "env_from": _storage_env_from(settings),
        "volumes": pod_volumes(settings),
        "volume_mounts": pod_volume_mounts(settings),
        "security_context": pod_security_context(),
        "container_security_context": container_security_context(),
        "automount_service_account_token": False,
        "deferrable": True,
        "durable": True,
        "startup_timeout_seconds": settings.startup_timeout_seconds,
        "on_finish_action": "delete_succeeded_pod",
        "log_pod_spec_on_failure": False,
        "do_xcom_push": False,
        "termination_message_policy": "FallbackToLogsOnError",
        "callbacks": WorkerPodCallbacks,
    }


def worker_pod_env(task_env: Mapping[str, str], settings: KubernetesSettings) -> dict[str, str]:
    """Plain variables only: the storage credentials come from ``env_from`` references, never from here."""
    env = {**task_env, TERMINATION_LOG_VARIABLE: TERMINATION_LOG, MODELS_CACHE_VARIABLE: MODELS_CACHE_PATH}
    if settings.models_volume_claim:
        env[MODELS_DIR_VARIABLE] = MODELS_PATH
    if settings.models_uri:
        env[MODELS_URI_VARIABLE] = settings.models_uri
    return env


def worker_pod(pod: k8s.V1Pod, container_name: str, call: WorkerCall, env: Mapping[str, str]) -> k8s.V1Pod:
    """A copy of ``pod`` whose worker container runs ``call`` with ``env`` (both written literally for Kubernetes),
    labelled and annotated with the work and span."""
    pod = copy.deepcopy(pod)
    container = next(item for item in pod.spec.containers if item.name == container_name)
    container.args = [literal_for_kubernetes(arg) for arg in call.argv()]
    plain = [k8s.V1EnvVar(name=name, value=literal_for_kubernetes(value)) for name, value in sorted(env.items())]
    container.env = [*(container.env or []), *plain, node_name_variable()]
    pod.metadata.labels = {**(pod.metadata.labels or {}), **worker_labels(call)}
    pod.metadata.annotations = {**(pod.metadata.annotations or {}), **worker_annotations(call)}
    return pod


def worker_labels(call: WorkerCall) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "facefusion-worker",
        "app.kubernetes.io/component": call.command,
        f"{LABEL_PREFIX}/work-id": make_safe_label_value(call.work_id or "unknown"),
    }
    if call.span is not None:
        labels[f"{LABEL_PREFIX}/span-index"] = str(call.span["index"])
    return labels


def worker_annotations(call: WorkerCall) -> dict[str, str]:
    annotations = {f"{LABEL_PREFIX}/work-uri": _without_credentials(call.work_uri)}
    if call.span is not None and {"start", "end"} <= set(call.span):
        annotations[f"{LABEL_PREFIX}/frames"] = f"{call.span['start']}-{int(call.span['end']) - 1}"
    return annotations


def pod_failure(pod: k8s.V1Pod | None, container_name: str) -> WorkerFailure | None:
    """What the worker container reported when it ended (exit code and termination message), or None if it never ran."""
    statuses = (pod.status.container_statuses if pod is not None and pod.status else None) or []
    status = next((item for item in statuses if item.name == container_name), None)
    terminated = status.state.terminated if status is not None and status.state else None
    if terminated is None:
        return None
    return parse_failure_report(terminated.exit_code, terminated.message)


def node_name_variable() -> k8s.V1EnvVar:
    """The node the pod runs on, from the downward API: the worker's metrics carry it as their ``node`` label."""
    node = k8s.V1EnvVarSource(field_ref=k8s.V1ObjectFieldSelector(field_path="spec.nodeName"))
    return k8s.V1EnvVar(name=metric_names.NODE_VARIABLE, value_from=node)


def pod_resources(settings: KubernetesSettings, *, gpu: bool) -> k8s.V1ResourceRequirements:
    """Requests for scheduling, and limits equal to them for memory, ephemeral storage and GPUs."""
    cpu = settings.gpu_cpu if gpu else settings.cpu
    requests = {"cpu": cpu, "memory": settings.memory, "ephemeral-storage": settings.ephemeral_storage}
    limits = {"memory": settings.memory, "ephemeral-storage": settings.ephemeral_storage}
    if gpu:
        requests[settings.gpu_resource] = str(settings.gpu_count)
        limits[settings.gpu_resource] = str(settings.gpu_count)
    return k8s.V1ResourceRequirements(requests=requests, limits=limits)


def pod_security_context() -> k8s.V1PodSecurityContext:
    return k8s.V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=WORKER_UID,
        run_as_group=WORKER_UID,
        fs_group=WORKER_UID,
        seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
    )


def container_security_context() -> k8s.V1SecurityContext:
    return k8s.V1SecurityContext(
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        run_as_non_root=True,
        capabilities=k8s.V1Capabilities(drop=["ALL"]),
        seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
    )


def pod_volumes(settings: KubernetesSettings) -> list[k8s.V1Volume]:
    """The temp folder and the model cache are the only writable places; the models volume is read-only."""
    volumes = [k8s.V1Volume(name="tmp", empty_dir=k8s.V1EmptyDirVolumeSource(size_limit=settings.ephemeral_storage))]
    if settings.models_cache_host_path:
        cache = k8s.V1HostPathVolumeSource(path=settings.models_cache_host_path, type="DirectoryOrCreate")
        volumes.append(k8s.V1Volume(name="models-cache", host_path=cache))
    else:
        volumes.append(k8s.V1Volume(name="models-cache", empty_dir=k8s.V1EmptyDirVolumeSource()))
    if settings.models_volume_claim:
        claim = k8s.V1PersistentVolumeClaimVolumeSource(claim_name=settings.models_volume_claim, read_only=True)
        volumes.append(k8s.V1Volume(name="models", persistent_volume_claim=claim))
    return volumes


def pod_volume_mounts(settings: KubernetesSettings) -> list[k8s.V1VolumeMount]:
    mounts = [
        k8s.V1VolumeMount(name="tmp", mount_path=TMP_PATH),
        k8s.V1VolumeMount(name="models-cache", mount_path=MODELS_CACHE_PATH),
    ]
    if settings.models_volume_claim:
        mounts.append(k8s.V1VolumeMount(name="models", mount_path=MODELS_PATH, read_only=True))
    return mounts


def _storage_env_from(settings: KubernetesSettings) -> list[k8s.V1EnvFromSource]:
    if not settings.storage_secret:
        return []
    return [k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name=settings.storage_secret, optional=False))]


def _without_credentials(uri: str) -> str:
    """A URI fit for an annotation: any user:password part is dropped."""
    parsed = urlparse(uri)
    if parsed.username or parsed.password:
        return parsed._replace(netloc=parsed.hostname or "").geturl()
    return uri
