"""Run a coroutine to its end on a fresh event loop in a thread of its own: a test before it in the same process may
have left an event loop marked running in the main thread (asyncio.run would refuse)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

Result = TypeVar("Result")


def run_async(coroutine: Coroutine[Any, Any, Result]) -> Result:
    outcome: dict[str, Any] = {}

    def main() -> None:
        try:
            outcome["result"] = asyncio.run(coroutine)
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=main, name="fresh-event-loop")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]  # type: ignore[no-any-return]
