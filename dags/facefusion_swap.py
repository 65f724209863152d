"""### facefusion_swap

Puts the face from your pictures (**Source faces**) into a video (**Target video**) and writes the result to
**Output video**. Fill those three fields and press Trigger; every other field has a sensible default.

**Where to look while it runs**: the run's **Output** tab says how many segments of the video are saved, and, once
the run has finished, shows a preview (original frames above, swapped frames below) and a link that downloads the
video. The same links are under Extra Links on the `merge` task. A later run that writes the same Output video
replaces it: this run's tab then says by which run, and its links serve nothing.

**If it fails**: the run's note (and the Output tab) says why, naming the field to fix (for example `Output video
(output_uri): ...`). Fix it and trigger again. A `swap_span` task that failed on the way can be cleared alone: it
starts again at its first segment not saved, and nothing already saved is redone.

Steps: `validate` (checks the fields) → `prepare` (reads the video) → `plan` → `swap_span` (the work, segment by
segment, each task labelled by its frame range) → `merge` (joins the segments, keeps the sound) → `cleanup`.

For the administrator: where the work runs, where it is stored, the GPU pool and retries are `[facefusion]` settings
(the provider's README). Runs over the same video, faces and picture options share their work.
"""

from __future__ import annotations

from typing import Any, cast

from airflow.sdk import DAG
from airflow.sdk.definitions.xcom_arg import PlainXComArg

from facefusion_provider.operators.backends import swap_span_operator, worker_operator
from facefusion_provider.operators.cleanup import CleanupWorkOperator, KeepWorkForRetry
from facefusion_provider.operators.params import swap_params
from facefusion_provider.operators.plan import PlanSpansOperator
from facefusion_provider.operators.validate import ValidateSwapConfOperator
from facefusion_provider.sensors.standing_workers import SpanCommittedSensor
from facefusion_provider.settings import load_settings

settings = load_settings()
BATCH_DOC = """
This is the batch variant that scheduled ingestion triggers: the same tasks, its spans at a lower priority on the same
GPU pool (an interactive run's span gets the next free GPU first) and at most `[facefusion] batch_max_active_spans` of
them at once when set (GPUs an interactive run can always find).
"""
INTERACTIVE_PRIORITY, BATCH_PRIORITY = 10, 1  # a free GPU slot goes to an interactive span before a batch one
# Standing workers split the work themselves: one waiting span task (one trigger) a run is enough.
standing = settings.span_workers == "standing"


def swap_dag(dag_id: str, *, priority: int, max_active_spans: int | None, doc: str) -> DAG:
    """The swap DAG; the batch variant differs only in its spans' priority and cap on the GPU pool."""
    with DAG(
        dag_id=dag_id,
        schedule=None,
        params=swap_params(),
        render_template_as_native_obj=True,
        default_args={
            "retries": settings.retries,
            "retry_delay": settings.retry_delay,
            "retry_exponential_backoff": settings.retry_exponential_backoff,
            "max_retry_delay": settings.max_retry_delay,
        },
        doc_md=doc,
        tags=["facefusion"],
    ) as dag:
        validate = ValidateSwapConfOperator(task_id="validate", run_priority=priority)
        ticket = cast("PlainXComArg", validate.output)  # validate pushes each key of its dict as its own XCom
        run: dict[str, Any] = {
            "work_uri": ticket["work_uri"],
            "output_uri": ticket["output_uri"],
            "run_key": ticket["run_key"],
        }
        # A task after validate that fails keeps the run's work for a clear (its lease).
        keep_work = KeepWorkForRetry(work_uri=ticket["work_uri"], run_key=ticket["run_key"])
        # Validate's finding and the lease it wrote (each task holds it again as it starts), passed on to every worker task
        decided = {**run, "output_done": ticket["output_done"], "run_lease": ticket["run_lease"]}
        prepare = worker_operator(
            "prepare", task_id="prepare", worker_args=ticket["prepare_args"], on_failure_callback=keep_work, **decided
        )
        plan = PlanSpansOperator(
            task_id="plan",
            work_uri=run["work_uri"],
            output_done=decided["output_done"],
            wave=1 if standing else None,
            on_failure_callback=keep_work,
        )
        span_task = {
            "task_id": "swap_span",
            "target_uri": ticket["target_uri"],
            "pool": settings.pool,
            "priority_weight": priority,
            "weight_rule": "absolute",
            "max_active_tis_per_dagrun": settings.max_active_spans_per_run,
            "max_active_tis_per_dag": max_active_spans,
            "map_index_template": "{{ task.span['label'] }}",
            "on_failure_callback": keep_work,
            **decided,
        }
        # With standing workers a span task is a deferred wait for them, shown as such in the graph.
        span_tasks = SpanCommittedSensor.partial(**span_task) if standing else swap_span_operator(**span_task)
        swap_span = span_tasks.expand(span=plan.output)
        merge = worker_operator(
            "merge", task_id="merge", worker_args=ticket["merge_args"], on_failure_callback=keep_work, **decided
        )
        cleanup = CleanupWorkOperator(task_id="cleanup", on_failure_callback=keep_work, **run)
        validate >> prepare >> plan >> swap_span >> merge >> cleanup
    return dag


dag = swap_dag("facefusion_swap", priority=INTERACTIVE_PRIORITY, max_active_spans=None, doc=__doc__ or "")
batch_dag = swap_dag(
    "facefusion_swap_batch",
    priority=BATCH_PRIORITY,
    max_active_spans=settings.batch_max_active_spans or None,
    doc=(__doc__ or "").replace("### facefusion_swap", "### facefusion_swap_batch", 1) + BATCH_DOC,
)
