"""The ``facefusion_s3_ingest`` DAG's operators: find new jobs under a prefix, claim them in the ledger, report.

``scan`` returns one ``{"trigger_run_id", "conf"}`` per swap run to start (the input of a mapped
``TriggerDagRunOperator``) and pushes a report (XCom ``report``) that ``report`` turns into the run's summary. A run
started by S3 notifications (the Variable's ``trigger``: an Asset watched through SQS) scans only the objects they name.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from airflow.sdk import (
    Asset,
    AssetOrTimeSchedule,
    AssetWatcher,
    BaseOperator,
    Context,
    CronTriggerTimetable,
    Param,
    Variable,
    XComArg,
)
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from pydantic import ValidationError

from facefusion_provider import ingest
from facefusion_provider.hooks.job_ledger import IngestLedgerHook
from facefusion_provider.operators.commands import FAILURE_XCOM_KEY, fail_on_bad_input
from facefusion_provider.operators.params import option_params, title_of
from facefusion_provider.options import Options, parse_options
from facefusion_provider.settings import load_settings

SWAP_DAG_ID = "facefusion_swap"
BATCH_SWAP_DAG_ID = "facefusion_swap_batch"
SETTINGS_VARIABLE = "facefusion_ingest"
"""Airflow Variable (JSON) with the ingestion DAG's ``schedule`` and the defaults of its Params."""
DEFAULT_SCHEDULE = "*/15 * * * *"
LEDGER_FOLDER_NAME = ".facefusion-ledger/"
OPTIONS_SECTION = "Swap options (every run)"
LIMITS_SECTION = "Limits and retries"
NOTIFICATIONS_ASSET = "facefusion_s3_uploads"
"""The Asset whose watcher turns the queue's S3 notifications into ``facefusion_s3_ingest`` runs."""
NOTIFICATIONS_POLL_DELAY_SECONDS = 1  # between two long polls of the queue: an upload waits one poll at most
# The swap tasks whose failure XCom says why a run failed for good (a span's map indexes come from plan's list).
FAILING_TASKS = ("validate", "prepare", "plan", "merge")

INPUT_FIELDS = (
    "mode",
    "input_prefix",
    "output_prefix",
    "ledger_prefix",
    "source_uris",
    "target_uris",
    "extensions",
    "min_size_bytes",
    "max_size_bytes",
    "max_runs_per_scan",
    "max_attempts",
    "orphan_after_minutes",
    "settle_minutes",
    "swap_dag_id",
)
CONFIG_FIELDS = (*INPUT_FIELDS, *Options.model_fields)


def ingest_settings() -> dict[str, Any]:
    """The Variable ``facefusion_ingest`` (an empty object when unset); read when the DAG file is parsed."""
    value = Variable.get(SETTINGS_VARIABLE, default=None, deserialize_json=True)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"Variable {SETTINGS_VARIABLE}: expected a JSON object, got {value!r}")
    return value


def ingest_schedule(settings: Mapping[str, Any]) -> str | None:
    """Cron expression or preset from the Variable's ``schedule``; no Variable, or ``"none"``, means manual only, so
    an unconfigured ingestion never runs on its own."""
    if not settings:
        return None
    schedule = settings.get("schedule", DEFAULT_SCHEDULE)
    if schedule is None or str(schedule).strip().lower() in ("", "none", "null"):
        return None
    return str(schedule)


def notification_queue(settings: Mapping[str, Any]) -> ingest.NotificationQueue | None:
    """The Variable's ``trigger`` (the SQS queue of the input bucket's notifications), or None: scheduled scans only."""
    if settings.get("trigger") is None:
        return None
    try:
        return ingest.NotificationQueue.model_validate(settings["trigger"])
    except ValidationError as error:
        raise ValueError(f"Variable {SETTINGS_VARIABLE}.trigger: {ingest.describe_errors(error)}") from None


def notifications_asset(queue: ingest.NotificationQueue, aws_conn_id: str | None) -> Asset:
    """An Asset updated by every message of the queue: the common-messaging ``MessageQueueTrigger`` on SQS (the amazon
    provider's ``SqsSensorTrigger``, which deletes the messages it hands over) watches it on the triggerer."""
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger  # loads the queue providers

    trigger = MessageQueueTrigger(
        scheme="sqs",
        sqs_queue=queue.sqs_queue_url,
        aws_conn_id=queue.aws_conn_id or aws_conn_id,
        region_name=queue.region_name,
        max_messages=queue.max_messages,
        wait_time_seconds=queue.wait_time_seconds,
        waiter_delay=NOTIFICATIONS_POLL_DELAY_SECONDS,
    )
    return Asset(name=NOTIFICATIONS_ASSET, watchers=[AssetWatcher(name=NOTIFICATIONS_ASSET, trigger=trigger)])


