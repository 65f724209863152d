"""Extra links of the worker tasks: this run's output video and its preview image, one click from the task's page.

Airflow 3 resolves an operator's links on the worker when the task ends and keeps each as an XCom (``_link_<class>``)
that the UI reads, so a link is computed once, from the task's rendered ``output_uri`` (``validate``'s XCom). An
``s3://`` output gets a presigned GET URL, signed through the ``[facefusion] aws_conn_id`` connection and valid for
``LINK_EXPIRY`` after the task ended; any other output links to its own URI (``file:///...``). ``prepare`` has none.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.sdk import BaseOperatorLink

from facefusion_provider.job.layout import preview_uri_of
from facefusion_provider.settings import load_settings

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

LINK_EXPIRY = timedelta(days=7)  # SigV4's longest: the link is signed once, when the task ends
LINKED_COMMANDS = frozenset({"merge", "swap-span"})  # the tasks that write, or work towards, the output


class OutputVideoLink(BaseOperatorLink):
    """This run's output video."""

    name = "Output video"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        output_uri = linked_output_uri(operator)
        return browsable_url(output_uri) if output_uri else ""


class OutputPreviewLink(BaseOperatorLink):
    """The preview image merge writes beside the output (``<output stem>.preview.jpg``)."""

    name = "Output preview"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        output_uri = linked_output_uri(operator)
        return browsable_url(preview_uri_of(output_uri)) if output_uri else ""


OUTPUT_LINKS: tuple[BaseOperatorLink, ...] = (OutputVideoLink(), OutputPreviewLink())


def linked_output_uri(operator: Any) -> str:
    """The operator's rendered ``output_uri`` when its command has output links; "" otherwise (never a template)."""
    output_uri = str(getattr(operator, "output_uri", "") or "")
    if getattr(operator, "command", None) not in LINKED_COMMANDS or "{{" in output_uri:
        return ""
    return output_uri


def browsable_url(uri: str) -> str:
    """A URL a browser can open: presigned for ``s3://`` (empty when it cannot be signed), the URI itself otherwise."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3":
        return uri
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook  # boto3 only where a link is signed
    from botocore.config import Config

    # SigV4 always: boto3 may presign with SigV2 (no region known), which newer AWS regions refuse.
    hook = S3Hook(aws_conn_id=load_settings().aws_conn_id, config=Config(signature_version="s3v4"))
    url = hook.generate_presigned_url(
        "get_object",
        params={"Bucket": parsed.netloc, "Key": parsed.path.lstrip("/")},
        expires_in=int(LINK_EXPIRY.total_seconds()),
    )
    return url or ""
