"""``validate``: the run's conf becomes normalised URIs, checked options, the work id and this run's lease on it.

The DAG's ``Params`` come from the same options model, so the CLI, the REST API and the UI form validate alike; what
a JSON schema cannot say (URI rules, allow-lists, missing inputs, a voice whose first bytes are not its format, an
output that cannot be written, trim order) fails here, naming the field, before any worker runs. Nothing is ever
written at the output.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from facefusion_provider.contract import merge_worker_args, prepare_worker_args
from facefusion_provider.exceptions import InputMissingError, NonRetryableError
from facefusion_provider.hooks import run_metrics
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.commands import record_failure
from facefusion_provider.operators.params import titled_reason
from facefusion_provider.options import Options
from facefusion_provider.settings import load_settings
from facefusion_provider.work.audio_signatures import check_voice_bytes
from facefusion_provider.work.ids import run_key, work_id
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.records import RunHolder, RunLease
from facefusion_provider.work.run_inputs import (
    CONF_INPUT_FIELDS,
    NESTED_OPTIONS_KEY,
    check_conf,
    check_output_outside_work,
    is_audio_source,
    uri_extension,
)


@dataclass(frozen=True)
class StorageChecks:
    """What ``validate_conf`` asks of storage (the hook in a task; plain functions in tests)."""

    content_id: Callable[[str], str]
    check_writable: Callable[[str], None]
    read_range: Callable[[str, int, int], bytes]  # bytes [start, end) of an input: a voice's first bytes


def validate_conf(
    params: Mapping[str, Any],
    conf: Mapping[str, Any],
    *,
    work_root: str,
    checks: StorageChecks,
    allowed_inputs: tuple[str, ...] = (),
    allowed_outputs: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Check a run's conf and name its work. Any problem is an ``InvalidOptionError`` (or ``InputMissingError``,
    ``StorageDeniedError``) whose message starts with the field, e.g. ``face_swapper_blend: ...``."""
    checked = check_conf(params, conf, allowed_inputs=allowed_inputs, allowed_outputs=allowed_outputs)
    check_output_outside_work(checked.output_uri, work_root, "output_uri")
    target_id = _content_id(checks, checked.target_uri, "target_uri")
    source_ids = [_content_id(checks, uri, f"source_uris[{i}]") for i, uri in enumerate(checked.source_uris)]
    for i, uri in enumerate(checked.source_uris):
        if is_audio_source(uri):
            check_voice_bytes(uri, uri_extension(uri), f"source_uris[{i}]", checks.read_range)
    checks.check_writable(checked.output_uri)
    work = work_id(target_id, source_ids, checked.options)
    return {
        "work_id": work,
        "work_uri": WorkLayout.under(work_root, work).work_uri,
        "source_uris": checked.source_uris,
        "target_uri": checked.target_uri,
        "output_uri": checked.output_uri,
        "options": checked.options.model_dump(mode="json"),
        "prepare_args": prepare_worker_args(checked.source_uris, checked.target_uri, checked.options),
        "merge_args": merge_worker_args(checked.target_uri, checked.output_uri),
    }


# "target_uri: ...", "source_uris[1]: ...", "invalid options: options.face_swapper_blend: ...": the field comes first.
_FIELD_FIRST = re.compile(r"^(?:invalid options: )?([\w.()]+?)(?:\[\d+\])?: ")
OTHER_FIELD = "other"


def bad_input_field(message: str) -> str:
    """The conf field a bad-input message names first, as a metric label: a conf input, ``options.<option>``,
    ``options`` for an options problem that names no one option, else ``other`` (a misspelt conf key: the label's
    values stay a fixed set whatever people send)."""
    match = _FIELD_FIRST.match(message)
    field = match.group(1) if match else ""
    if field in (*CONF_INPUT_FIELDS, NESTED_OPTIONS_KEY):
        return field
    option = field.removeprefix(f"{NESTED_OPTIONS_KEY}.")
    if option != field:
        return field if option in Options.model_fields else NESTED_OPTIONS_KEY
    return OTHER_FIELD


