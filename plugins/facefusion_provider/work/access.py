"""What every worker command shares: options, the run's URIs checked against the worker's own allow-lists, the
shared ``work.json``, and local copies of remote sources."""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidWorkError
from facefusion_provider.options import Options, parse_options
from facefusion_provider.storage.scratch import cache_folder, scratch_folder
from facefusion_provider.work import leases
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.records import WORK_FORMAT_VERSION, WorkSpec
from facefusion_provider.work.run_inputs import CLI_FIELDS, RunUris, run_uris


def resolve_options(options: Options | None, values: dict[str, Any]) -> Options:
    """``options`` with ``values`` laid over it; every value is validated with a message naming the option."""
    if options is None and not values:
        return Options()
    base = options.model_dump() if options is not None else {}
    return parse_options({**base, **values})


def checked_uris(sources: Sequence[str] | str, target: str, output: str | None) -> RunUris:
    """The CLI's paths and URIs as normalised URIs (relative paths resolve against the working directory), inside the
    allow-lists the operator handed this worker, the inputs existing."""
    uris = run_uris(
        [sources] if isinstance(sources, str) else list(sources),
        target,
        output,
        fields=CLI_FIELDS,
        relative=True,
        allowed_inputs=storage.allowed_prefixes("input"),
        allowed_outputs=storage.allowed_prefixes("output"),
    )
    for uri, role in [(uris.target_uri, "target"), *((source, "source") for source in uris.source_uris)]:
        if not storage.exists(uri):
            raise InputMissingError(f"{role}: {uri} does not exist")
    return uris


def work_layout(work_uri: str) -> WorkLayout:
    return WorkLayout(storage.normalize_uri(work_uri, field="work_uri"))


@contextlib.contextmanager
def run_held(work_uri: str, run_key: str) -> Iterator[Callable[[], None] | None]:
    """While a worker command of an Airflow run (``run_key``) works, renew its run's lease from a thread
    (docs/protocol.md); yields the guard that stops the worker once the lease was found removed (``leases.renewing``).
    Outside a run (no key), nothing."""
    if not run_key:
        yield None
        return

    with leases.renewing(work_layout(work_uri), run_key) as held:
        yield held.check


def load_work(layout: WorkLayout) -> WorkSpec:
    """``work.json`` of the work folder; InvalidWorkError when it is missing, from another format, or unreadable."""
    uri = layout.work_json
    if not storage.exists(uri):
        raise InvalidWorkError(f"{uri}: no work.json; run prepare for this work first")
    data = storage.read_json(uri)
    if not isinstance(data, dict) or data.get("format_version") != WORK_FORMAT_VERSION:
        found = data.get("format_version") if isinstance(data, dict) else None
        raise InvalidWorkError(
            f"{uri}: work format {found}, this worker reads format {WORK_FORMAT_VERSION}; prepare it again"
        )
    try:
        return WorkSpec.model_validate(data)
    except ValueError as error:
        raise InvalidWorkError(f"{uri}: not a valid work.json ({error})") from None


@contextlib.contextmanager
def local_copies(uris: Sequence[str]) -> Iterator[list[str]]:
    """Local paths of ``uris``: the files themselves where local, else downloads into a temporary folder."""
    with scratch_folder("sources-") as folder:
        paths = []
        for number, uri in enumerate(uris):
            path = storage.local_path(uri)
            if path is None:
                path = os.path.join(folder, f"{number}-{posixpath.basename(urlparse(uri).path)}")
                storage.get_file(uri, path)
            paths.append(path)
        yield paths


def default_work_root() -> str:
    return cache_folder()
