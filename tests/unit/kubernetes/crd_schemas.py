"""JSON schemas of the custom resources the chart renders, for the fields it uses, written from the projects' published
CRDs (no third-party file is copied here). Unknown fields are refused, as a strict check of a core kind would.

- KEDA ScaledObject ``keda.sh/v1alpha1`` (KEDA 2.x ``config/crd/bases/keda.sh_scaledobjects.yaml``; the Prometheus
  scaler's metadata from https://keda.sh/docs/latest/scalers/prometheus/). The HPA ``behavior`` under ``advanced`` is
  Kubernetes' own ``HorizontalPodAutoscalerBehavior``: the tests check it with kubernetes-validate instead.
- prometheus-operator PrometheusRule ``monitoring.coreos.com/v1`` (``example/prometheus-operator-crd/
  monitoring.coreos.com_prometheusrules.yaml``).
"""

from __future__ import annotations

from typing import Any

_INT32 = {"type": "integer", "minimum": 0, "maximum": 2147483647}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


def _metadata(*, namespaced: bool) -> dict[str, Any]:
    properties = {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 253},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    }
    if namespaced:
        properties["namespace"] = {"type": "string", "minLength": 1}
    return _object(properties, ("name", "namespace") if namespaced else ("name",))


# The Prometheus scaler's metadata keys (all strings); serverAddress, query and threshold are required.
PROMETHEUS_SCALER_METADATA = _object(
    {
        key: {"type": "string"}
        for key in (
            "serverAddress",
            "query",
            "threshold",
            "activationThreshold",
            "namespace",
            "queryParameters",
            "customHeaders",
            "ignoreNullValues",
            "unsafeSsl",
            "timeout",
            "authModes",
        )
    },
    ("serverAddress", "query", "threshold"),
)

SCALED_OBJECT = _object(
    {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _metadata(namespaced=True),
        "spec": _object(
            {
                "scaleTargetRef": _object(
                    {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "envSourceContainerName": {"type": "string"},
                    },
                    ("name",),
                ),
                "pollingInterval": _INT32,
                "cooldownPeriod": _INT32,
                "initialCooldownPeriod": _INT32,
                "idleReplicaCount": _INT32,
                "minReplicaCount": _INT32,
                "maxReplicaCount": _INT32,
                "fallback": _object({"failureThreshold": _INT32, "replicas": _INT32}, ("failureThreshold", "replicas")),
                "advanced": _object(
                    {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": _object(
                            {"name": {"type": "string"}, "behavior": {"type": "object"}}
                        ),
                    }
                ),
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": _object(
                        {
                            "type": {"type": "string", "minLength": 1},
                            "name": {"type": "string"},
                            "metadata": _STRING_MAP,
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": _object(
                                {"name": {"type": "string", "minLength": 1}, "kind": {"type": "string"}}, ("name",)
                            ),
                        },
                        ("type", "metadata"),
                    ),
                },
            },
            ("scaleTargetRef", "triggers"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

_RULE = {
    **_object(
        {
            "record": {"type": "string", "minLength": 1},
            "alert": {"type": "string", "minLength": 1},
            "expr": {"type": ["string", "integer"], "minLength": 1},
            "for": {
                "type": "string",
                "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
            },
            "keep_firing_for": {"type": "string", "minLength": 1},
            "labels": _STRING_MAP,
            "annotations": _STRING_MAP,
        },
        ("expr",),
    ),
    # A rule records or alerts, never both.
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
}

PROMETHEUS_RULE = _object(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _metadata(namespaced=True),
        "spec": _object(
            {
                "groups": {
                    "type": "array",
                    "items": _object(
                        {
                            "name": {"type": "string", "minLength": 1},
                            "interval": {"type": "string"},
                            "query_offset": {"type": "string"},
                            "limit": {"type": "integer"},
                            "partial_response_strategy": {"type": "string"},
                            "labels": _STRING_MAP,
                            "rules": {"type": "array", "items": _RULE},
                        },
                        ("name",),
                    ),
                }
            }
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

CUSTOM_RESOURCE_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
}
