"""The kubernetes backend's pods, rendered and validated against the Kubernetes schema, and its behaviour without a cluster."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from kube_pod_helpers import (
    KUBE_CONN_ID,
    RUN_ID,
    RecordingCoreV1Api,
    job_uri_under,
    make_pod_settings,
    serialize,
    task_context,
    validate_strictly,
)
from kubernetes.client import models as k8s

from facefusion_provider.contract import span_worker_args, worker_argv
from facefusion_provider.exceptions import EXIT_INTERNAL, EXIT_NO_FACE, EXIT_RETRYABLE
from facefusion_provider.operators.backends import load_backend
from facefusion_provider.operators.kubernetes import FaceFusionWorkerPodOperator
from facefusion_provider.operators.plan import span_list
from facefusion_provider.settings import KubernetesSettings

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TARGET, OUTPUT = "s3://in/talk.mp4", "s3://out/talk.mp4"
WORKER_ARGS = {
    "prepare": ["--source", "s3://in/face.jpg", "--target", TARGET],
    "merge": ["--target", TARGET, "--output", OUTPUT],
}
SPAN = {"index": 7, "first": 28, "last": 32, "start": 448, "end": 512, "label": "frames 448-511 (4 segments)"}


def make_operator(
    command: str, work_uri: str, settings: KubernetesSettings, **kwargs: Any
) -> FaceFusionWorkerPodOperator:
    if command == "swap-span":
        return FaceFusionWorkerPodOperator(
            task_id="swap_span",
            command="swap-span",
            work_uri=work_uri,
            output_uri=OUTPUT,
            target_uri=TARGET,
            span=SPAN,
            pod_settings=settings,
            kubernetes_conn_id=KUBE_CONN_ID,
            **kwargs,
        )
    return FaceFusionWorkerPodOperator(
        task_id=command,
        command=command,
        work_uri=work_uri,
        output_uri=OUTPUT,
        worker_args=WORKER_ARGS[command],
        pod_settings=settings,
        kubernetes_conn_id=KUBE_CONN_ID,
        **kwargs,
    )


def render(operator: FaceFusionWorkerPodOperator, context: dict[str, Any] | None = None) -> dict[str, Any]:
    return serialize(operator.build_pod_request_obj(context, dry_run=True))  # type: ignore[arg-type]


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["spec"]["containers"]
    return only  # type: ignore[no-any-return]


GPU_POOL = {
    "storage_secret": "facefusion-storage",
    "node_selector": '{"cloud.google.com/gke-accelerator": "nvidia-l4"}',
    "tolerations": '[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},'
    ' {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule", "tolerationSeconds": 30}]',
    "affinity": json.dumps(
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu-pool", "operator": "In", "values": ["swap"]}]}
                    ]
                }
            }
        }
    ),
}


@pytest.mark.parametrize("command", ["prepare", "swap-span", "merge"])
def test_rendered_pods_validate_strictly_and_run_the_worker_argv(tmp_path: Path, command: str) -> None:
    job_uri = job_uri_under(tmp_path)
    operator = make_operator(command, job_uri, make_pod_settings(**GPU_POOL))

    pod = render(operator, task_context(operator.task_id, map_index=0 if command == "swap-span" else -1))

    validate_strictly(pod)
    args = span_worker_args(TARGET, SPAN) if command == "swap-span" else WORKER_ARGS[command]
    assert container(pod)["args"] == worker_argv(command, job_uri, args)
    assert container(pod)["command"] == []  # the image's entrypoint: facefusion-worker behind an init
    assert container(pod)["image"] == "facefusion-worker:0.1.0"
    assert pod["metadata"]["namespace"] == "facefusion"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["serviceAccountName"] == "facefusion-worker"


def test_the_pod_gives_the_worker_its_metric_labels_its_node_and_where_to_push(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://prometheus-server.monitoring.svc/api/v1/otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer not-for-pods")
    job_uri = job_uri_under(tmp_path, "5f0c2a9be41d7c3a8e6b1f20")
    operator = make_operator("swap-span", job_uri, make_pod_settings(**GPU_POOL))

    pod = render(operator, task_context("swap_span", map_index=7, try_number=2))

    validate_strictly(pod)
    env = {item["name"]: item.get("value", item.get("valueFrom")) for item in container(pod)["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}  # the downward API
    assert {name: value for name, value in env.items() if name.startswith("FACEFUSION_METRIC_")} == {
        "FACEFUSION_METRIC_DAG_ID": "facefusion_swap",
        "FACEFUSION_METRIC_RUN_ID": RUN_ID,
        "FACEFUSION_METRIC_TASK_ID": "swap_span",
        "FACEFUSION_METRIC_MAP_INDEX": "7",
        "FACEFUSION_METRIC_WORK_ID": "5f0c2a9be41d7c3a8e6b1f20",
    }
    assert env["FACEFUSION_TRY_NUMBER"] == "2"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://prometheus-server.monitoring.svc/api/v1/otlp"
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in env and "not-for-pods" not in json.dumps(pod)
    dry_run = {item["name"] for item in container(render(operator))["env"]}  # no task: no labels to give
    assert "NODE_NAME" in dry_run and not any(name.startswith("FACEFUSION_METRIC_") for name in dry_run)


def test_swap_span_pod_asks_for_a_gpu_on_the_gpu_pool(tmp_path: Path) -> None:
    pod = render(make_operator("swap-span", job_uri_under(tmp_path), make_pod_settings(**GPU_POOL)))

    resources = container(pod)["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert resources["requests"]["nvidia.com/gpu"] == "1"
    assert resources["requests"]["ephemeral-storage"] == resources["limits"]["ephemeral-storage"] == "20Gi"
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["spec"]["tolerations"] == json.loads(GPU_POOL["tolerations"])
    assert pod["spec"]["affinity"] == json.loads(GPU_POOL["affinity"])


def test_cpu_commands_stay_off_the_gpu_pool_unless_configured(tmp_path: Path) -> None:
    job_uri = job_uri_under(tmp_path)
    for command in ("prepare", "merge"):
        pod = render(make_operator(command, job_uri, make_pod_settings(**GPU_POOL)))
        resources = container(pod)["resources"]
        assert "nvidia.com/gpu" not in resources["limits"] and "nvidia.com/gpu" not in resources["requests"]
        assert not pod["spec"].get("nodeSelector") and not pod["spec"].get("tolerations")
        assert not pod["spec"].get("affinity")

    settings = make_pod_settings(
        **GPU_POOL, gpu_commands="prepare, swap-span", gpu_resource="amd.com/gpu", gpu_count="2"
    )
    pod = render(make_operator("prepare", job_uri, settings))
    validate_strictly(pod)
    assert container(pod)["resources"]["limits"]["amd.com/gpu"] == "2"
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}


def test_pod_runs_non_root_on_a_read_only_root_with_no_capabilities(tmp_path: Path) -> None:
    pod = render(make_operator("swap-span", job_uri_under(tmp_path), make_pod_settings()))

    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container(pod)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert spec["automountServiceAccountToken"] is False
    mounts = {mount["mountPath"]: mount["name"] for mount in container(pod)["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes[mounts["/tmp"]]["emptyDir"] == {"sizeLimit": "20Gi"}
    assert "emptyDir" in volumes[mounts["/var/cache/facefusion/models"]]


def test_models_come_from_a_read_only_claim_or_an_s3_prefix_cached_on_the_node(tmp_path: Path) -> None:
    settings = make_pod_settings(
        models_volume_claim="facefusion-models",
        models_uri="s3://facefusion-models/v1",
        models_cache_host_path="/var/cache/facefusion/models",
    )
    pod = render(make_operator("swap-span", job_uri_under(tmp_path), settings))

    validate_strictly(pod)
    env = {item["name"]: item.get("value") for item in container(pod)["env"]}
    assert env["FACEFUSION_MODELS_DIR"] == "/models"
    assert env["FACEFUSION_MODELS_URI"] == "s3://facefusion-models/v1"
    assert env["FACEFUSION_MODELS_CACHE"] == "/var/cache/facefusion/models"
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "facefusion-models", "readOnly": True}
    assert volumes["models-cache"]["hostPath"]["path"] == "/var/cache/facefusion/models"
    (models_mount,) = [mount for mount in container(pod)["volumeMounts"] if mount["name"] == "models"]
    assert models_mount == {"mountPath": "/models", "name": "models", "readOnly": True}


def test_storage_credentials_are_secret_references_and_no_value_reaches_the_spec(
    tmp_path: Path, secrets_in_environment: dict[str, str]
) -> None:
    job_uri = job_uri_under(tmp_path)
    for command in ("prepare", "swap-span", "merge"):
        operator = make_operator(command, job_uri, make_pod_settings(storage_secret="facefusion-storage"))
        pod = render(operator, task_context(operator.task_id))

        assert container(pod)["envFrom"] == [{"secretRef": {"name": "facefusion-storage", "optional": False}}]
        names = {item["name"] for item in container(pod)["env"]}
        assert not {name for name in names if name.startswith("AWS_")}
        text = json.dumps(pod)
        leaked = [name for name, value in secrets_in_environment.items() if value in text]
        assert leaked == [], f"{command} pod carries {leaked}"

    service_account_only = render(make_operator("merge", job_uri, make_pod_settings()))
    assert not container(service_account_only).get("envFrom")
    assert service_account_only["spec"]["serviceAccountName"] == "facefusion-worker"


def test_labels_and_annotations_name_the_work_and_span(tmp_path: Path) -> None:
    job_uri = job_uri_under(tmp_path, "5f0c2a9be41d7c3a8e6b1f20")
    operator = make_operator("swap-span", job_uri, make_pod_settings())
    pod = render(operator, task_context("swap_span", map_index=7))

    labels = pod["metadata"]["labels"]
    assert labels["facefusion.io/work-id"] == "5f0c2a9be41d7c3a8e6b1f20"
    assert labels["facefusion.io/span-index"] == "7"
    assert labels["app.kubernetes.io/component"] == "swap-span"
    assert labels["map_index"] == "7" and labels["dag_id"] == "facefusion_swap"  # the parent's, to find the pod again
    assert all(LABEL_VALUE.match(value) and len(value) <= 63 for value in labels.values()), labels
    annotations = pod["metadata"]["annotations"]
    assert annotations == {"facefusion.io/work-uri": job_uri, "facefusion.io/frames": "448-511"}


def test_label_values_are_sanitised(tmp_path: Path) -> None:
    odd = "s3://work/work/Job ID with spaces & a very long name that goes on and on past sixty-three characters/"
    operator = FaceFusionWorkerPodOperator(
        task_id="merge",
        command="merge",
        work_uri=odd,
        output_uri=OUTPUT,
        pod_settings=make_pod_settings(),
        kubernetes_conn_id=KUBE_CONN_ID,
    )
    pod = render(operator)

    validate_strictly(pod)
    value = pod["metadata"]["labels"]["facefusion.io/work-id"]
    assert LABEL_VALUE.match(value) and len(value) <= 63
    assert value.startswith("JobIDwithspacesavery")


def test_pods_are_deferrable_kept_on_failure_and_wait_for_node_scale_up(tmp_path: Path) -> None:
    operator = make_operator("swap-span", job_uri_under(tmp_path), make_pod_settings())

    assert operator.deferrable is True
    assert operator.durable is True  # a restarted Airflow worker follows the running pod instead of starting another
    assert operator.on_finish_action.value == "delete_succeeded_pod"
    assert operator.startup_timeout_seconds == 900
    assert operator.schedule_timeout_seconds == 900
    assert operator.do_xcom_push is False
    slow = make_operator("swap-span", job_uri_under(tmp_path), make_pod_settings(startup_timeout_seconds="1800"))
    assert slow.startup_timeout_seconds == 1800


def test_template_fields_extend_the_parents_and_render(tmp_path: Path) -> None:
    fields = FaceFusionWorkerPodOperator.template_fields
    assert isinstance(fields, tuple)
    assert set(KubernetesPodOperator.template_fields) <= set(fields)
    assert {"work_uri", "output_uri", "run_key", "worker_args", "span", "target_uri"} <= set(fields)

    work_uri = job_uri_under(tmp_path)
    operator = FaceFusionWorkerPodOperator(
        task_id="swap_span",
        command="swap-span",
        work_uri="{{ work_uri }}",
        output_uri=OUTPUT,
        target_uri="{{ target }}",
        span={"index": "{{ index }}", "first": 4, "last": 8, "start": 8, "end": 16},
        pod_settings=make_pod_settings(),
        kubernetes_conn_id=KUBE_CONN_ID,
    )
    operator.render_template_fields({"work_uri": work_uri, "target": TARGET, "index": 1})  # type: ignore[arg-type]

    assert container(render(operator))["args"] == [
        "swap-span",
        "--work-uri",
        work_uri,
        "--target",
        TARGET,
        "--segments",
        "4:8",
        "--span",
        "1",
    ]


def _use_client(operator: FaceFusionWorkerPodOperator, client: RecordingCoreV1Api) -> None:
    operator.__dict__["client"] = client  # the cached property the pod manager and cleanup use


def _span_operator(work: Any, span: dict[str, Any], settings: KubernetesSettings) -> FaceFusionWorkerPodOperator:
    return FaceFusionWorkerPodOperator(
        task_id="swap_span",
        command="swap-span",
        run_key="facefusion_swap--r1",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        target_uri=TARGET,
        span=span,
        pod_settings=settings,
        kubernetes_conn_id=KUBE_CONN_ID,
    )


def test_a_committed_span_launches_no_pod(
    tmp_path: Path,
    recording_client: RecordingCoreV1Api,
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Any],
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    commit_segment(work, 2)
    operator = _span_operator(work, span_list(work.spec, 5)[2], make_pod_settings())
    _use_client(operator, recording_client)

    assert operator.execute(task_context("swap_span", map_index=2)) is None  # type: ignore[arg-type]

    assert recording_client.calls == []


def test_merge_of_an_output_validate_found_done_launches_no_pod(
    tmp_path: Path,
    recording_client: RecordingCoreV1Api,
    write_work: Callable[..., Any],
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    operator = FaceFusionWorkerPodOperator(
        task_id="merge",
        command="merge",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        output_done=True,
        pod_settings=make_pod_settings(),
        kubernetes_conn_id=KUBE_CONN_ID,
    )
    _use_client(operator, recording_client)

    operator.execute(task_context("merge"))  # type: ignore[arg-type]

    assert recording_client.calls == []


def test_an_unfinished_span_creates_its_pod_and_defers(
    tmp_path: Path,
    recording_client: RecordingCoreV1Api,
    write_work: Callable[..., Any],
    commit_segment: Callable[..., Any],
    secrets_in_environment: dict[str, str],
) -> None:
    work = write_work(tmp_path, tmp_path / "out.mp4")
    commit_segment(work, 2)
    span = span_list(work.spec, 5)[3]
    operator = _span_operator(work, span, make_pod_settings(storage_secret="facefusion-storage"))
    _use_client(operator, recording_client)
    context = task_context("swap_span", map_index=3, try_number=2)

    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)  # type: ignore[arg-type]

    assert "create_namespaced_pod" in recording_client.names()
    (body,) = [call["body"] for name, call in recording_client.calls if name == "create_namespaced_pod"]
    validate_strictly(body)
    assert container(body)["args"] == worker_argv("swap-span", work.work_uri, span_worker_args(TARGET, span))
    assert {"name": "FACEFUSION_TRY_NUMBER", "value": "2"} in container(body)["env"]
    assert {"name": "FACEFUSION_TASK_KEY", "value": f"facefusion_swap/{RUN_ID}/swap_span/3"} in container(body)["env"]
    assert {"name": "FACEFUSION_RUN_KEY", "value": "facefusion_swap--r1"} in container(body)["env"]
    trigger = deferred.value.trigger
    assert trigger.startup_timeout == 900
    assert trigger.on_finish_action == "delete_succeeded_pod"
    assert set(context["ti"].xcom) == {"pod_name", "pod_namespace"}
    text = json.dumps([body, context["ti"].xcom, trigger.serialize()], default=str)
    assert not [name for name, value in secrets_in_environment.items() if value in text]


def _finished_pod(
    operator: FaceFusionWorkerPodOperator, phase: str, exit_code: int, message: str | None, reason: str = "Error"
) -> k8s.V1Pod:
    """The operator's own pod as the cluster reports it once its container has ended."""
    pod = operator.build_pod_request_obj(dry_run=True)
    terminated = k8s.V1ContainerStateTerminated(exit_code=exit_code, message=message, reason=reason)
    status = k8s.V1ContainerStatus(
        name="base",
        image=pod.spec.containers[0].image,
        image_id="",
        ready=False,
        restart_count=0,
        state=k8s.V1ContainerState(terminated=terminated),
    )
    pod.status = k8s.V1PodStatus(phase=phase, container_statuses=[status])
    return pod


