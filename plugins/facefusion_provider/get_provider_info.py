"""Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from facefusion_provider import __version__
from facefusion_provider.settings import SECTION, SETTINGS

INTEGRATION = "FaceFusion"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-facefusion",
        "name": "FaceFusion",
        "description": "Swap faces in long videos: frame-exact segments fanned out to GPU workers, merged back with audio.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://github.com/facefusion/facefusion",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "facefusion_provider.operators.validate",
                    "facefusion_provider.operators.local",
                    "facefusion_provider.operators.kubernetes",
                    "facefusion_provider.operators.plan",
                    "facefusion_provider.operators.cleanup",
                    "facefusion_provider.operators.ingest",
                ],
            }
        ],
        "sensors": [
            {"integration-name": INTEGRATION, "python-modules": ["facefusion_provider.sensors.standing_workers"]},
        ],
        "triggers": [
            {"integration-name": INTEGRATION, "python-modules": ["facefusion_provider.triggers.span_committed"]},
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["facefusion_provider.hooks.storage", "facefusion_provider.hooks.job_ledger"],
            }
        ],
        "extra-links": [
            "facefusion_provider.links.output.OutputVideoLink",
            "facefusion_provider.links.output.OutputPreviewLink",
        ],
        "connection-types": [],
        "config": {
            SECTION: {
                "description": "Deployment settings of the facefusion_swap DAG; each key is also the environment "
                "variable AIRFLOW__FACEFUSION__<KEY>.",
                "options": {
                    spec.name: {
                        "description": spec.description,
                        "version_added": "0.1.0",
                        "type": spec.type,
                        "example": spec.example,
                        # Airflow str.format()s string defaults with its own variables: keep JSON braces literal.
                        "default": spec.default.replace("{", "{{").replace("}", "}}"),
                    }
                    for spec in SETTINGS
                },
            }
        },
    }
