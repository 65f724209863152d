"""Triggering one of this provider's DAGs with a bad param value answers one line that names the field.

Airflow checks a run's params against each Param's JSON schema in the API server and answers 400 with
``"Invalid input for param face_swapper_blend: 150 is greater than the maximum of 100"`` followed by jsonschema's own
report: the param's whole schema and the value again, over a dozen lines that the trigger form shows as they are. This
ASGI middleware (a plugin's ``fastapi_root_middlewares``) keeps that first line, the field named by its form title and
its key (``Face swapper blend (face_swapper_blend): 150 is greater than the maximum of 100``), for ``POST
/api/v2/dags/<dag>/dagRuns`` of the DAGs in ``DAG_IDS``, and nothing else: other DAGs, other requests and every other
status pass through untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

DAG_IDS = frozenset({"facefusion_swap", "facefusion_swap_batch", "facefusion_s3_ingest"})
PARAM_ERROR_PREFIX = "Invalid input for param "
_TRIGGER_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")


def one_line_detail(body: bytes) -> bytes | None:
    """The 400 body with its param error cut to the first line; None when it is not such an error."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    detail = payload.get("detail") if isinstance(payload, dict) else None
    if not isinstance(detail, str) or not detail.startswith(PARAM_ERROR_PREFIX) or "\n" not in detail:
        return None
    return json.dumps({**payload, "detail": titled_param_error(detail.split("\n", 1)[0].strip())}).encode()


_EMPTY_VALUE = re.compile(r"^(''|\[\]) (is too short|should be non-empty)$")


def titled_param_error(line: str) -> str:
    """``Invalid input for param face_swapper_blend: 150 is ...`` as ``Face swapper blend (face_swapper_blend): 150
    is ...``: the field as the form shows it, and its key; an empty required field says so."""
    from facefusion_provider.operators.params import field_label

    key, _, problem = line.removeprefix(PARAM_ERROR_PREFIX).partition(": ")
    if _EMPTY_VALUE.match(problem):
        problem = "required: fill it in"
    return f"{field_label(key)}: {problem}"


def is_trigger_of_ours(scope: Scope) -> bool:
    if scope.get("type") != "http" or scope.get("method") != "POST":
        return False
    match = _TRIGGER_PATH.search(str(scope.get("path", "")))
    return match is not None and match.group("dag_id") in DAG_IDS


class OneLineParamErrors:
    """Pure ASGI (no response buffering but for the 400s it rewrites)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_trigger_of_ours(scope):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # a 400's start and body parts, until the body is complete

        async def send_one_line(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 400 and not _encoded(message):
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message.get("more_body"):
                return
            start, parts = held[0], held[1:]
            body = b"".join(part.get("body", b"") for part in parts)
            shortened = one_line_detail(body)
            if shortened is None:
                for part in held:
                    await send(part)
                return
            headers = [(key, value) for key, value in start["headers"] if key.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(shortened)).encode())]})
            await send({"type": "http.response.body", "body": shortened})

        await self.app(scope, receive, send_one_line)


def _encoded(start: Message) -> bool:
    return any(key.lower() == b"content-encoding" for key, _ in start.get("headers", []))