def _report(failure_class: str, retryable: bool, message: str) -> str:
    return json.dumps({"failure_class": failure_class, "retryable": retryable, "message": message})


def test_non_retryable_termination_message_fails_the_task_at_once_and_keeps_the_pod(
    tmp_path: Path, recording_client: RecordingCoreV1Api
) -> None:
    operator = make_operator("swap-span", job_uri_under(tmp_path), make_pod_settings())
    _use_client(operator, recording_client)
    pod = recording_client.remote_pod = _finished_pod(
        operator, "Failed", EXIT_NO_FACE, _report("no_face", False, "face.jpg: no face found")
    )

    with pytest.raises(AirflowFailException, match=r"no_face.*face\.jpg: no face found.*kept for debugging"):
        operator.post_complete_action(pod=pod, remote_pod=pod, context=None, result=None)  # type: ignore[arg-type]

    assert "delete_namespaced_pod" not in recording_client.names()
    assert "patch_namespaced_pod" in recording_client.names()  # marked checked, so a retry starts a fresh pod


@pytest.mark.parametrize(
    ("exit_code", "message", "reason", "expected"),
    [
        (EXIT_RETRYABLE, _report("retryable", True, "s3: read timeout"), "Error", "s3: read timeout"),
        (EXIT_INTERNAL, _report("internal", True, "Traceback: KeyError"), "Error", "KeyError"),
        (137, None, "OOMKilled", "exit code 137"),
    ],
)
def test_retryable_termination_fails_the_try_for_a_retry(
    tmp_path: Path,
    recording_client: RecordingCoreV1Api,
    exit_code: int,
    message: str | None,
    reason: str,
    expected: str,
) -> None:
    operator = make_operator("swap-span", job_uri_under(tmp_path), make_pod_settings())
    _use_client(operator, recording_client)
    pod = recording_client.remote_pod = _finished_pod(operator, "Failed", exit_code, message, reason)

    with pytest.raises(AirflowException, match=re.escape(expected)) as raised:
        operator.post_complete_action(pod=pod, remote_pod=pod, context=None, result=None)  # type: ignore[arg-type]

    assert not isinstance(raised.value, AirflowFailException)
    assert "delete_namespaced_pod" not in recording_client.names()
    assert "patch_namespaced_pod" in recording_client.names()  # marked checked, so a retry starts a fresh pod


