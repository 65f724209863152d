"""The kubernetes backend: each worker command runs as a pod of the worker image, GPU commands on the GPU pool.

The pod runs the same argv as the local backend's subprocess. Storage credentials reach it only as references (a
secret's keys through ``envFrom``, or the service account's cloud identity), never as values in the spec, XCom or logs.
The worker writes its failure report to the termination message; a non-retryable report fails the task at once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from kubernetes.client import models as k8s

from facefusion_provider import metric_names
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.job.layout import WorkLayout
from facefusion_provider.operators.commands import (
    TERMINATION_LOG_VARIABLE,
    WorkerFailure,
    completed_work,
    fail_on_bad_input,
    failure_exception,
    parse_failure_report,
    record_failure,
    task_worker_env,
    worker_argv,
    worker_env,
)
from facefusion_provider.operators.links import OUTPUT_LINKS
from facefusion_provider.operators.spans import SwapSpanMixin
from facefusion_provider.settings import KubernetesSettings, load_settings

WORKER_UID = 10001  # the image's non-root user (images/worker/Dockerfile)
TERMINATION_LOG = "/dev/termination-log"
TMP_PATH = "/tmp"  # noqa: S108 -- an emptyDir of its own: the root filesystem is read-only
MODELS_PATH = "/models"
MODELS_CACHE_PATH = "/var/cache/facefusion/models"
LABEL_PREFIX = "facefusion.io"


class KubernetesWorkerOperator(KubernetesPodOperator):
    """Run ``facefusion-worker <command> --work-uri URI [worker_args]`` in a pod of the worker image.

    Work that is already done (this run's output carries this work's marker, a prepared work) starts no pod. GPU
    commands (``[facefusion] gpu_commands``) ask for ``gpu_count`` of ``gpu_resource`` and carry the GPU pool's node
    selector, tolerations and affinity. The pod is deferrable and durable (a restarted Airflow worker follows the
    running pod instead of starting a second), waits ``startup_timeout_seconds`` for node scale-up and image pulls, is
    deleted when it succeeds and kept when it fails, and runs as a non-root user on a read-only root filesystem with
    every capability dropped.

    :param command: ``prepare``, ``swap-span`` or ``merge``.
    :param work_uri: the shared work folder, from ``validate``.
    :param output_uri: this run's output, from ``validate``: when it is done, nothing is left to do.
    :param worker_args: flags after ``--work-uri`` (``prepare``'s inputs and options, ``merge``'s target and output).
    :param pod_settings: the pods' settings; default from the ``[facefusion]`` section.
    """

    template_fields: Sequence[str] = (*KubernetesPodOperator.template_fields, "work_uri", "output_uri", "worker_args")
    ui_color = "#e4f0e8"
    operator_extra_links = (*KubernetesPodOperator.operator_extra_links, *OUTPUT_LINKS)

    def __init__(
        self,
        *,
        command: str,
        work_uri: str,
        output_uri: str,
        worker_args: Sequence[str] = (),
        pod_settings: KubernetesSettings | None = None,
        **kwargs: Any,
    ) -> None:
        settings = pod_settings or load_settings().kubernetes
        gpu = command in settings.gpu_commands
        defaults: dict[str, Any] = {
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
        }
        super().__init__(**{**defaults, **kwargs})
        self.command = command
        self.work_uri = work_uri
        self.output_uri = output_uri
        self.worker_args = worker_args
        self.pod_settings = settings

    @property
    def span_or_none(self) -> dict[str, Any] | None:
        return None

    def worker_arguments(self) -> list[str]:
        return [str(arg) for arg in self.worker_args]

    def before_launch(self, hook: FaceFusionStorageHook, work_uri: str, context: Any) -> None:
        """Called just before the pod starts (a span logs where it resumes)."""

    def execute(self, context: Context) -> Any:
        hook = FaceFusionStorageHook()
        with fail_on_bad_input(context):
            reason = completed_work(hook, self.command, self.work_uri, self.output_uri, self.span_or_none)
            if not reason:
                self.before_launch(hook, self.work_uri, context)
        if reason:
            self.log.info("Nothing to do, no pod started: %s", reason)
            return None
        return super().execute(context)

    def build_pod_request_obj(self, context: Context | None = None, *, dry_run: bool = False) -> k8s.V1Pod:
        """The parent's pod, with the worker argv, its environment, and labels naming the work and span."""
        self.arguments = worker_argv(self.command, self.work_uri, self.worker_arguments())
        plain = [k8s.V1EnvVar(name=k, value=v) for k, v in self.worker_environment(context)]
        self.env_vars = [*plain, node_name_variable()]
        self.labels = {**self.labels, **self.job_labels()}
        self.annotations = {**self.annotations, **self.job_annotations()}
        return super().build_pod_request_obj(context, dry_run=dry_run)

    def worker_environment(self, context: Context | None = None) -> list[tuple[str, str]]:
        """Plain variables only: the storage credentials come from ``env_from`` references, never from here. Without
        a task (a dry run) there is no try, task key or metric label to give."""
        task_env = task_worker_env(context, os.environ, self.work_uri) if context else worker_env(1, os.environ)
        env = {**task_env, TERMINATION_LOG_VARIABLE: TERMINATION_LOG}
        if self.pod_settings.models_volume_claim:
            env["FACEFUSION_MODELS_DIR"] = MODELS_PATH
        if self.pod_settings.models_uri:
            env["FACEFUSION_MODELS_URI"] = self.pod_settings.models_uri
        env["FACEFUSION_MODELS_CACHE"] = MODELS_CACHE_PATH
        return sorted(env.items())

    def job_labels(self) -> dict[str, str]:
        labels = {
            "app.kubernetes.io/name": "facefusion-worker",
            "app.kubernetes.io/component": self.command,
            f"{LABEL_PREFIX}/work-id": make_safe_label_value(WorkLayout(self.work_uri).work_id or "unknown"),
        }
        if self.span_or_none is not None:
            labels[f"{LABEL_PREFIX}/span-index"] = str(self.span_or_none["index"])
        return labels

    def job_annotations(self) -> dict[str, str]:
        return {f"{LABEL_PREFIX}/work-uri": _without_credentials(self.work_uri)}

    def cleanup(
        self,
        pod: k8s.V1Pod,
        remote_pod: k8s.V1Pod,
        xcom_result: dict[str, Any] | None = None,
        context: Context | None = None,
    ) -> None:
        """The parent's cleanup (delete a succeeded pod, keep a failed one), then the worker's failure class decides
        retries: a non-retryable report fails the task at once, any other failure is retried."""
        try:
            super().cleanup(pod, remote_pod, xcom_result, context)
        except AirflowFailException:
            raise
        except AirflowException as error:
            failure = pod_failure(remote_pod, self.base_container_name)
            if failure is None:
                raise
            where = f" (pod {remote_pod.metadata.namespace}/{remote_pod.metadata.name}, kept for debugging)"
            if not failure.retryable and context is not None:
                record_failure(context, failure.failure_class, failure.message)
            raise failure_exception(failure, where) from error


class KubernetesSwapSpanOperator(SwapSpanMixin, KubernetesWorkerOperator):
    """``swap-span`` for one span of ``plan``'s list (mapped: one pod per span). A span whose segments are all
    committed, or an output that already carries this work, succeeds at once without starting a pod (never a skip:
    merge must run).

    :param target_uri: this run's target (its own path to the work's content).
    :param span: one item of ``plan``'s list.
    """

    template_fields: Sequence[str] = (*KubernetesWorkerOperator.template_fields, "target_uri", "span")

    def __init__(self, *, work_uri: str, output_uri: str, target_uri: str, span: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(command="swap-span", work_uri=work_uri, output_uri=output_uri, **kwargs)
        self.target_uri = target_uri
        self.span = span

    @property
    def span_or_none(self) -> dict[str, Any] | None:
        return self.span

    def job_annotations(self) -> dict[str, str]:
        frames = f"{self.span['start']}-{int(self.span['end']) - 1}" if {"start", "end"} <= set(self.span) else ""
        return {**super().job_annotations(), **({f"{LABEL_PREFIX}/frames": frames} if frames else {})}


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
    requests = {"cpu": settings.cpu, "memory": settings.memory, "ephemeral-storage": settings.ephemeral_storage}
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
