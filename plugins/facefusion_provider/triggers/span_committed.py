"""The trigger a swap_span task waits on while standing workers work its span (``[facefusion] span_workers``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from facefusion_provider.hooks import run_metrics
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.work import liveness
from facefusion_provider.work.layout import WorkLayout, work_root_of
from facefusion_provider.work.liveness import DEFAULT_TTL_SECONDS, LeaseKind, renew_every

POLL_SECONDS = 10.0  # one HEAD a poll while nothing changes: about $0.10 a month per waiting run on S3 Standard
NO_WORKER_SECONDS = 600.0  # a span waits this long for a live standing worker (KEDA may be scaling up from zero)
WORKERS_EVERY_SECONDS = 300.0  # how often it lists the standing workers' leases (a LIST costs 12 GETs)
RENEW_SECONDS = renew_every(DEFAULT_TTL_SECONDS[LeaseKind.RUN])  # the sensor passes a quarter of the run's own TTL
REFUSALS_EVERY_SECONDS = 60.0  # how often it looks whether every live standing worker has given up (one LIST)
LISTING_EVERY_SECONDS = 60.0  # how often a poll lists the segments instead of HEADs (a retired commit's next marker)
# How often the gauge of waiting segments is counted (one LIST): within KEDA's query window (last_over_time[2m]).
WAITING_EVERY_SECONDS = 60.0


class SpanCommittedTrigger(BaseTrigger):
    """Fires ``{"status": "committed"}`` once segments ``[first, last)`` of the work are committed;
    ``{"status": "refused", "refusal": ...}`` once every live standing worker has given up on the work (its reason);
    ``{"status": "no_standing_worker"}`` when no standing worker has had a live lease for ``no_worker_seconds``;
    ``{"status": "timeout"}`` after ``timeout_seconds`` (None: never).

    Cheap while it waits (docs/protocol.md, "The change signal"): each poll asks only whether the first segment not yet
    seen committed is committed now (one HEAD of its marker, then the next ones while they are), and one listing
    confirms the end (a commit a merge retired as damaged is not committed: from then on each poll lists), as does
    one poll every ``LISTING_EVERY_SECONDS`` (a segment committed again after a retirement has no first marker); the
    standing workers' leases are listed every ``WORKERS_EVERY_SECONDS``. It renews the run's lease (``run_key``) every
    ``renew_seconds``, so the work stays held while the run waits behind a long queue. Given the run's ``dag_id`` and
    ``run_id`` it sets the gauge of the run's waiting segments (``metric_names.SEGMENTS_WAITING``, what KEDA scales the
    standing workers on) every ``WAITING_EVERY_SECONDS``, and to 0 when it ends, however it ends."""

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
        timeout_seconds: float | None = None,
        dag_id: str = "",
        run_id: str = "",
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.work_uri, self.first, self.last = work_uri, first, last
        self.poll_seconds, self.no_worker_seconds = poll_seconds, no_worker_seconds
        self.run_key, self.renew_seconds, self.timeout_seconds = run_key, renew_seconds, timeout_seconds
        self.dag_id, self.run_id = dag_id, run_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "work_uri": self.work_uri,
            "first": self.first,
            "last": self.last,
            "poll_seconds": self.poll_seconds,
            "no_worker_seconds": self.no_worker_seconds,
            "run_key": self.run_key,
            "renew_seconds": self.renew_seconds,
            "timeout_seconds": self.timeout_seconds,
            "dag_id": self.dag_id,
            "run_id": self.run_id,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            async for event in self._wait():
                yield event
        finally:
            if self.dag_id:  # committed, failed, cancelled: this run has nothing waiting for a worker any more
                run_metrics.segments_waiting(0, tags=self._metric_tags())

    def _metric_tags(self) -> dict[str, str]:
        return {"dag_id": self.dag_id, "run_id": self.run_id}

    async def _report_waiting(self, hook: FaceFusionStorageHook, next_left: int) -> None:
        committed = await asyncio.to_thread(hook.committed_segments, self.work_uri)
        waiting = sum(1 for index in range(next_left, self.last) if index not in committed)
        run_metrics.segments_waiting(waiting, tags=self._metric_tags())

    async def _next_uncommitted(
        self, hook: FaceFusionStorageHook, layout: WorkLayout, start: int, *, listing: bool
    ) -> int:
        """The first segment from ``start`` not committed: by one HEAD per marker of the first commits, or by one
        listing of the current ones (a merge retires a damaged commit, and the segment's next marker is waited for)."""
        if listing:
            committed = await asyncio.to_thread(hook.committed_segments, self.work_uri)
            return next((index for index in range(self.first, self.last) if index not in committed), self.last)
        while start < self.last and await asyncio.to_thread(hook.exists, layout.segment_marker(start)):
            start += 1
        return start

    async def _wait(self) -> AsyncIterator[TriggerEvent]:
        hook = FaceFusionStorageHook()
        layout = WorkLayout(self.work_uri)
        work_root = work_root_of(layout)
        clock = liveness.clock  # its waits on the process clock: the simulation runs this loop on its own time
        alone_since: float | None = None
        began = renewed = workers_seen = refusals_seen = clock.monotonic()
        waiting_counted = -WAITING_EVERY_SECONDS
        next_left = self.first  # segments before it were seen committed: a marker is never removed while we wait
        listing = False  # once the HEADs saw every marker, each poll lists the segments instead
        listed = clock.monotonic()  # and one poll a minute lists them anyway
        # Storage calls block: they run in a thread, never on the triggerer's event loop.
        live_workers = await asyncio.to_thread(hook.standing_workers, work_root)
        if not live_workers:
            alone_since = clock.monotonic()
        while True:
            if self.run_key and clock.monotonic() - renewed >= self.renew_seconds:
                await asyncio.to_thread(hook.renew_lease, self.work_uri, self.run_key)
                renewed = clock.monotonic()
            listing_now = listing or clock.monotonic() - listed >= LISTING_EVERY_SECONDS
            if listing_now:  # a segment's first marker may never come: it is committed in a later incarnation
                listed = clock.monotonic()
            next_left = await self._next_uncommitted(hook, layout, next_left, listing=listing_now)
            if next_left >= self.last and not listing_now:
                listing = True  # HEADs see first commits: a listing says which are current (a retired one is not)
                next_left = await self._next_uncommitted(hook, layout, self.first, listing=listing)
            if next_left >= self.last:
                yield _event({"status": "committed", "segments": self.last - self.first})
                return
            if self.dag_id and clock.monotonic() - waiting_counted >= WAITING_EVERY_SECONDS:
                waiting_counted = clock.monotonic()
                await self._report_waiting(hook, next_left)
            if clock.monotonic() - workers_seen >= min(WORKERS_EVERY_SECONDS, self.no_worker_seconds / 2):
                workers_seen = clock.monotonic()
                live_workers = await asyncio.to_thread(hook.standing_workers, work_root)
                if live_workers:
                    alone_since = None
                elif alone_since is None:
                    alone_since = clock.monotonic()
            if live_workers and clock.monotonic() - refusals_seen >= REFUSALS_EVERY_SECONDS:
                refusals_seen = clock.monotonic()
                refusal = await asyncio.to_thread(hook.standing_refusal, self.work_uri, live_workers)
                if refusal is not None:  # the workers seen may have gone meanwhile: ask about the live ones
                    live_workers = await asyncio.to_thread(hook.standing_workers, work_root)
                    refusal = await asyncio.to_thread(hook.standing_refusal, self.work_uri, live_workers)
                if refusal is not None:
                    yield _event({"status": "refused", "refusal": refusal.model_dump(mode="json")})
                    return
            if self.timeout_seconds is not None and clock.monotonic() - began >= self.timeout_seconds:
                left = self.last - next_left
                message = (
                    f"waited {(clock.monotonic() - began) / 3600:.2f} h ([facefusion] span_wait_hours) for the standing "
                    f"workers; at least {left} of the span's {self.last - self.first} segments are not committed"
                )
                yield _event({"status": "timeout", "message": message, "left": left})
                return
            if alone_since is not None and clock.monotonic() - alone_since >= self.no_worker_seconds:
                left = self.last - next_left
                message = (
                    f"span_workers = standing, but no standing worker (facefusion-worker serve --work-root "
                    f"{work_root}) has been alive for {self.no_worker_seconds:.0f} s; at least {left} of the span's "
                    f"{self.last - self.first} segments are not committed. Start the standing workers "
                    "(deploy/chart, standingWorkers), or set [facefusion] span_workers = task"
                )
                yield _event({"status": "no_standing_worker", "message": message, "left": left})
                return
            await asyncio.sleep(self.poll_seconds)


def _event(payload: dict[str, Any]) -> TriggerEvent:
    return TriggerEvent(payload)  # type: ignore[no-untyped-call]  # Airflow's TriggerEvent is not annotated