def test_succeeded_pod_is_deleted(tmp_path: Path, recording_client: RecordingCoreV1Api) -> None:
    operator = make_operator("swap-span", job_uri_under(tmp_path), make_pod_settings())
    _use_client(operator, recording_client)
    pod = recording_client.remote_pod = _finished_pod(operator, "Succeeded", 0, None, "Completed")

    operator.post_complete_action(pod=pod, remote_pod=pod, context=None, result=None)  # type: ignore[arg-type]

    assert "delete_namespaced_pod" in recording_client.names()


def test_the_backend_seam_gives_the_kubernetes_operator() -> None:
    assert load_backend("kubernetes") is FaceFusionWorkerPodOperator


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("node_selector", "gpu=yes", "not valid JSON"),
        ("node_selector", '{"gpu": true}', "must be strings"),
        ("tolerations", '{"key": "gpu"}', "expected a JSON list"),
        ("affinity", "[]", "expected a JSON object"),
        ("worker_memory", "8 GB", "not a Kubernetes quantity"),
        ("gpu_commands", "swap-span,render", "render"),
        ("gpu_count", "0", "at least 1"),
    ],
)
def test_bad_kubernetes_settings_name_the_key(key: str, value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=rf"\[facefusion\] {key}: .*{re.escape(problem)}"):
        make_pod_settings(**{key: value})


