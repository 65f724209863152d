"""Renders deploy/chart offline with helm-python-sdk (Helm as a library: no binary, no cluster).

``python tests/unit/kubernetes/chart_helpers.py`` rewrites deploy/standing-workers.yaml from the chart's defaults;
tests/unit/kubernetes/test_chart.py fails while the file and the chart differ.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from helm_python import Chart

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "chart"
STANDING_WORKERS = DEPLOY / "standing-workers.yaml"
AIRFLOW_VALUES = DEPLOY / "airflow-values.yaml"
# The release of deploy/README.md's walkthrough: `helm install facefusion deploy/chart --namespace facefusion`.
RELEASE = "facefusion"
NAMESPACE = "facefusion"
STANDING_WORKERS_TEMPLATE = "facefusion/templates/standing-workers.yaml"

# Every optional part on, as a cluster with KEDA, prometheus-operator and NVIDIA's device plugin would install it.
EVERYTHING_ON: dict[str, Any] = {
    "imagePullSecrets": [{"name": "registry"}],
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/facefusion"}},
    "keda": {
        "enabled": True,
        "prometheus": {"extraMetadata": {"authModes": "bearer"}, "authenticationRef": "prometheus-token"},
    },
    "devicePlugin": {"enabled": True},
    "gpu": {
        "type": "h100",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": ["NVIDIA-H100-80GB-HBM3"],
                                },
                            ]
                        }
                    ]
                }
            }
        },
    },
    "standingWorkers": {
        "priorityClassName": "gpu-workers",
        "podAnnotations": {"prometheus.io/scrape": "false"},
        "extraEnv": [{"name": "FACEFUSION_LOG_LEVEL", "value": "debug"}],
    },
    "models": {"claim": {"storageClassName": "efs"}},
    "monitoring": {"prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
}


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    """The chart's templates rendered as ``helm template`` would, keyed by template path."""
    return Chart.load(CHART).render(values or {}, name=RELEASE, namespace=NAMESPACE)


def documents(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every manifest of a rendering, empty documents left out."""
    return [document for text in rendered.values() for document in yaml.safe_load_all(text) if document]


def of_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [manifest for manifest in manifests if manifest["kind"] == kind]


def standing_workers_file() -> str:
    """deploy/standing-workers.yaml as the chart's defaults render it, for `kubectl apply` without Helm."""
    header = (
        "# Generated from deploy/chart with its default values (python tests/unit/kubernetes/chart_helpers.py): edit the\n"
        "# chart, not this file. With Helm: helm install facefusion deploy/chart --namespace facefusion.\n"
    )
    return header + render()[STANDING_WORKERS_TEMPLATE].lstrip("\n")


if __name__ == "__main__":
    STANDING_WORKERS.write_text(standing_workers_file())
    sys.stdout.write(f"wrote {STANDING_WORKERS.relative_to(ROOT)}\n")
