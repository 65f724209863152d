"""### facefusion_swap

Swap the face in `source_uris` into every frame of `target_uri`, chunk by chunk, and write `output_uri`.

`validate` → `prepare` → `plan` → `swap_chunk` (one mapped task per chunk) → `merge` → `cleanup`

Conf: `{"source_uris": ["s3://faces/a.jpg"], "target_uri": "s3://in/v.mp4", "output_uri": "s3://out/v.mp4",
"options": {"chunk_size": 64, "face_swapper_blend": 85}}`. Where the workers run (`local` subprocesses or `kubernetes`
pods), the job folders (`work_root`), the chunk pool and retries come from the `[facefusion]` settings.

Resume: clear the failed `swap_chunk` tasks to rerun only them; a new run over the same input and options reuses every
committed chunk, and a run whose output already carries this job's marker does no chunk work at all.
"""

from __future__ import annotations

from airflow.sdk import DAG

from facefusion_provider.operators.backends import swap_chunk_operator, worker_operator
from facefusion_provider.operators.cleanup import CleanupJobOperator
from facefusion_provider.operators.plan import PlanChunksOperator
from facefusion_provider.operators.validate import ValidateSwapConfOperator, swap_params
from facefusion_provider.settings import load_settings

settings = load_settings()

with DAG(
    dag_id="facefusion_swap",
    schedule=None,
    params=swap_params(),
    render_template_as_native_obj=True,
    default_args={
        "retries": settings.retries,
        "retry_delay": settings.retry_delay,
        "retry_exponential_backoff": settings.retry_exponential_backoff,
        "max_retry_delay": settings.max_retry_delay,
    },
    doc_md=__doc__,
    tags=["facefusion"],
) as dag:
    validate = ValidateSwapConfOperator(
        task_id="validate",
        source_uris="{{ params.source_uris }}",
        target_uri="{{ params.target_uri }}",
        output_uri="{{ params.output_uri }}",
        options="{{ params.options }}",
    )
    job_uri = validate.ticket("job_uri")
    prepare = worker_operator(
        "prepare", task_id="prepare", job_uri=job_uri, worker_args=validate.ticket("prepare_args")
    )
    plan = PlanChunksOperator(task_id="plan", job_uri=job_uri)
    swap_chunk = swap_chunk_operator(
        task_id="swap_chunk",
        job_uri=job_uri,
        pool=settings.pool,
        max_active_tis_per_dagrun=settings.max_active_chunks_per_run,
        map_index_template="{{ task.chunk['label'] }}",
    ).expand(chunk=plan.output)
    merge = worker_operator("merge", task_id="merge", job_uri=job_uri)
    cleanup = CleanupJobOperator(
        task_id="cleanup", job_uri=job_uri, job_id=validate.ticket("job_id"), output_uri=validate.ticket("output_uri")
    )
    validate >> prepare >> plan >> swap_chunk >> merge >> cleanup
