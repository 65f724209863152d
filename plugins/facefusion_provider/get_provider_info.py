"""Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from facefusion_provider import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-facefusion",
        "name": "FaceFusion",
        "description": "Swap faces in long videos: frame-exact chunks fanned out to GPU workers, merged back with audio.",
        "versions": [__version__],
        "connection-types": [],
    }
