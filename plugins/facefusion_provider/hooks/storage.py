"""The Airflow side's reads and writes of job folders, markers and inputs, all through ``facefusion_provider.storage``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlparse

from airflow.sdk import BaseHook
from pydantic import ValidationError

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidJobError
from facefusion_provider.settings import load_settings
from facefusion_provider.types import ChunkMarker, JobSpec, OutputMarker


class FaceFusionStorageHook(BaseHook):
    """Job folders (``job.json``, chunk markers), output markers and input identities, on any fsspec store.

    ``aws_conn_id`` names the Airflow AWS connection for ``s3://`` URIs (default: the ``[facefusion] aws_conn_id``
    setting); its credentials and its extra's ``endpoint_url`` are used here and handed to local worker processes as
    environment variables (``worker_environment``). Without a connection, credentials come from the environment
    (``AWS_*``, ``FACEFUSION_S3_ENDPOINT_URL``) or the machine's role, as they do for the worker.
    """

    conn_name_attr = "aws_conn_id"
    hook_name = "FaceFusion storage"

    def __init__(self, aws_conn_id: str | None = None) -> None:
        super().__init__()
        self.aws_conn_id = aws_conn_id
        self._credentials: tuple[storage.S3Credentials | None] | None = None

    def s3_credentials(self) -> storage.S3Credentials | None:
        """The AWS connection's credentials and endpoint (resolved once per hook), or None without a connection."""
        if self._credentials is None:
            self._credentials = (_connection_credentials(self.aws_conn_id or load_settings().aws_conn_id),)
        return self._credentials[0]

    def worker_environment(self) -> dict[str, str]:
        """Environment variables that give a worker process the connection's S3 access (never argv, conf or XCom)."""
        credentials = self.s3_credentials()
        return credentials.environment() if credentials else {}

    @contextlib.contextmanager
    def storage_access(self, *uris: str) -> Iterator[None]:
        """Storage calls inside use the connection's credentials when they touch S3 (no lookup for local files)."""
        if any(urlparse(uri).scheme == "s3" for uri in uris):
            with storage.using_s3_credentials(self.s3_credentials()):
                yield
        else:
            yield

    def read_job(self, job_uri: str) -> JobSpec:
        """``job.json`` of a prepared job; a missing or unreadable one is an ``InvalidJobError``."""
        layout = storage.JobLayout(job_uri)
        try:
            with self.storage_access(job_uri):
                return JobSpec.model_validate(storage.read_json(layout.job_json))
        except InputMissingError:
            raise InvalidJobError(f"{layout.job_json}: no job.json; run prepare first") from None
        except (ValidationError, ValueError) as error:
            raise InvalidJobError(f"{layout.job_json}: not a job.json of this version: {error}") from None

    def find_job(self, job_uri: str) -> JobSpec | None:
        """``job.json`` when ``prepare`` has committed it, else None."""
        with self.storage_access(job_uri):
            if not storage.exists(storage.JobLayout(job_uri).job_json):
                return None
        return self.read_job(job_uri)

    def chunk_marker(self, job_uri: str, index: int) -> ChunkMarker | None:
        """The commit marker of chunk ``index``, or None when the chunk is not committed (or its marker is unreadable)."""
        uri = storage.JobLayout(job_uri).chunk_marker(index)
        try:
            with self.storage_access(uri):
                if not storage.exists(uri):
                    return None
                marker = ChunkMarker.model_validate(storage.read_json(uri))
        except (ValidationError, ValueError, InputMissingError):
            self.log.warning("Ignoring unreadable chunk marker %s: the chunk will be redone", uri)
            return None
        return marker if marker.index == index else None

    def output_marker(self, output_uri: str) -> OutputMarker | None:
        """The marker that ``merge`` writes beside the output, when the output and its marker both exist."""
        uri = storage.output_marker_uri(output_uri)
        try:
            with self.storage_access(uri):
                if not (storage.exists(uri) and storage.exists(output_uri)):
                    return None
                return OutputMarker.model_validate(storage.read_json(uri))
        except (ValidationError, ValueError, InputMissingError):
            self.log.warning("Ignoring unreadable output marker %s", uri)
            return None

    def output_is_current(self, output_uri: str, job_id: str) -> bool:
        """True when ``output_uri`` exists and was written by job ``job_id``: nothing is left to do for that job."""
        marker = self.output_marker(output_uri)
        return marker is not None and marker.job_id == job_id

    def content_id(self, uri: str) -> str:
        with self.storage_access(uri):
            return storage.content_id(uri)

    def remove_job(self, job_uri: str) -> None:
        with self.storage_access(job_uri):
            storage.remove_tree(job_uri)


def _connection_credentials(aws_conn_id: str | None) -> storage.S3Credentials | None:
    """Frozen credentials of an Airflow AWS connection (its secrets are masked in task logs by the AWS hook)."""
    if not aws_conn_id:
        return None
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    aws = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    frozen = aws.get_credentials()
    return storage.S3Credentials(
        access_key_id=frozen.access_key,
        secret_access_key=frozen.secret_key,
        session_token=frozen.token,
        endpoint_url=aws.conn_config.endpoint_url,
        region_name=aws.conn_config.region_name,
    )
