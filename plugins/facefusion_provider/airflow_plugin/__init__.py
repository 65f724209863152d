"""The provider's Airflow plugin, registered through the ``airflow.plugins`` entry point (always loaded; Airflow loads
a provider's ``get_provider_info()["plugins"]`` only with ``[core] lazy_discover_providers = False``):

- ``run_notes``: the one scheduler listener: a run's note says why it failed (the field by its form title and key), and
  a note the provider wrote goes when the run starts again or succeeds; as a run starts it runs the checks of
- ``pools``: a run fails at its start when a task of this provider is in a pool that does not exist, naming the pool
  (Airflow would leave the task ``scheduled`` for ever).
- ``trigger_errors``: an API middleware that answers a bad param value of this provider's DAGs with one line naming
  the field, without jsonschema's dump of the param's schema.
- ``conf_limits``: a trigger whose conf no task could use is refused with 400 and one line naming the field (a
  middleware): a body that cannot be read (not JSON, nested too deep), a number beyond int64, and for a swap DAG what
  ``validate`` would refuse on the conf alone (unknown keys, types, ranges, lengths); a run started otherwise (the CLI)
  with a conf no task can receive fails as it starts (``run_notes``), naming the field.
- ``outputs``: the view the output links lead to (``/facefusion/outputs/<dag>/<run>/video``), mounted in the API server:
  it checks the user's access to the DAG's runs and that the output's marker names the run's work, then redirects to a
  short-lived presigned URL or sends the local file (another run's output there: 409; none: 404, saying why).
- ``run_view``: the run page's "Output" tab (an external view): where the output stands (``run_output``: from the task
  states and storage together), then the preview and the video; an ingestion run's tab lists the runs it started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from facefusion_provider.airflow_plugin import run_notes
from facefusion_provider.airflow_plugin.conf_limits import RefuseBadConf
from facefusion_provider.airflow_plugin.trigger_errors import OneLineParamErrors
from facefusion_provider.links.output import OUTPUTS_URL_PREFIX

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyOutputsApp:
    """The outputs view, built on its first request: the scheduler, workers and dag-processor load this plugin too,
    and never import FastAPI's routes or the API server's security module for it."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if self._app is None:
            from facefusion_provider.airflow_plugin.outputs import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class FaceFusionPlugin(AirflowPlugin):
    name = "facefusion"
    listeners: list[Any] = [run_notes]
    fastapi_root_middlewares: list[Any] = [
        {"name": "facefusion one-line param errors", "middleware": OneLineParamErrors, "args": [], "kwargs": {}},
        {"name": "facefusion conf checks", "middleware": RefuseBadConf, "args": [], "kwargs": {}},
    ]
    fastapi_apps: list[Any] = [
        {"name": "facefusion outputs", "app": LazyOutputsApp(), "url_prefix": OUTPUTS_URL_PREFIX}
    ]
    # A tab on every run's page: Airflow 3.3's UI lists a plugin's external views by destination alone (no per-DAG
    # filter, and one plugin list for the whole UI), so another DAG's run gets the tab too and it says it has nothing.
    external_views: list[Any] = [
        {
            "name": "Output",
            "href": OUTPUTS_URL_PREFIX + "/runs/{DAG_ID}/{RUN_ID}",
            "destination": "dag_run",
            "url_route": "facefusion_output",
        }
    ]
