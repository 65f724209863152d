"""A conf holding a number no task can receive is refused with one line naming the field, before any task starts.

Airflow hands a task its run's conf through msgpack, which holds integers from -2**63 to 2**64-1: a larger one
(``"segment_size": 10**30``, or one nested under ``options`` where no Param's maximum applies) makes every task of the
run fail before it starts, with an empty log. So ``validate`` could never name the field. Two guards, one rule
(``out_of_range_field``): an API middleware answers the trigger (``POST /api/v2/dags/<dag>/dagRuns`` of this
provider's DAGs) with 400 and one line, and a scheduler listener fails a run triggered another way (the CLI) as it
starts, with a note that names the field. Every option has its own, much smaller, maximum, which ``validate`` names.
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


def out_of_range_field(value: Any, path: str = "") -> str | None:
    """``field: problem`` for the first integer outside int64 in ``value`` (a conf), or None."""
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


SWAP_DAG_IDS = frozenset({"facefusion_swap", "facefusion_swap_batch"})
REQUIRED_INPUTS = ("source_uris", "target_uri", "output_uri")  # the swap form's fields without a default


def empty_input_field(conf: dict[str, Any]) -> str | None:
    """``Target video (target_uri): required: fill it in`` for the first run input a swap conf leaves empty: the form
    lets a user trigger with one untouched (it shows no error before the user acts), the API would accept it."""
    from facefusion_provider.operators.params import field_label

    for name in REQUIRED_INPUTS:
        if name in conf and conf[name] in (None, "", []):  # left out: validate names it (a REST caller's conf)
            return f"{field_label(name)}: required: fill it in"
    return None


def trigger_problem(body: bytes, dag_id: str = "") -> str | None:
    """The out-of-range field (or, for a swap DAG, the empty input) of a trigger request's ``conf``, or None (also for
    a body that is not JSON, or without a conf: the API answers that itself, or validate does)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    conf = payload.get("conf") if isinstance(payload, dict) else None
    if not isinstance(conf, dict):
        return None
    problem = out_of_range_field(conf)
    if problem is None and dag_id in SWAP_DAG_IDS:
        problem = empty_input_field(conf)
    return problem


class RefuseOutOfRangeConf:
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
    with a note naming the field, when its conf holds a number no task could receive."""
    if msg != "started" or getattr(dag_run, "dag_id", None) not in DAG_IDS:
        return
    problem = out_of_range_field(dag_run.conf or {})
    if problem is None:
        return
    from airflow.utils.state import DagRunState

    message = f"Not started: {problem}"
    log.error("%s.%s: %s", dag_run.dag_id, dag_run.run_id, message)
    dag_run.set_state(DagRunState.FAILED)
    dag_run.note = message
