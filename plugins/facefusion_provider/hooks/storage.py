"""The Airflow side's reads and writes of the shared work, run leases, outputs and inputs, all through
``facefusion_provider.storage`` and ``facefusion_provider.work``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlparse

from airflow.sdk import BaseHook
from pydantic import ValidationError

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidWorkError
from facefusion_provider.settings import load_settings
from facefusion_provider.work import leases
from facefusion_provider.work.claims import scan_work
from facefusion_provider.work.layout import RootLayout, WorkLayout, output_done, read_output_marker
from facefusion_provider.work.records import OutputMarker, Refusal, RunLease, WorkSpec


class FaceFusionStorageHook(BaseHook):
    """Work folders (``work.json``, segment markers, run leases), output markers and input identities, on any fsspec
    store.

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

    def read_work(self, work_uri: str) -> WorkSpec:
        """``work.json`` of a prepared work; a missing or unreadable one is an ``InvalidWorkError``."""
        layout = WorkLayout(work_uri)
        try:
            with self.storage_access(work_uri):
                return WorkSpec.model_validate_json(storage.read_bytes(layout.work_json))
        except InputMissingError:
            raise InvalidWorkError(f"{layout.work_json}: no work.json; run prepare first") from None
        except (ValidationError, ValueError) as error:
            raise InvalidWorkError(f"{layout.work_json}: not a work.json of this version: {error}") from None

    def is_prepared(self, work_uri: str) -> bool:
        with self.storage_access(work_uri):
            return storage.exists(WorkLayout(work_uri).work_json)

    def committed_segments(self, work_uri: str) -> frozenset[int]:
        """The indexes of the committed segments (one listing)."""
        with self.storage_access(work_uri):
            return scan_work(WorkLayout(work_uri)).committed

    def renew_lease(self, work_uri: str, run_key: str) -> None:
        """Renew this run's lease on its work (``LeaseLostError`` when a sweep removed it)."""
        with self.storage_access(work_uri):
            leases.renew(WorkLayout(work_uri), run_key)

    def keep_for_retry(self, work_uri: str, run_key: str, ttl_seconds: float) -> None:
        """A failed run keeps its work for a retry or a clear: its lease becomes ``kept`` for ``ttl_seconds``."""
        with self.storage_access(work_uri):
            leases.keep_for_retry(WorkLayout(work_uri), run_key, ttl_seconds)

    def standing_workers(self, work_root: str) -> list[str]:
        """The standing workers (``facefusion-worker serve``) whose lease under ``work_root`` is live."""
        with self.storage_access(work_root):
            return leases.live_standing_workers(RootLayout.of(work_root))

    def standing_refusal(self, work_uri: str, live_workers: list[str]) -> Refusal | None:
        """Why no standing worker will work ``work_uri``, once every one of ``live_workers`` has refused it."""
        with self.storage_access(work_uri):
            return leases.standing_refusal(WorkLayout(work_uri), live_workers)

    def output_done(self, output_uri: str, work_id: str) -> OutputMarker | None:
        """The marker beside ``output_uri`` when it names ``work_id`` and the output exists: nothing is left to do."""
        with self.storage_access(output_uri):
            return output_done(work_id, output_uri)

    def output_marker(self, output_uri: str) -> OutputMarker | None:
        """The marker beside ``output_uri``: which work and run wrote what is there now (None: none, or unreadable)."""
        with self.storage_access(output_uri):
            return read_output_marker(output_uri)

    def content_id(self, uri: str) -> str:
        with self.storage_access(uri):
            return storage.content_id(uri)

    def read_range(self, uri: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an input in one ranged read (a voice's first bytes at validate)."""
        with self.storage_access(uri):
            return storage.read_range(uri, start, end)

    def exists(self, uri: str) -> bool:
        with self.storage_access(uri):
            return storage.exists(uri)

    def check_writable(self, uri: str, *, field: str) -> None:
        with self.storage_access(uri):
            storage.check_writable(uri, field=field)

    def hold_work(self, work_uri: str, run_key: str, lease: RunLease) -> None:
        """Write (or write again) this run's lease on the shared work, after any sweep in progress has finished: each
        task of the run holds it as it starts, so a run queued past its TTL holds the work again."""
        with self.storage_access(work_uri):
            leases.hold(WorkLayout(work_uri), run_key, lease)

    def release_work(self, work_uri: str, run_key: str) -> list[str]:
        """Drop this run's lease, then remove the work unless another run's lease is live (whoever holds it: another
        Airflow, a CLI run); the keys of those runs."""
        layout = WorkLayout(work_uri)
        with self.storage_access(work_uri):
            leases.release(layout, run_key)
            return leases.sweep_if_unused(layout, run_key)


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
