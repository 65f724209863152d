"""Extra links of the worker tasks: this run's output video and its preview image, one click from the task's page.

Airflow 3 resolves an operator's links on the worker when the task ends and keeps each as an XCom (``_link_<class>``)
in the metadata database, where anyone who can read the database or the task's links sees it. So a link holds no
credential and no location: it leads to the provider's view in the API server (``airflow_plugin/outputs.py``) with
the DAG and run ids only, and the view checks the user's access to the DAG's runs before it redirects to a presigned
URL of a few minutes (``s3://``) or sends the file (a local output). ``prepare`` has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

LINKED_COMMANDS = frozenset({"merge", "swap-span"})  # the tasks that write, or work towards, the output
OUTPUTS_URL_PREFIX = "/facefusion"  # where the plugin mounts the outputs view in the API server


def output_link_path(dag_id: str, run_id: str, kind: str) -> str:
    """The outputs view's path for a run's ``video`` or ``preview`` (ids percent-encoded: run ids hold ``:``, ``+``)."""
    return f"{OUTPUTS_URL_PREFIX}/outputs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{kind}"


class OutputVideoLink(BaseOperatorLink):
    """This run's output video."""

    name = "Output video"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        return output_view_url(operator, ti_key, "video")


class OutputPreviewLink(BaseOperatorLink):
    """The preview image merge writes beside the output (``<output stem>.preview.jpg``)."""

    name = "Output preview"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        return output_view_url(operator, ti_key, "preview")


OUTPUT_LINKS: tuple[BaseOperatorLink, ...] = (OutputVideoLink(), OutputPreviewLink())


def linked_output_uri(operator: Any) -> str:
    """The operator's rendered ``output_uri`` when its command has output links; "" otherwise (never a template)."""
    output_uri = str(getattr(operator, "output_uri", "") or "")
    if getattr(operator, "command", None) not in LINKED_COMMANDS or "{{" in output_uri:
        return ""
    return output_uri


def output_view_url(operator: Any, ti_key: TaskInstanceKey | None, kind: str) -> str:
    """The view's URL for this task's run (under ``[api] base_url`` when set), or "" where the task has no output."""
    if ti_key is None or not linked_output_uri(operator):
        return ""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return base + output_link_path(ti_key.dag_id, ti_key.run_id, kind)