def test_the_dag_runs_its_worker_tasks_as_pods_when_the_backend_is_kubernetes(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("AIRFLOW__FACEFUSION__BACKEND", "kubernetes")
    dag_file = Path(__file__).resolve().parents[3] / "dags" / "facefusion_swap.py"

    bag = DagBag(dag_folder=str(dag_file))

    assert bag.import_errors == {}
    tasks = {task.task_id: task for task in bag.dags["facefusion_swap"].tasks}
    assert isinstance(tasks["prepare"], FaceFusionWorkerPodOperator)
    assert isinstance(tasks["merge"], FaceFusionWorkerPodOperator)
    assert tasks["swap_span"].operator_class is FaceFusionWorkerPodOperator  # mapped: one pod per span
    assert tasks["swap_span"].partial_kwargs["pool"] == "default_pool"


def kubernetes_expansion(text: str, variables: dict[str, str]) -> str:
    """What the kubelet does to a container's args, command and env values (Kubernetes'
    third_party/forked/golang/expansion): ``$$`` is ``$``, ``$(NAME)`` is the variable when it is defined."""
    out: list[str] = []
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            following = text[cursor + 1]
            if following == "$":
                out.append("$")
                cursor += 2
                continue
            closer = text.find(")", cursor + 2) if following == "(" else -1
            if closer >= 0:
                name = text[cursor + 2 : closer]
                out.append(variables.get(name, f"$({name})"))
                cursor = closer + 1
                continue
            out.append("$" + following)
            cursor += 2
            continue
        out.append(text[cursor])
        cursor += 1
    return "".join(out)


HOSTILE_OUTPUT = "s3://b/out/$(AWS_SECRET_ACCESS_KEY).mp4"


@pytest.mark.parametrize("command", ["merge", "swap-span"])
def test_a_hostile_conf_reaches_the_container_literally(tmp_path: Path, command: str) -> None:
    secret = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG", "HOME": "/home/worker"}
    hostile_target = "s3://b/in/$$(HOME)/$(HOME)/$x/a$.mp4"
    job_uri = job_uri_under(tmp_path)
    operator = FaceFusionWorkerPodOperator(
        task_id=command.replace("-", "_"),
        command=command,
        work_uri=job_uri,
        output_uri=HOSTILE_OUTPUT,
        run_key="facefusion_swap--manual__$(AWS_SECRET_ACCESS_KEY)",
        worker_args=["--target", hostile_target, "--output", HOSTILE_OUTPUT] if command == "merge" else (),
        target_uri=hostile_target if command == "swap-span" else None,
        span=SPAN if command == "swap-span" else None,
        pod_settings=make_pod_settings(storage_secret="facefusion-storage"),
        kubernetes_conn_id=KUBE_CONN_ID,
    )
    context = task_context(operator.task_id)
    context["run_id"] = context["ti"].run_id = "manual__$(AWS_SECRET_ACCESS_KEY)"  # a run id is the user's to choose
    pod = render(operator, context)

    validate_strictly(pod)
    received = [kubernetes_expansion(arg, secret) for arg in container(pod)["args"]]
    intended = ["--target", hostile_target, "--output", HOSTILE_OUTPUT] if command == "merge" else None
    assert received == worker_argv(command, job_uri, intended or span_worker_args(hostile_target, SPAN))
    env = {
        item["name"]: kubernetes_expansion(item["value"], secret) for item in container(pod)["env"] if "value" in item
    }
    assert env["FACEFUSION_RUN_KEY"] == "facefusion_swap--manual__$(AWS_SECRET_ACCESS_KEY)"
    assert env["FACEFUSION_TASK_KEY"].startswith("facefusion_swap/manual__$(AWS_SECRET_ACCESS_KEY)/")
    rendered = json.dumps(received) + json.dumps(env)
    assert secret["AWS_SECRET_ACCESS_KEY"] not in rendered and secret["HOME"] not in rendered


def test_the_expansion_rule_the_test_applies_is_kubernetes_own() -> None:
    variables = {"A": "x"}
    assert kubernetes_expansion("$(A)-$$(A)-$$$(A)-$(B)-$a-$", variables) == "x-$(A)-$x-$(B)-$a-$"


def test_the_pod_operator_overrides_only_public_methods_of_the_cncf_provider() -> None:
    overridden = {
        name
        for name, value in vars(FaceFusionWorkerPodOperator).items()
        if callable(value) and hasattr(KubernetesPodOperator, name)
    }
    # The parent's cleanup (delete a succeeded pod, keep a failed one) runs as it is; the worker's failure class is
    # read in post_complete_action, the documented step after the pod's completion, on the sync and deferred paths.
    assert overridden == {"__init__", "execute", "build_pod_request_obj", "post_complete_action"}


def test_a_span_pods_progress_reaches_the_task_state_store_as_on_the_local_backend(
    tmp_path: Path, write_work: Callable[..., Any], commit_segment: Callable[..., Any]
) -> None:
    from airflow.sdk.execution_time.context import set_current_context

    from facefusion_provider.contract import SpanProgress
    from facefusion_provider.operators.kubernetes import WorkerPodCallbacks

    work = write_work(tmp_path, tmp_path / "out.mp4", frames=40, segment_size=8)
    span = span_list(work.spec, 2)[0]
    operator = _span_operator(work, span, make_pod_settings())
    store: dict[str, Any] = {}
    context = {**task_context("swap_span"), "task_state_store": SimpleNamespace(get=store.get, set=store.__setitem__)}
    progress = SpanProgress(span=0, segments_committed=1, segments_total=3, committed_here=1, frames_done=8)

    with set_current_context(context):  # type: ignore[arg-type]
        WorkerPodCallbacks.progress_callback(
            line=f"2026-12-04 INFO worker: {progress.line()}", client=None, mode="sync"
        )
    assert store["progress"]["segments_committed"] == 1 and store["progress"]["committed_here"] == 1

    for index in range(span["first"], span["last"]):
        commit_segment(work, index)
    WorkerPodCallbacks.on_pod_completion(pod=k8s.V1Pod(), client=None, mode="sync", context=context, operator=operator)
    total = span["last"] - span["first"]
    assert {key: store["progress"][key] for key in ("segments_committed", "segments_total")} == {
        "segments_committed": total,
        "segments_total": total,
    }
