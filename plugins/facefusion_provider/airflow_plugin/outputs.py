"""The output links' view: a run's output video and preview image, for a user allowed to read the run's DAG, and only
while the output at the run's path is this run's.

The worker tasks' extra links (``links/output.py``) are stored in the ``xcom`` table as links to this view, which
carry the DAG and run ids and nothing else: no credential at rest, and no location a user could change. The view,
mounted in Airflow's API server under ``OUTPUTS_URL_PREFIX`` (the plugin's ``fastapi_apps``), checks the user's read access to
the DAG's runs with Airflow's own ``requires_access_dag`` (the session cookie or a bearer token: 401 without one, 403
without access), finds the run's output and work in ``validate``'s XComs, and checks the output's marker against the
work (``run_output.link_refusal``): another run's output at the same path is refused (409), a removed one or one not
written yet is not found (404), each with one plain line saying why. This run's output is answered with a presigned
GET URL valid for ``PRESIGNED_SECONDS`` (an ``s3://`` output: a redirect) or with the file itself (a local output,
which a browser cannot open from a ``file://`` link): the video as a download (``Content-Disposition: attachment``, so
a click in the Output tab's sandboxed frame, or on the extra link, saves it), the preview as an image to open.
"""

from __future__ import annotations

import os
import posixpath
from typing import Annotated, Literal
from urllib.parse import quote, urlparse

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, status
from fastapi.responses import FileResponse, PlainTextResponse, RedirectResponse, Response

from facefusion_provider.airflow_plugin import run_view
from facefusion_provider.airflow_plugin.run_output import RunFacts, link_refusal
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.settings import load_settings
from facefusion_provider.storage.uris import check_allowed, local_path
from facefusion_provider.work.layout import preview_uri_of

PRESIGNED_SECONDS = 300  # long enough to start a download; the link itself never expires, the signature does
OutputKind = Literal["video", "preview"]
MEDIA_TYPES = {
    ".mp4": "video/mp4",
    ".m4v": "video/mp4",
    ".mov": "video/quicktime",
    ".mkv": "video/x-matroska",
    ".jpg": "image/jpeg",  # an image target's output
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".webp": "image/webp",
}
PREVIEW_TYPE = "image/jpeg"

RunFactsDep = Annotated[RunFacts | None, Depends(run_view.read_run_facts)]


def content_disposition(kind: OutputKind, filename: str) -> str:
    """The video downloads (under its own name, RFC 6266's encoded form), the preview opens."""
    return f"attachment; filename*=UTF-8''{quote(filename)}" if kind == "video" else "inline"


def presigned_get_url(uri: str, kind: OutputKind, seconds: int = PRESIGNED_SECONDS) -> str:
    """A SigV4 GET URL for an ``s3://`` object, signed through the ``[facefusion] aws_conn_id`` connection; S3 answers
    it with the kind's content type and disposition (a video downloads wherever its link is clicked)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from botocore.config import Config

    parsed = urlparse(uri)
    key = parsed.path.lstrip("/")
    media_type = PREVIEW_TYPE if kind == "preview" else MEDIA_TYPES.get(os.path.splitext(key)[1].lower())
    params = {
        "Bucket": parsed.netloc,
        "Key": key,
        "ResponseContentDisposition": content_disposition(kind, posixpath.basename(key)),
        **({"ResponseContentType": media_type} if media_type else {}),
    }
    # SigV4 always: boto3 may presign with SigV2 (no region known), which newer AWS regions refuse.
    hook = S3Hook(aws_conn_id=load_settings().aws_conn_id, config=Config(signature_version="s3v4"))
    url = hook.generate_presigned_url("get_object", params=params, expires_in=seconds)
    if not url:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"{uri} could not be signed; see the API server's log")
    return str(url)


def local_output_file(uri: str) -> str:
    """The local file of an output, checked again against the allowed output prefixes (by its real path now)."""
    try:
        check_allowed(uri, load_settings().allowed_output_prefixes, field=run_view.OUTPUT_KEY, kind="output")
    except InvalidOptionError:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the output is no longer inside the allowed locations") from None
    path = local_path(uri)
    if path is None or not os.path.isfile(path):
        raise HTTPException(status.HTTP_404_NOT_FOUND, "the output is not there (not merged yet, or removed)")
    return path


def create_app() -> FastAPI:
    app = FastAPI(title="facefusion outputs", description=__doc__)

    @app.get(
        "/outputs/{dag_id}/{run_id}/{kind}",
        dependencies=[Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))],
    )
    def run_output(dag_id: str, run_id: str, kind: OutputKind, run: RunFactsDep) -> Response:
        """This run's output video or preview image (a redirect to a short-lived URL, or the local file), or one
        line saying why there is none under this run's name."""
        if run is None or not run.tasks.has_output:
            return PlainTextResponse(f"run {run_id} of {dag_id} writes no output\n", status.HTTP_404_NOT_FOUND)
        refusal = link_refusal(run, run_view.read_stored_output(run))
        if refusal is not None:
            return PlainTextResponse(refusal.reason + "\n", refusal.status)
        assert run.output_uri is not None
        uri = run.output_uri if kind == "video" else preview_uri_of(run.output_uri)
        scheme = urlparse(uri).scheme
        if scheme == "s3":
            return RedirectResponse(presigned_get_url(uri, kind), status_code=status.HTTP_307_TEMPORARY_REDIRECT)
        if scheme != "file":
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"a {scheme}:// output cannot be opened here")
        path = local_output_file(uri)
        extension = os.path.splitext(path)[1].lower()
        media_type = PREVIEW_TYPE if kind == "preview" else MEDIA_TYPES.get(extension, "application/octet-stream")
        return FileResponse(
            path,
            media_type=media_type,
            filename=os.path.basename(path),
            content_disposition_type="attachment" if kind == "video" else "inline",
        )

    app.include_router(run_view.router)  # the run page's Output tab (run_view.py)
    return app
