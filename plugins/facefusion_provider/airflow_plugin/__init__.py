"""The provider's Airflow plugin, registered through the ``airflow.plugins`` entry point (always loaded; Airflow loads
a provider's ``get_provider_info()["plugins"]`` only with ``[core] lazy_discover_providers = False``):

- ``pools``: a listener in the scheduler that fails a run at its start when a task of this provider is in a pool that
  does not exist, naming the pool (Airflow would leave the task ``scheduled`` for ever).
- ``trigger_errors``: an API middleware that answers a bad param value of this provider's DAGs with one line naming
  the field, without jsonschema's dump of the param's schema.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from facefusion_provider.airflow_plugin import pools
from facefusion_provider.airflow_plugin.trigger_errors import OneLineParamErrors


class FaceFusionPlugin(AirflowPlugin):
    name = "facefusion"
    listeners: list[Any] = [pools]
    fastapi_root_middlewares: list[Any] = [
        {"name": "facefusion one-line param errors", "middleware": OneLineParamErrors, "args": [], "kwargs": {}}
    ]
