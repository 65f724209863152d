"""``validate``: the run's conf becomes normalised URIs, checked options, the job id and the job folder.

The DAG's ``Params`` come from the same options model, so the CLI, the REST API and the UI form validate alike; what
a JSON schema cannot say (URI schemes, missing inputs, trim order) fails here, naming the field, before any worker runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context, Param

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidOptionError
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.commands import fail_on_bad_input, prepare_worker_args
from facefusion_provider.options import Options, options_json_schema, parse_options
from facefusion_provider.settings import load_settings


def swap_params() -> dict[str, Param]:
    """The DAG's ``Params``: the conf ``{"source_uris", "target_uri", "output_uri", "options"}`` as a JSON schema."""
    options_schema = options_json_schema()
    options_schema.pop("description", None)
    return {
        "source_uris": Param(
            type="array",
            items={"type": "string", "minLength": 1},
            minItems=1,
            title="Source faces",
            description="Images of the face to swap in (paths or file://, s3:// URIs); several images of one person "
            "are averaged into one identity.",
        ),
        "target_uri": Param(
            type="string", minLength=1, title="Target video", description="The video whose faces are replaced."
        ),
        "output_uri": Param(
            type="string",
            minLength=1,
            title="Output video",
            description="Where the swapped video is written (atomically); its marker sits beside it.",
        ),
        "options": Param(
            default=Options().model_dump(mode="json"),
            title="Options",
            description="Face swap options, keyed by the options model's field names (e.g. chunk_size, "
            "face_swapper_blend); left-out options keep their defaults.",
            **options_schema,
        ),
    }


def validate_conf(
    source_uris: Any,
    target_uri: Any,
    output_uri: Any,
    options: Any,
    *,
    work_root: str,
    content_id: Callable[[str], str] = storage.content_id,
    chunk_wave: int = 0,
) -> dict[str, Any]:
    """Check a run's conf and name the job. Any problem is an ``InvalidOptionError`` (or ``InputMissingError``) whose
    message starts with the field, e.g. ``options.face_swapper_blend: ...`` or ``target_uri: ... no such file``."""
    if not isinstance(source_uris, list) or not source_uris:
        raise InvalidOptionError(f"source_uris: expected a non-empty list of paths or URIs, got {source_uris!r}")
    sources = [storage.normalize_uri(uri, field=f"source_uris[{i}]") for i, uri in enumerate(source_uris)]
    target = storage.normalize_uri(target_uri, field="target_uri")
    output = storage.normalize_uri(output_uri, field="output_uri")
    if output == target or output in sources:
        raise InvalidOptionError(f"output_uri: {output} would overwrite an input")
    if options is not None and not isinstance(options, dict):
        raise InvalidOptionError(f"options: expected an object of option names and values, got {options!r}")
    parsed = parse_options(options or {}, where="options")
    target_id = _content_id(content_id, target, "target_uri")
    source_ids = [_content_id(content_id, uri, f"source_uris[{i}]") for i, uri in enumerate(sources)]
    job_id = storage.compute_job_id(target_id, source_ids, parsed)
    return {
        "job_id": job_id,
        "job_uri": storage.JobLayout.under(work_root, job_id).job_uri,
        "source_uris": sources,
        "target_uri": target,
        "output_uri": output,
        "options": parsed.model_dump(mode="json"),
        "prepare_args": prepare_worker_args(sources, target, output, parsed, chunk_wave=chunk_wave),
    }


def _content_id(content_id: Callable[[str], str], uri: str, field: str) -> str:
    try:
        return content_id(uri)
    except InputMissingError as error:
        raise InputMissingError(f"{field}: {error}") from None


class ValidateSwapConfOperator(BaseOperator):
    """Validate the conf and return the job ticket; each key is also its own XCom (``validate.output["job_uri"]``).

    Bad conf fails the task at once (no retries) with a message that names the field.

    :param source_uris: list of source face images (templated; ``"{{ params.source_uris }}"``).
    :param target_uri: the target video (templated).
    :param output_uri: where the output goes (templated).
    :param options: the options object (templated).
    :param work_root: fsspec URI of the job folders; default from the ``[facefusion] work_root`` setting.
    """

    template_fields: Sequence[str] = (
        *BaseOperator.template_fields,
        "source_uris",
        "target_uri",
        "output_uri",
        "options",
        "work_root",
    )

    def __init__(
        self,
        *,
        source_uris: Any,
        target_uri: Any,
        output_uri: Any,
        options: Any = None,
        work_root: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        self.source_uris = source_uris
        self.target_uri = target_uri
        self.output_uri = output_uri
        self.options = options
        self.work_root = work_root

    def ticket(self, key: str) -> str:
        """A template of one ticket field (``job_uri``, ``job_id``, ``output_uri``, ``prepare_args``) for a templated
        field downstream; with ``render_template_as_native_obj`` lists stay lists."""
        return f"{{{{ ti.xcom_pull(task_ids={self.task_id!r}, key={key!r}) }}}}"

    def execute(self, context: Context) -> dict[str, Any]:
        hook = FaceFusionStorageHook()
        settings = load_settings()
        with fail_on_bad_input():
            ticket = validate_conf(
                self.source_uris,
                self.target_uri,
                self.output_uri,
                self.options,
                work_root=self.work_root or settings.work_root,
                content_id=hook.content_id,
                chunk_wave=settings.chunk_wave,
            )
        self.log.info("Job %s in %s", ticket["job_id"], ticket["job_uri"])
        if hook.output_is_current(ticket["output_uri"], ticket["job_id"]):
            self.log.info(
                "%s already holds this job's output: the worker tasks will have nothing to do", ticket["output_uri"]
            )
        return ticket