def ingest_timetable(settings: Mapping[str, Any]) -> str | Asset | AssetOrTimeSchedule | None:
    """The DAG's schedule: the cron of ``schedule``, and with ``trigger`` also a run as soon as S3 notifications
    arrive. Both at once is the usual choice: the scheduled scan catches an object whose message was lost."""
    cron = ingest_schedule(settings)
    queue = notification_queue(settings)
    if queue is None:
        return cron
    asset = notifications_asset(queue, load_settings().aws_conn_id)
    if cron is None:
        return asset
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=asset)


def notification_messages(context: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The queue messages behind this run (its triggering asset events carry the watcher's payload), or None for a
    run that no notification started (scheduled or manual): that one scans the whole prefix."""
    events = context.get("triggering_asset_events") or {}
    payloads = [
        extra.get("payload")
        for asset_events in events.values()
        for event in asset_events
        if isinstance(extra := getattr(event, "extra", None), Mapping) and extra.get("from_trigger")
    ]
    if not payloads:
        return None
    return [
        dict(message)
        for payload in payloads
        if isinstance(payload, Mapping)
        for message in payload.get("message_batch") or []
        if isinstance(message, Mapping)
    ]


def ingest_params(settings: Mapping[str, Any]) -> dict[str, Param]:
    """The DAG's Params, every one titled; defaults come from the Variable, so a scheduled run needs no conf. A param
    with no default is required: the form blocks the trigger until it is filled."""
    config = ingest.IngestConfig.model_fields
    if misplaced := sorted(set(settings) & set(Options.model_fields)):
        raise ValueError(
            f'Variable {SETTINGS_VARIABLE}: {misplaced} are swap options; put them under "options" '
            f'(e.g. {{"options": {{"{misplaced[0]}": ...}}}})'
        )
    unknown = set(settings) - {*INPUT_FIELDS, "schedule", "trigger", "options"}
    if unknown:
        raise ValueError(
            f"Variable {SETTINGS_VARIABLE}: unknown keys {sorted(unknown)}; allowed: schedule, trigger, options, "
            f"{INPUT_FIELDS}"
        )

    def param(name: str, description: str, section: str | None = None, **schema: Any) -> Param:
        field = config.get(name)
        default = settings.get(name)
        if default is None and field is not None and not field.is_required():
            default = field.get_default(call_default_factory=True)
        schema.update(title=title_of(name), description=description, **({"section": section} if section else {}))
        nullable = "null" in schema["type"]
        return Param(**schema) if default is None and not nullable else Param(default, **schema)

    # Not starred as required in the form: each mode needs only one of them (scan names the one missing).
    uri_list: dict[str, Any] = {"type": ["null", "array"], "items": {"type": "string", "minLength": 1}}
    params = {
        "mode": param(
            "mode",
            "videos: each new video x source_uris. faces: each new image (or folder of images of one person) x "
            "target_uris. manifests: each line of each new .jsonl or .csv file is a job.",
            type="string",
            enum=list(ingest.DEFAULT_EXTENSIONS),
        ),
        "input_prefix": param(
            "input_prefix",
            "New files under this prefix are ingested, e.g. s3://bucket/incoming/.",
            type="string",
            minLength=3,
        ),
        "output_prefix": param(
            "output_prefix", "Outputs go here, e.g. s3://bucket/swapped/.", type="string", minLength=3
        ),
        "ledger_prefix": param(
            "ledger_prefix",
            f"The claims and outcomes of every job. Empty: {LEDGER_FOLDER_NAME} under output_prefix.",
            type=["null", "string"],
        ),
        "source_uris": param(
            "source_uris", "videos mode: the fixed source face image(s) swapped into every video.", **uri_list
        ),
        "target_uris": param(
            "target_uris", "faces mode: the standard video(s) every new face is swapped into.", **uri_list
        ),
        "extensions": param(
            "extensions",
            "File name extensions that count, one per line. Empty: the mode's (videos .mp4 .mov .m4v .mkv; faces "
            ".jpg .jpeg .png .webp .bmp; manifests .jsonl .csv).",
            LIMITS_SECTION,
            type=["null", "array"],
            items={"type": "string", "pattern": r"^\.?[A-Za-z0-9]+$"},
        ),
        "min_size_bytes": param(
            "min_size_bytes", "Smaller files are skipped.", LIMITS_SECTION, type="integer", minimum=0
        ),
        "max_size_bytes": param(
            "max_size_bytes", "Larger files are skipped.", LIMITS_SECTION, type="integer", minimum=1
        ),
        "max_runs_per_scan": param(
            "max_runs_per_scan",
            "Swap runs started per scan at most; the rest wait for the next scan.",
            LIMITS_SECTION,
            type="integer",
            minimum=1,
            maximum=1024,
        ),
        "max_attempts": param(
            "max_attempts",
            "Swap runs per job at most; a failed job is retried on a later scan until then (bad input never is).",
            LIMITS_SECTION,
            type="integer",
            minimum=1,
            maximum=100,
        ),
        "orphan_after_minutes": param(
            "orphan_after_minutes",
            "A claim whose swap run was never started (its scan died) is started again after this.",
            LIMITS_SECTION,
            type="number",
            minimum=0,
        ),
        "settle_minutes": param(
            "settle_minutes",
            "faces mode: a folder of images is one identity once no image has arrived for this long.",
            LIMITS_SECTION,
            type="number",
            minimum=0,
        ),
        "swap_dag_id": Param(
            settings.get("swap_dag_id", BATCH_SWAP_DAG_ID),
            type="string",
            enum=[BATCH_SWAP_DAG_ID, SWAP_DAG_ID],
            title="Swap DAG",
            description=f"{BATCH_SWAP_DAG_ID} runs at a lower priority than interactive {SWAP_DAG_ID} runs.",
            section=LIMITS_SECTION,
        ),
    }
    defaults = parse_options(settings.get("options", {}), where=f"Variable {SETTINGS_VARIABLE}.options")
    options = option_params(section=OPTIONS_SECTION, defaults=defaults)
    return {**params, **options}


def ingest_config(values: Mapping[str, Any]) -> ingest.IngestConfig:
    """Params to a checked config; the options are those differing from the model's defaults; the ledger defaults to
    a folder under the output prefix."""
    defaults = Options().model_dump(mode="json")
    chosen = {name: values[name] for name in Options.model_fields if name in values and values[name] != defaults[name]}
    config = {name: values[name] for name in INPUT_FIELDS if values.get(name) is not None and name != "swap_dag_id"}
    if "output_prefix" in config and not config.get("ledger_prefix"):
        config["ledger_prefix"] = str(config["output_prefix"]).rstrip("/") + "/" + LEDGER_FOLDER_NAME
    return ingest.parse_ingest_config({**config, "options": chosen})


class ScanForNewJobsOperator(BaseOperator):
    """Find the jobs under ``input_prefix`` that need a swap run (by ``mode``), claim each in the ledger, return the
    runs to start.

    First the outcomes of earlier attempts are recorded from their swap runs' states (a run that failed on bad input is
    ``rejected`` and never retried); then every job is new (claim attempt 1), failed (claim the next attempt, up to
    ``max_attempts``), in flight, done, rejected, or out of bounds. Returns ``[{"trigger_run_id": ..., "conf": ...}]``
    for at most ``max_runs_per_scan`` jobs, and pushes the per-job report as XCom ``report``. Every field is templated
    (the DAG passes ``"{{ params.<name> }}"``). Without ``input_prefix`` and ``output_prefix`` (not configured yet) the
    scan skips, saying so once, and fails nothing.

    :param aws_conn_id: AWS connection for ``s3://``; default the ``[facefusion] aws_conn_id`` setting.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, *CONFIG_FIELDS)
    ui_color = "#e8f4e4"

    def __init__(self, *, aws_conn_id: str | None = None, **kwargs: Any) -> None:
        values = {name: kwargs.pop(name, None) for name in CONFIG_FIELDS}
        super().__init__(**kwargs)
        for name, value in values.items():
            setattr(self, name, value)
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        values = {name: getattr(self, name) for name in CONFIG_FIELDS}
        if not values.get("input_prefix") or not values.get("output_prefix"):
            raise AirflowSkipException(
                "Not configured: set input_prefix and output_prefix (the facefusion_ingest Variable, or the trigger "
                "form); nothing was scanned"
            )
        settings = load_settings()
        allowed = ingest.AllowedPrefixes(settings.allowed_input_prefixes, settings.allowed_output_prefixes)
        with fail_on_bad_input():
            config = ingest_config(values)
            ingest.check_allowed_config(config, allowed)
        swap_dag_id = str(values.get("swap_dag_id") or BATCH_SWAP_DAG_ID)
        hook = IngestLedgerHook(self.aws_conn_id or settings.aws_conn_id)
        ti = context["ti"]
        now = datetime.now(UTC)
        with fail_on_bad_input():
            histories = hook.load(config.ledger_prefix)
            states, finished = self._finished_attempts(histories, ti, swap_dag_id)
            newly_failed = [o for o in hook.record_outcomes(config.ledger_prefix, finished) if o.state != "success"]
            listed, unlisted = self._files(hook, config, allowed, notification_messages(context))
            found = ingest.find_jobs(listed, config, now=time.time(), read=hook.read, allowed=allowed)
            plan = ingest.plan_ingest(
                found.jobs, histories, states, config, now=now, ingest_run=f"{ti.dag_id}/{ti.run_id}"
            )
            triggers, reports = self._claim(hook, plan, config, swap_dag_id)
        report = _report(unlisted + found.reports + reports, newly_failed, config, swap_dag_id)
        ti.xcom_push(key="report", value=report)
        for line in report_lines(report):
            self.log.info("%s", line)
        return triggers

    def _files(
        self,
        hook: IngestLedgerHook,
        config: ingest.IngestConfig,
        allowed: ingest.AllowedPrefixes,
        messages: list[dict[str, Any]] | None,
    ) -> tuple[list[ingest.Listed], list[ingest.JobReport]]:
        """The files to make jobs of: the whole prefix, or only what the notifications behind this run name (and
        reports of the objects they name that must not run)."""
        if messages is None:
            return hook.list_files(config.input_prefix), []
        notified = ingest.notified_objects(messages)
        listed, outside = ingest.notified_files(
            notified.uris, config, allowed, stat=hook.stat_file, list_files=hook.list_files
        )
        self.log.info(
            "%d notification message(s): %d object(s) created, %d test event(s); scanning %d file(s), not the prefix",
            len(messages),
            len(notified.uris),
            notified.test_events,
            len(listed),
        )
        for report in outside:
            self.log.warning("Not run: %s (%s)", report.label, report.detail)
        return listed, notified.reports + outside

    def _finished_attempts(
        self, histories: dict[str, ingest.JobHistory], ti: Any, swap_dag_id: str
    ) -> tuple[dict[str, ingest.RunState], list[ingest.Outcome]]:
        """The swap run state of every unfinished attempt, and outcomes for those that ended (marked in ``histories``)."""
        states: dict[str, ingest.RunState] = {}
        outcomes = []
        for job, attempt in ingest.unfinished_attempts(histories):
            run_id = ingest.swap_run_id(job, attempt)
            states[run_id] = self._run_state(ti, swap_dag_id, run_id)
            failure = _failure(ti, swap_dag_id, run_id) if states[run_id] == "failed" else None
            outcome = ingest.outcome_for(job, attempt, states[run_id], datetime.now(UTC), failure=failure)
            if outcome is not None:
                histories[job].outcomes[attempt] = outcome.state
                outcomes.append(outcome)
        return states, outcomes

    @staticmethod
    def _run_state(ti: Any, swap_dag_id: str, run_id: str) -> ingest.RunState:
        if ti.get_dr_count(dag_id=swap_dag_id, run_ids=[run_id]) == 0:
            return "missing"
        raw = ti.get_dagrun_state(dag_id=swap_dag_id, run_id=run_id)
        state = str(getattr(raw, "value", raw))  # the Task SDK's enum prints as "DagRunState.SUCCESS"
        return cast("ingest.RunState", state if state in ("queued", "running", "success", "failed") else "running")

    def _claim(
        self, hook: IngestLedgerHook, plan: ingest.IngestPlan, config: ingest.IngestConfig, swap_dag_id: str
    ) -> tuple[list[dict[str, Any]], list[ingest.JobReport]]:
        """Create the claims of the plan's starts; a claim another scan created first is that scan's job."""
        won = {
            start.claim.run_id for start in plan.starts if start.resume or hook.claim(config.ledger_prefix, start.claim)
        }
        triggers = [
            {"trigger_run_id": start.claim.run_id, "trigger_dag_id": swap_dag_id, "conf": ingest.swap_conf(start.claim)}
            for start in plan.starts
            if start.claim.run_id in won
        ]
        reports = [
            ingest.JobReport(r.label, "in_flight", r.attempt, r.run_id, "claimed by an overlapping scan")
            if r.kind in ("start", "retry") and r.run_id not in won
            else r
            for r in plan.reports
        ]
        return triggers, reports


def _failure(ti: Any, swap_dag_id: str, run_id: str) -> ingest.RunFailure | None:
    """The failure that ended ``run_id`` without retries, from its tasks' ``failure`` XCom; None when it was retried
    out (a transient cause)."""
    records = [
        ti.xcom_pull(task_ids=task_id, dag_id=swap_dag_id, run_id=run_id, key=FAILURE_XCOM_KEY)
        for task_id in FAILING_TASKS
    ]
    spans = ti.xcom_pull(task_ids="plan", dag_id=swap_dag_id, run_id=run_id) or []
    if spans:
        mapped = ti.xcom_pull(
            task_ids="swap_span", dag_id=swap_dag_id, run_id=run_id, key=FAILURE_XCOM_KEY, map_indexes=range(len(spans))
        )
        records += mapped if isinstance(mapped, list) else [mapped]
    for record in records:
        if isinstance(record, dict):
            return ingest.RunFailure(
                str(record.get("failure_class", "invalid_input")), str(record.get("message", "bad input"))
            )
    return None


def _report(
    reports: list[ingest.JobReport], failed: list[ingest.Outcome], config: ingest.IngestConfig, swap_dag_id: str
) -> dict[str, Any]:
    next_step = {"retry": "retried now", "given_up": "given up", "rejected": "not retried (bad input)"}
    by_job = {r.job_id: r for r in reports if r.job_id}
    return {
        "mode": config.mode,
        "input_prefix": config.input_prefix,
        "swap_dag_id": swap_dag_id,
        "jobs": [r.as_dict() for r in reports],
        "newly_failed": [
            {
                "label": report.label if (report := by_job.get(outcome.job_id)) else outcome.run_id,
                "attempt": outcome.attempt,
                "max_attempts": config.max_attempts,
                "run_id": outcome.run_id,
                "state": outcome.state,
                "detail": outcome.detail,
                "next": next_step.get(report.kind, "retried on a later scan") if report else "not listed any more",
            }
            for outcome in failed
        ],
    }


def report_lines(report: Mapping[str, Any]) -> list[str]:
    """The scan report in lines: the counts by kind first ("s3://in/ (videos): 2 started"), then each job not done."""
    counts: dict[str, int] = {}
    for job in report["jobs"]:
        counts[job["kind"]] = counts.get(job["kind"], 0) + 1
    lines = [
        f"{report['input_prefix']} ({report['mode']}): "
        + (", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "nothing to ingest")
    ]
    for job in report["jobs"]:
        if job["kind"] != "done":
            detail = f" ({job['detail']})" if job["detail"] else ""
            lines.append(f"{job['kind'].upper():>9} {job['label']} attempt {job['attempt']}{detail}")
    return lines


class IngestReportOperator(BaseOperator):
    """Log the scan's per-job report; fail (without retries) when jobs failed since the last scan.

    A failed job fails exactly one ingestion run (the one that first sees the failure), with its label, the attempt
    and what happens next in the message, so Airflow's failure alerts reach whoever watches the DAG. A scan that
    skipped (not configured) skips the report too.

    :param report: the scan's report (its ``report`` XCom: ``scan.output["report"]``).
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, "report")

    def __init__(self, *, report: Mapping[str, Any] | XComArg | None, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "none_failed_min_one_success")
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)
        self.report = report

    def execute(self, context: Context) -> dict[str, Any] | None:
        report = cast("Mapping[str, Any] | None", self.report)  # rendered: the XComArg resolved
        if not report:
            raise AirflowFailException("no report from the scan: it failed, see its log")
        for line in report_lines(report):
            self.log.info("%s", line)
        failed = report["newly_failed"]
        if failed:
            raise AirflowFailException(
                "jobs failed: "
                + "; ".join(
                    f"{f['label']} (attempt {f['attempt']} of {f['max_attempts']} {f['state']} in run "
                    f"{report['swap_dag_id']}/{f['run_id']}{': ' + f['detail'] if f['detail'] else ''}; {f['next']})"
                    for f in failed
                )
            )
        return cast("dict[str, Any]", report)
