"""The trigger a swap_span task waits on while standing workers work its span (``[facefusion] span_workers``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.job.layout import WorkLayout, work_root_of

POLL_SECONDS = 5.0
NO_WORKER_SECONDS = 120.0  # a span waits this long for a standing worker to appear before its task fails
RENEW_SECONDS = 600.0  # how often the run's lease is rewritten: standing workers help runs renewed within the hour


class SpanCommittedTrigger(BaseTrigger):
    """Fires ``{"status": "committed"}`` once segments ``[first, last)`` of the work are committed, or
    ``{"status": "no_standing_worker"}`` when no standing worker has had a live heartbeat for ``no_worker_seconds``
    (one listing of the segments and one of the workers per poll). While it waits it renews the run's lease
    (``run_key``), so standing workers keep taking a run that waits behind a long queue."""

    def __init__(
        self,
        work_uri: str,
        first: int,
        last: int,
        *,
        poll_seconds: float = POLL_SECONDS,
        no_worker_seconds: float = NO_WORKER_SECONDS,
        run_key: str = "",
        renew_seconds: float = RENEW_SECONDS,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.work_uri, self.first, self.last = work_uri, first, last
        self.poll_seconds, self.no_worker_seconds = poll_seconds, no_worker_seconds
        self.run_key, self.renew_seconds = run_key, renew_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "work_uri": self.work_uri,
            "first": self.first,
            "last": self.last,
            "poll_seconds": self.poll_seconds,
            "no_worker_seconds": self.no_worker_seconds,
            "run_key": self.run_key,
            "renew_seconds": self.renew_seconds,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = FaceFusionStorageHook()
        work_root = work_root_of(WorkLayout(self.work_uri))
        loop = asyncio.get_running_loop()
        alone_since: float | None = None
        renewed = loop.time()
        while True:
            if self.run_key and loop.time() - renewed >= self.renew_seconds:
                await asyncio.to_thread(hook.renew_lease, self.work_uri, self.run_key)
                renewed = loop.time()
            # Storage calls block: they run in a thread, never on the triggerer's event loop.
            committed = await asyncio.to_thread(hook.committed_segments, self.work_uri)
            left = [index for index in range(self.first, self.last) if index not in committed]
            if not left:
                yield _event({"status": "committed", "segments": self.last - self.first})
                return
            if await asyncio.to_thread(hook.standing_workers, work_root):
                alone_since = None
            elif alone_since is None:
                alone_since = loop.time()
            elif loop.time() - alone_since >= self.no_worker_seconds:
                message = (
                    f"span_workers = standing, but no standing worker (facefusion-worker serve --work-root "
                    f"{work_root}) has been alive for {self.no_worker_seconds:.0f} s; {len(left)} of the span's "
                    f"{self.last - self.first} segments are not committed. Start the standing workers "
                    "(deploy/standing-workers.yaml), or set [facefusion] span_workers = task"
                )
                yield _event({"status": "no_standing_worker", "message": message, "left": len(left)})
                return
            await asyncio.sleep(self.poll_seconds)


def _event(payload: dict[str, Any]) -> TriggerEvent:
    return TriggerEvent(payload)  # type: ignore[no-untyped-call]  # Airflow's TriggerEvent is not annotated
