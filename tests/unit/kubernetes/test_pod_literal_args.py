"""A pod rendered from a hostile conf: what the container receives, after Kubernetes' own ``$(VAR)`` expansion of
args and env values, is the conf's literal text, never a variable of the pod (the storage secret's keys)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kube_pod_helpers import KUBE_CONN_ID, job_uri_under, make_pod_settings, serialize, validate_strictly

from facefusion_provider.contract import merge_worker_args, prepare_worker_args
from facefusion_provider.operators.kubernetes import FaceFusionWorkerPodOperator
from facefusion_provider.options import Options

# The storage secret's keys as the container would hold them (``envFrom``): what an expanded reference would leak.
SECRET_VALUES = {
    "AWS_ACCESS_KEY_ID": "AKIALITERALARGS00001",
    "AWS_SECRET_ACCESS_KEY": "literal-args-secret-do-not-leak-52d1",
    "AWS_SESSION_TOKEN": "literal-args-session-token-do-not-leak-0e7a",
}
SOURCE = "s3://in/$(AWS_ACCESS_KEY_ID)/face.jpg"
TARGET = "s3://in/$$(AWS_SESSION_TOKEN)/talk.mp4"  # already "escaped" once: must still arrive as written
OUTPUT = "s3://b/out/$(AWS_SECRET_ACCESS_KEY).mp4"
SPAN = {"index": 0, "first": 0, "last": 4, "start": 0, "end": 64, "label": "frames 0-63 (4 segments)"}
_REFERENCE = re.compile(r"\$(\$|\(([A-Za-z_][A-Za-z0-9_.-]*)\))")


def kubernetes_expand(value: str, variables: dict[str, str]) -> str:
    """Kubernetes' expansion of a container's args, command and env values: ``$$`` is ``$``, ``$(VAR)`` the variable's
    value when it is defined (left as written otherwise), any other ``$`` itself."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) == "$":
            return "$"
        return variables.get(match.group(2), match.group(0))

    return _REFERENCE.sub(one, value)


def received(pod: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The args and env values the container's process gets, with the storage secret's keys in its environment."""
    (container,) = pod["spec"]["containers"]
    variables = dict(SECRET_VALUES)
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = kubernetes_expand(item["value"], variables)
            variables[item["name"]] = env[item["name"]]
    return [kubernetes_expand(arg, variables) for arg in container["args"]], env


def test_hostile_uris_reach_the_worker_literally_and_no_secret_is_expanded(tmp_path: Path) -> None:
    settings = make_pod_settings(storage_secret="facefusion-storage")
    work_uri = job_uri_under(tmp_path)
    options = Options()
    operators = {
        "prepare": FaceFusionWorkerPodOperator(
            task_id="prepare",
            command="prepare",
            work_uri=work_uri,
            output_uri=OUTPUT,
            worker_args=prepare_worker_args([SOURCE], TARGET, options),
            pod_settings=settings,
            kubernetes_conn_id=KUBE_CONN_ID,
        ),
        "merge": FaceFusionWorkerPodOperator(
            task_id="merge",
            command="merge",
            work_uri=work_uri,
            output_uri=OUTPUT,
            worker_args=merge_worker_args(TARGET, OUTPUT),
            pod_settings=settings,
            kubernetes_conn_id=KUBE_CONN_ID,
        ),
        "swap-span": FaceFusionWorkerPodOperator(
            task_id="swap_span",
            command="swap-span",
            work_uri=work_uri,
            output_uri=OUTPUT,
            target_uri=TARGET,
            span=SPAN,
            pod_settings=settings,
            kubernetes_conn_id=KUBE_CONN_ID,
        ),
    }
    for command, operator in operators.items():
        pod = serialize(operator.build_pod_request_obj(None, dry_run=True))
        validate_strictly(pod)
        args, env = received(pod)

        assert args == operator.call().argv(), command
        assert [arg for arg in args if "$(" in arg], command  # the hostile text is there, as text
        received_text = " ".join([*args, *env.values()])
        for secret in SECRET_VALUES.values():
            assert secret not in received_text, command
    for command in ("merge", "swap-span"):
        args, _ = received(serialize(operators[command].build_pod_request_obj(None, dry_run=True)))
        assert OUTPUT in args or command == "swap-span", command
        assert TARGET in args, command


def test_the_expansion_rule_of_this_test_expands_an_unescaped_reference() -> None:
    # The rule above is Kubernetes' own: an unescaped URI would have named the object after the secret.
    assert kubernetes_expand(OUTPUT, SECRET_VALUES) == f"s3://b/out/{SECRET_VALUES['AWS_SECRET_ACCESS_KEY']}.mp4"
    assert kubernetes_expand("$$(X) $x $(UNDEFINED)", {"X": "no"}) == "$(X) $x $(UNDEFINED)"
