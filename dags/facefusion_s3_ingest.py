"""### facefusion_s3_ingest

Starts one swap run per new job found under `input_prefix`, at most once per job. `mode` says what a new file is:

- `videos`: each new video is swapped with the fixed faces `source_uris`; its output keeps its path under `output_prefix`.
- `faces` (the content factory): each new image, or each folder of images of one person, is swapped into every video of
  `target_uris`; outputs are named after the person (and the target when there are several). The target's face
  analysis is computed once and reused by every person's run.
- `manifests`: each line of each new `.jsonl` (a job object) or `.csv` file (columns `source_uris` with `;` between
  images, `target_uri`, `output_uri`, `options` as JSON) is one job; a bad line is reported by its number.

`scan` → `start_swap` (one mapped trigger per job, at most `max_runs_per_scan`) → `report`

A ledger (`ledger_prefix`, by default `.facefusion-ledger/` under `output_prefix`) records every job with an exclusive
write, so each starts at most once, even when scans overlap or are retried. A failed job is reported once and retried
on a later scan up to `max_attempts`; one that failed on bad input is never retried. Runs start in
`facefusion_swap_batch`, whose spans yield GPUs to interactive `facefusion_swap` runs.

Configuration: the Airflow Variable `facefusion_ingest`, a JSON object such as `{"schedule": "*/15 * * * *",
"mode": "faces", "input_prefix": "s3://factory/selfies/", "output_prefix": "s3://factory/out/",
"target_uris": ["s3://factory/standard/action.mp4"], "options": {"face_swapper_blend": 90}}`. Without the Variable the
DAG has no schedule and is paused at creation: nothing runs until it is configured. S3 access: the
`[facefusion] aws_conn_id` connection.

Event-driven, beside the schedule: with `"trigger": {"sqs_queue_url": "https://sqs.<region>.amazonaws.com/<account>/<queue>"}`
in the Variable, the input bucket's `s3:ObjectCreated:*` notifications to that queue start a run within seconds of an
upload (the Asset `facefusion_s3_uploads`, watched on the triggerer), and that run looks only at the objects they name.
The same ledger keeps each job to one run; the scheduled scan catches anything whose message was lost
(deploy/README.md, "Event-driven ingestion").
"""

from __future__ import annotations

from typing import cast

import pendulum
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG
from airflow.sdk.definitions.xcom_arg import PlainXComArg

from facefusion_provider.operators.ingest import (
    CONFIG_FIELDS,
    IngestReportOperator,
    ScanForNewJobsOperator,
    ingest_params,
    ingest_schedule,
    ingest_settings,
    ingest_timetable,
)
from facefusion_provider.operators.ingest_summary import ingest_description, ingest_tags

settings = ingest_settings()

with DAG(
    dag_id="facefusion_s3_ingest",
    schedule=ingest_timetable(settings),
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    is_paused_upon_creation=True,
    max_active_runs=1,  # the ledger keeps overlapping scans correct; one at a time keeps them cheap
    params=ingest_params(settings),
    render_template_as_native_obj=True,
    doc_md=__doc__,
    description=ingest_description(settings, ingest_schedule(settings)),  # configured or not, at a glance
    tags=ingest_tags(settings),
) as dag:
    scan = ScanForNewJobsOperator(
        task_id="scan",
        retries=2,
        **{name: f"{{{{ params.{name} }}}}" for name in CONFIG_FIELDS},
    )
    start_swap = TriggerDagRunOperator.partial(
        task_id="start_swap",
        logical_date=None,
        skip_when_already_exists=True,  # the run id is the job's attempt: a repeated trigger starts nothing
        wait_for_completion=False,  # outcomes are read by the next scan
        map_index_template="{{ task.conf['output_uri'] }}",
        retries=2,
    ).expand_kwargs(scan.output)
    report = IngestReportOperator(task_id="report", report=cast("PlainXComArg", scan.output)["report"])
    scan >> start_swap >> report
    scan >> report  # a scan that started nothing still reports (an empty mapped trigger is skipped)
