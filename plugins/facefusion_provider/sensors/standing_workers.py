"""With ``[facefusion] span_workers = standing``, a span task starts no worker: it waits for the standing workers to
commit its segments, deferred on the triggerer by default (no pool slot, no process). The DAG picks it when it is
built, so the graph shows what runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from facefusion_provider.hooks import run_metrics
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.links.output import OUTPUT_LINKS
from facefusion_provider.operators.commands import worker_call
from facefusion_provider.operators.spans import (
    decided_for_this_try,
    nothing_to_do,
    record_progress,
    span_committed_segments,
)
from facefusion_provider.settings import load_settings
from facefusion_provider.triggers.span_committed import SpanCommittedTrigger
from facefusion_provider.work.layout import WorkLayout, work_root_of
from facefusion_provider.work.records import Refusal

POKE_SECONDS = 30.0  # how often a sensor that does not defer looks (one listing)


class SpanCommittedSensor(BaseSensorOperator):
    """Wait until the standing workers have committed every segment of one span of ``plan``'s list. It fails naming
    the reason when every live standing worker has given up on the work (their models or the target cannot be loaded
    there: at once and without retries when it is the input's fault), naming what to start when no standing worker
    is alive, and when ``timeout`` passes (``[facefusion] span_wait_hours``). A span already committed, or an output
    that already carries this work, succeeds at once. The run's lease is renewed while it waits.

    :param work_uri: the shared work folder, from ``validate``.
    :param output_uri: this run's output, from ``validate``.
    :param output_done: whether ``validate`` found the output done already: nothing to wait for.
    :param target_uri: this run's target, from ``validate``.
    :param run_key: this run's lease key, from ``validate``: renewed while waiting.
    :param run_lease: the lease ``validate`` wrote under ``run_key``: held again as the task starts.
    :param span: one item of ``plan``'s list.
    :param deferrable: wait on the triggerer (default) rather than in a worker slot.
    """

    template_fields: Sequence[str] = (
        *BaseSensorOperator.template_fields,
        "work_uri",
        "output_uri",
        "output_done",
        "target_uri",
        "run_key",
        "run_lease",
        "span",
    )
    ui_color = "#fff3d6"
    operator_extra_links = OUTPUT_LINKS
    command = "swap-span"  # what the standing workers run for it (its output links are a swap-span's)

    def __init__(
        self,
        *,
        work_uri: str,
        output_uri: str,
        target_uri: str,
        run_key: str,
        span: dict[str, Any],
        run_lease: dict[str, Any] | None = None,
        output_done: bool = False,
        deferrable: bool = True,
        timeout: timedelta | float | None = None,
        poke_interval: timedelta | float = POKE_SECONDS,
        **kwargs: Any,
    ) -> None:
        if timeout is None:
            timeout = load_settings().span_wait
        super().__init__(timeout=timeout, poke_interval=poke_interval, **kwargs)
        self.work_uri = work_uri
        self.output_uri = output_uri
        self.output_done = output_done
        self.target_uri = target_uri
        self.run_key = run_key
        self.run_lease = run_lease
        self.span = span
        self.deferrable = deferrable

    def execute(self, context: Context) -> Any:
        call = worker_call(
            "swap-span",
            self.work_uri,
            self.output_uri,
            output_done=self.output_done,
            run_key=self.run_key,
            run_lease=self.run_lease,
            target_uri=self.target_uri,
            span=self.span,
        )
        hook = FaceFusionStorageHook()
        call = decided_for_this_try(hook, call, context)
        committed = span_committed_segments(hook, call)
        reason = nothing_to_do(hook, call, context, committed)
        if reason:
            self.log.info("Nothing to do: %s", reason)
            return None
        first, last = int(self.span["first"]), int(self.span["last"])
        tags = run_metrics.run_tags(context["ti"])
        # KEDA may start the first standing worker on this figure (scaled to zero while nothing waits).
        run_metrics.segments_waiting(sum(1 for i in range(first, last) if i not in committed), tags=tags)
        if not self.deferrable:
            self.log.info("Standing workers work this span ([facefusion] span_workers = standing): waiting")
            return super().execute(context)
        self.log.info("Standing workers work this span ([facefusion] span_workers = standing): waiting, deferred")
        trigger = SpanCommittedTrigger(
            self.work_uri,
            first,
            last,
            run_key=self.run_key,
            renew_seconds=_renew_seconds(),
            timeout_seconds=self.timeout,
            dag_id=tags["dag_id"],
            run_id=tags["run_id"],
        )
        self.defer(trigger=trigger, method_name="execute_complete")
        return None

    def poke(self, context: Context) -> bool:
        """One look, for a sensor that does not defer: the span committed, or every live standing worker refused."""
        hook = FaceFusionStorageHook()
        if self.run_key:
            hook.renew_lease(self.work_uri, self.run_key)
        committed = hook.committed_segments(self.work_uri)
        if all(index in committed for index in range(int(self.span["first"]), int(self.span["last"]))):
            self._committed(context, int(self.span["last"]) - int(self.span["first"]))
            return True
        workers = hook.standing_workers(work_root_of(WorkLayout(self.work_uri)))
        refusal = hook.standing_refusal(self.work_uri, workers)
        if refusal is not None:
            raise refused(refusal)
        return False

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> None:
        status = event.get("status")
        if status == "refused":
            raise refused(Refusal.model_validate(event["refusal"]))
        if status == "timeout":
            raise AirflowSensorTimeout(str(event["message"]))  # not retried: the wait's bound is the user's
        if status != "committed":
            raise AirflowException(str(event.get("message") or event))  # retried: the workers may be starting
        self._committed(context, int(event["segments"]))

    def _committed(self, context: Context, segments: int) -> None:
        run_metrics.segments_waiting(0, tags=run_metrics.run_tags(context["ti"]))
        self.log.info("Span %s: all %d segments committed by the standing workers", self.span["index"], segments)
        record_progress(context, {"segments_committed": segments, "segments_total": segments})


def refused(refusal: Refusal) -> AirflowException:
    """The span's failure when every live standing worker gave up on its work: not retried when it is the input's
    fault (a missing model, an unreadable target), retried otherwise."""
    message = (
        f"every live standing worker ({refusal.worker}) gave up on this run's work: {refusal.message} "
        f"[{refusal.failure_class}]"
    )
    return AirflowException(message) if refusal.retryable else AirflowFailException(message)


def _renew_seconds() -> float:
    """The run lease's renewal while a span waits: a quarter of its TTL, as every lease holder renews."""
    return load_settings().run_lease.total_seconds() / 4
