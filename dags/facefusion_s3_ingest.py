"""### facefusion_s3_ingest

Every new video under `input_prefix` gets one `facefusion_swap` run, with the output at the same path under
`output_prefix`, the fixed source face `source_uris` and `options`.

`scan` → `start_swap` (one mapped trigger per video, at most `max_videos_per_run`) → `report`

A ledger (`ledger_prefix`, by default `.facefusion-ledger/` under `output_prefix`) records every video by key and
ETag with an exclusive write, so each video is processed at most once, even when ingestion runs overlap or are
retried. A video whose swap run failed is reported by key (the first ingestion run that sees the failure fails, naming
it) and retried on a later run, up to `max_attempts`. A re-uploaded video (new ETag) is a new video.

Schedule and defaults: the Airflow Variable `facefusion_ingest`, a JSON object such as
`{"schedule": "*/15 * * * *", "input_prefix": "s3://videos/incoming/", "output_prefix": "s3://videos/swapped/",
"source_uris": ["s3://videos/faces/me.jpg"], "options": {"face_swapper_blend": 90}}`; `"schedule": "none"` leaves
only manual triggers, whose conf overrides any param. S3 access: the `[facefusion] aws_conn_id` connection.
"""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG

from facefusion_provider.operators.ingest import (
    CONFIG_FIELDS,
    SWAP_DAG_ID,
    IngestReportOperator,
    ScanForNewVideosOperator,
    ingest_params,
    ingest_schedule,
    ingest_settings,
)

settings = ingest_settings()

with DAG(
    dag_id="facefusion_s3_ingest",
    schedule=ingest_schedule(settings),
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # the ledger keeps overlapping runs correct; one at a time keeps them cheap
    params=ingest_params(settings),
    render_template_as_native_obj=True,
    doc_md=__doc__,
    tags=["facefusion"],
) as dag:
    scan = ScanForNewVideosOperator(
        task_id="scan",
        retries=2,
        **{name: f"{{{{ params.{name} }}}}" for name in CONFIG_FIELDS},
    )
    start_swap = TriggerDagRunOperator.partial(
        task_id="start_swap",
        trigger_dag_id=SWAP_DAG_ID,
        logical_date=None,
        skip_when_already_exists=True,  # the run id is the video's attempt: a repeated trigger starts nothing
        wait_for_completion=False,  # outcomes are read by the next ingestion run
        map_index_template="{{ task.conf['target_uri'] }}",
        retries=2,
    ).expand_kwargs(scan.output)
    report = IngestReportOperator(task_id="report", scan_task_id="scan")
    scan >> start_swap >> report