@contextlib.contextmanager
def counted_bad_input(dag_id: str) -> Iterator[None]:
    """Bad input raised inside is counted by its field (``run_metrics.bad_input``) and raised on."""
    try:
        yield
    except NonRetryableError as error:
        run_metrics.bad_input(bad_input_field(str(error)), dag_id=dag_id)
        raise


def _content_id(checks: StorageChecks, uri: str, field: str) -> str:
    try:
        return checks.content_id(uri)
    except InputMissingError as error:
        raise InputMissingError(f"{field}: {error}") from None


class ValidateSwapConfOperator(BaseOperator):
    """Validate the run's conf (its ``params`` and the raw ``dag_run.conf``), hold a lease on the shared work for this
    run, and return the ticket; each key is also its own XCom (``validate.output["work_uri"]``).

    Bad conf fails the task at once (no retries) with a message that names the field.

    :param work_root: fsspec URI of the shared work; default from the ``[facefusion] work_root`` setting.
    :param run_priority: written in the run's lease: standing and helping workers take the free segments of a run of
        higher priority first (the interactive DAG's runs before the batch DAG's).
    """

    template_fields: tuple[str, ...] = (*BaseOperator.template_fields, "work_root")

    def __init__(self, *, work_root: str | None = None, run_priority: int = 0, **kwargs: Any) -> None:
        kwargs.setdefault("multiple_outputs", True)
        kwargs.setdefault("retries", 0)  # bad conf stays bad; storage hiccups are retried inside each request
        super().__init__(**kwargs)
        self.work_root = work_root
        self.run_priority = run_priority

    @contextlib.contextmanager
    def bad_input_in_one_line(self, context: Context) -> Iterator[None]:
        """Bad input fails the task at once, logged once as one line naming the field by its form title and key
        (``Output video (output_uri): ...``); the run's note says the same (``airflow_plugin/run_notes.py``). Only
        Airflow's own "Task failed" record follows, without the chained second copy of the message."""
        try:
            yield
        except NonRetryableError as error:
            record_failure(context, error.failure_class, str(error))
            reason = titled_reason(str(error))
            self.log.error("Bad input: %s", reason)
            raise AirflowFailException(reason) from None

    def execute(self, context: Context) -> dict[str, Any]:
        hook = FaceFusionStorageHook()
        settings = load_settings()
        dag_run = context["dag_run"]
        with self.bad_input_in_one_line(context), counted_bad_input(dag_run.dag_id):
            ticket = validate_conf(
                context["params"],
                dag_run.conf or {},
                work_root=self.work_root or settings.work_root,
                checks=StorageChecks(
                    content_id=hook.content_id,
                    check_writable=lambda uri: hook.check_writable(uri, field="output_uri"),
                    read_range=hook.read_range,
                ),
                allowed_inputs=settings.allowed_input_prefixes,
                allowed_outputs=settings.allowed_output_prefixes,
            )
        key = run_key(dag_run.dag_id, dag_run.run_id)
        lease = RunLease(
            holder=RunHolder(kind="airflow", dag_id=dag_run.dag_id, run_id=dag_run.run_id),
            ttl_seconds=settings.run_lease.total_seconds(),
            output_uri=ticket["output_uri"],
            created_at=datetime.now(UTC),
            target_uri=ticket["target_uri"],
            priority=self.run_priority,
            source_uris=ticket["source_uris"],
            options=ticket["options"],
        )
        hook.hold_work(ticket["work_uri"], key, lease)
        self.log.info("Work %s in %s (run key %s)", ticket["work_id"], ticket["work_uri"], key)
        # Decided once per run and passed on: the later tasks start nothing when it is done.
        output_done = hook.output_done(ticket["output_uri"], ticket["work_id"]) is not None
        if output_done:
            self.log.info(
                "%s already holds this work's output: the worker tasks have nothing to do", ticket["output_uri"]
            )
        return {**ticket, "run_key": key, "run_lease": lease.model_dump(mode="json"), "output_done": output_done}
