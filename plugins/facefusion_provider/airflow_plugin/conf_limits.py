"""A trigger whose conf no task could use is refused with one line naming the field, before a run exists.

Three guards, one set of rules:
- A conf the API cannot hand on: a body that is not JSON, nested deeper than ``MAX_CONF_DEPTH`` (Python's own parser
  gives up near 1,000 levels, with a ``RecursionError`` the API would answer with 500), or holding an integer beyond
  int64: Airflow hands a task its run's conf through msgpack, so ``"segment_size": 10**30`` (or one nested under
  ``options``, where no Param's maximum applies) would make every task fail before it starts, with an empty log.
- For a swap DAG, what ``validate`` would refuse on the conf alone: the Params' own check (as Airflow's API makes
  it), then ``work.inputs.check_conf``, the one conf check ``validate`` makes (unknown keys, option types and ranges,
  URI lengths and forms, the output's container). What needs storage or the settings (an input that does not exist, an
  unwritable output, the allow-lists, the work root) stays ``validate``'s.

An API middleware answers the trigger (``POST /api/v2/dags/<dag>/dagRuns`` of this provider's DAGs) with 400 and one
line; a scheduler listener fails a run triggered another way (the CLI) as it starts, with a note that names the field,
when its conf is one no task can receive (too deep, a number beyond int64).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from facefusion_provider.airflow_plugin.trigger_errors import DAG_IDS, is_trigger_of_ours

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_CONF_DEPTH = 32  # levels of objects and lists; this provider's confs nest three at most


def too_deep_field(value: Any, limit: int = MAX_CONF_DEPTH) -> str | None:
    """``field: problem`` for the first path in ``value`` (a conf) nested deeper than ``limit``, or None. Iterative:
    the conf may be as deep as the parser allows."""
    pending: list[tuple[Any, str, int]] = [(value, "", 0)]
    while pending:
        item, path, depth = pending.pop()
        if not isinstance(item, (dict, list)):
            continue
        if depth == limit:
            return f"{path or 'conf'}: nested more than {limit} levels deep; no field of this DAG nests more than 3"
        for key, child in item.items() if isinstance(item, dict) else enumerate(item):
            child_path = f"{path}[{key}]" if isinstance(item, list) else f"{path}.{key}" if path else str(key)
            pending.append((child, child_path, depth + 1))
    return None


def out_of_range_field(value: Any, path: str = "") -> str | None:
    """``field: problem`` for the first integer outside int64 in ``value`` (a conf, no deeper than
    ``MAX_CONF_DEPTH``), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        digits = len(str(abs(value)))
        return f"{path or 'conf'}: a {digits}-digit number is out of range; no option takes more than {INT64_MAX}"
    if isinstance(value, dict):
        items: list[tuple[str, Any]] = [(f"{path}.{key}" if path else str(key), item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    else:
        return None
    for item_path, item in items:
        problem = out_of_range_field(item, item_path)
        if problem is not None:
            return problem
    return None


def unreceivable_field(conf: dict[str, Any]) -> str | None:
    """Why no task could receive ``conf`` (too deep, a number beyond int64), naming the field; None if it can."""
    return too_deep_field(conf) or out_of_range_field(conf)


SWAP_DAG_IDS = frozenset({"facefusion_swap", "facefusion_swap_batch"})
REQUIRED_INPUTS = ("source_uris", "target_uri", "output_uri")  # the swap form's fields without a default


def empty_input_field(conf: dict[str, Any]) -> str | None:
    """``Target video (target_uri): required: fill it in`` for the first run input a swap conf leaves empty: the form
    lets a user trigger with one untouched (it shows no error before the user acts), the API would accept it."""
    from facefusion_provider.operators.params import field_label

    for name in REQUIRED_INPUTS:
        if name in conf and conf[name] in (None, "", []):  # left out: check_conf names it
            return f"{field_label(name)}: required: fill it in"
    return None


def swap_conf_problem(conf: dict[str, Any]) -> str | None:
    """What ``validate`` would refuse in a swap DAG's ``conf`` without storage or settings, in one line naming the
    field by its form title and key; None when only ``validate`` can tell."""
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from facefusion_provider.airflow_plugin.trigger_errors import titled_param_error
    from facefusion_provider.exceptions import NonRetryableError
    from facefusion_provider.operators.params import swap_params, titled_reason
    from facefusion_provider.work.run_inputs import check_conf

    empty = empty_input_field(conf)
    if empty is not None:
        return empty
    try:
        params = ParamsDict(swap_params())  # the task's params: the DAG's, with the conf laid over them
        params.update(conf)
        check_conf(params.validate(), conf)
    except ParamValidationError as error:
        return titled_param_error(str(error).split("\n", 1)[0].strip())
    except NonRetryableError as error:
        return titled_reason(str(error))
    except Exception:  # a check that breaks must not block a trigger: validate still judges the run
        log.exception("the conf check of a trigger failed; the run is left to validate")
    return None


def trigger_problem(body: bytes, dag_id: str = "") -> str | None:
    """Why a trigger request of ``dag_id`` must be refused (a body or conf no task could receive, or for a swap DAG
    what validate would refuse on the conf alone), in one line naming the field; None to let it through."""
    try:
        payload = json.loads(body)
    except RecursionError:
        return f"request body: nested too deeply to read; no field of this DAG nests more than {MAX_CONF_DEPTH} levels"
    except ValueError as error:
        return f"request body: not JSON that can be read: {error}"
    if not isinstance(payload, dict):
        return f"request body: expected a JSON object (with a conf), got {type(payload).__name__}"
    conf = payload.get("conf")
    if conf is None:
        return swap_conf_problem({}) if dag_id in SWAP_DAG_IDS else None
    if not isinstance(conf, dict):
        return f"conf: expected an object of field names and values, got {type(conf).__name__}"
    problem = unreceivable_field(conf)
    if problem is None and dag_id in SWAP_DAG_IDS:
        problem = swap_conf_problem(conf)
    return problem


class RefuseBadConf:
    """Pure ASGI: a trigger of this provider's DAGs is read whole, checked, then replayed to the API unchanged."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_trigger_of_ours(scope):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        dag_id = str(scope.get("path", "")).rstrip("/").split("/")[-2]  # .../dags/<dag_id>/dagRuns
        problem = trigger_problem(b"".join(item.get("body", b"") for item in messages), dag_id)
        if problem is not None:
            body = json.dumps({"detail": problem}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        pending = list(messages)

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)


def on_dag_run_running(dag_run: Any, msg: str) -> None:
    """As the scheduler starts a run of this provider's DAGs (a CLI trigger passes no middleware): fail it at once,
    with a note naming the field, when its conf is one no task could receive."""
    if msg != "started" or getattr(dag_run, "dag_id", None) not in DAG_IDS:
        return
    problem = unreceivable_field(dag_run.conf or {})
    if problem is None:
        return
    from airflow.utils.state import DagRunState

    message = f"Not started: {problem}"
    log.error("%s.%s: %s", dag_run.dag_id, dag_run.run_id, message)
    dag_run.set_state(DagRunState.FAILED)
    dag_run.note = message
