"""The ``facefusion_s3_ingest`` DAG's operators: find new videos, claim them in the ledger, report failures.

``scan`` returns one ``{"trigger_run_id", "conf"}`` per swap run to start (the input of a mapped
``TriggerDagRunOperator``) and pushes a report (XCom ``report``) that ``report`` turns into the run's summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from airflow.sdk import BaseOperator, Context, Param, Variable
from airflow.sdk.exceptions import AirflowFailException

from facefusion_provider import ingest
from facefusion_provider.hooks.ledger import IngestLedgerHook
from facefusion_provider.operators.commands import fail_on_bad_input
from facefusion_provider.options import options_json_schema, parse_options
from facefusion_provider.settings import load_settings

SWAP_DAG_ID = "facefusion_swap"
SETTINGS_VARIABLE = "facefusion_ingest"
"""Airflow Variable (JSON) with the ingestion DAG's ``schedule`` and the defaults of its Params."""
DEFAULT_SCHEDULE = "*/15 * * * *"
LEDGER_FOLDER_NAME = ".facefusion-ledger/"

CONFIG_FIELDS = (
    "input_prefix",
    "output_prefix",
    "ledger_prefix",
    "source_uris",
    "options",
    "extensions",
    "min_size_bytes",
    "max_size_bytes",
    "max_videos_per_run",
    "max_attempts",
    "orphan_after_minutes",
)


def ingest_settings() -> dict[str, Any]:
    """The Variable ``facefusion_ingest`` (an empty object when unset); read when the DAG file is parsed."""
    value = Variable.get(SETTINGS_VARIABLE, default=None, deserialize_json=True)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"Variable {SETTINGS_VARIABLE}: expected a JSON object, got {value!r}")
    return value


def ingest_schedule(settings: Mapping[str, Any]) -> str | None:
    """Cron expression or preset from the Variable's ``schedule``; ``"none"`` leaves only manual triggers."""
    schedule = settings.get("schedule", DEFAULT_SCHEDULE)
    if schedule is None or str(schedule).strip().lower() in ("", "none", "null"):
        return None
    return str(schedule)


def ingest_params(settings: Mapping[str, Any]) -> dict[str, Param]:
    """The DAG's Params; defaults come from the Variable, so a scheduled run needs no conf."""
    config = ingest.IngestConfig.model_fields
    options_schema = options_json_schema()
    options_schema.pop("description", None)
    unknown = set(settings) - {*CONFIG_FIELDS, "schedule"}
    if unknown:
        raise ValueError(
            f"Variable {SETTINGS_VARIABLE}: unknown keys {sorted(unknown)}; allowed: schedule, {CONFIG_FIELDS}"
        )

    def default(name: str) -> Any:
        field = config[name]
        return settings.get(name, None if field.is_required() else field.get_default(call_default_factory=True))

    def prefix(name: str, text: str) -> Param:
        return Param(
            default(name), type=["null", "string"], title=name.replace("_", " ").capitalize(), description=text
        )

    return {
        "input_prefix": prefix(
            "input_prefix", "Videos under this prefix are ingested once each, e.g. s3://bucket/incoming/."
        ),
        "output_prefix": prefix(
            "output_prefix", "Each output goes here, at its input's path below input_prefix, e.g. s3://bucket/swapped/."
        ),
        "ledger_prefix": prefix(
            "ledger_prefix", f"The claims and outcomes of every video. Empty: {LEDGER_FOLDER_NAME} under output_prefix."
        ),
        "source_uris": Param(
            settings.get("source_uris", []),
            type="array",
            items={"type": "string", "minLength": 1},
            title="Source faces",
            description="The fixed source face image(s) swapped into every video.",
        ),
        "options": Param(
            parse_options(settings.get("options", {}), where=f"Variable {SETTINGS_VARIABLE}.options").model_dump(
                mode="json"
            ),
            title="Options",
            description="Face swap options of every swap run (facefusion_swap's options).",
            **options_schema,
        ),
        "extensions": Param(
            default("extensions"),
            type="array",
            items={"type": "string", "pattern": r"^\.?[A-Za-z0-9]+$"},
            minItems=1,
            description="File name extensions that count as videos.",
        ),
        "min_size_bytes": Param(
            default("min_size_bytes"), type="integer", minimum=0, description="Smaller files are skipped."
        ),
        "max_size_bytes": Param(
            default("max_size_bytes"), type="integer", minimum=1, description="Larger files are skipped."
        ),
        "max_videos_per_run": Param(
            default("max_videos_per_run"),
            type="integer",
            minimum=1,
            maximum=1024,
            description="Swap runs started per ingestion run at most; the rest wait for the next run.",
        ),
        "max_attempts": Param(
            default("max_attempts"),
            type="integer",
            minimum=1,
            maximum=100,
            description="Swap runs per video at most; a failed video is retried on a later run until then.",
        ),
        "orphan_after_minutes": Param(
            default("orphan_after_minutes"),
            type="number",
            minimum=0,
            description="A claim whose swap run was never started (its ingestion run died) is started again after this.",
        ),
    }


def ingest_config(values: Mapping[str, Any]) -> ingest.IngestConfig:
    """Params to a checked config; the ledger defaults to a folder under the output prefix."""
    values = {name: value for name, value in values.items() if value is not None}
    if "output_prefix" in values and not values.get("ledger_prefix"):
        values["ledger_prefix"] = str(values["output_prefix"]).rstrip("/") + "/" + LEDGER_FOLDER_NAME
    return ingest.parse_ingest_config(values)


class ScanForNewVideosOperator(BaseOperator):
    """Find the videos under ``input_prefix`` that need a swap run, claim each in the ledger, and return the runs.

    First the outcomes of earlier attempts are recorded from their swap runs' states; then every listed video is new
    (claim attempt 1), failed (claim the next attempt, up to ``max_attempts``), in flight, done, or out of bounds.
    Returns ``[{"trigger_run_id": ..., "conf": {...}}]`` for at most ``max_videos_per_run`` videos, and pushes the
    per-video report as XCom ``report``. Every field is templated (the DAG passes ``"{{ params.<name> }}"``).

    :param swap_dag_id: the DAG each video runs through.
    :param aws_conn_id: AWS connection for ``s3://``; default the ``[facefusion] aws_conn_id`` setting.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, *CONFIG_FIELDS)
    ui_color = "#e8f4e4"

    def __init__(
        self,
        *,
        swap_dag_id: str = SWAP_DAG_ID,
        aws_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        values = {name: kwargs.pop(name, None) for name in CONFIG_FIELDS}
        super().__init__(**kwargs)
        for name, value in values.items():
            setattr(self, name, value)
        self.swap_dag_id = swap_dag_id
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        with fail_on_bad_input():
            config = ingest_config({name: getattr(self, name) for name in CONFIG_FIELDS})
        hook = IngestLedgerHook(self.aws_conn_id or load_settings().aws_conn_id)
        ti = context["ti"]
        now = datetime.now(UTC)
        with fail_on_bad_input():
            histories = hook.load(config.ledger_prefix)
            states, finished = self._finished_attempts(histories, ti)
            newly_failed = [o for o in hook.record_outcomes(config.ledger_prefix, finished) if o.state == "failed"]
            plan = ingest.plan_ingest(
                hook.list_videos(config.input_prefix),
                histories,
                states,
                config,
                now=now,
                ingest_run=f"{ti.dag_id}/{ti.run_id}",
            )
            triggers, reports = self._claim(hook, plan, config)
        report = _report(reports, newly_failed, config)
        ti.xcom_push(key="report", value=report)
        for line in _summary(report):
            self.log.info("%s", line)
        return triggers

    def _finished_attempts(
        self, histories: dict[str, ingest.VideoHistory], ti: Any
    ) -> tuple[dict[str, ingest.RunState], list[ingest.Outcome]]:
        """The swap run state of every unfinished attempt, and outcomes for those that ended (marked in ``histories``)."""
        states: dict[str, ingest.RunState] = {}
        outcomes = []
        for vid, attempt in ingest.unfinished_attempts(histories):
            run_id = ingest.swap_run_id(vid, attempt)
            states[run_id] = self._run_state(ti, run_id)
            if (outcome := ingest.outcome_for(vid, attempt, states[run_id], datetime.now(UTC))) is not None:
                histories[vid].outcomes[attempt] = outcome.state
                outcomes.append(outcome)
        return states, outcomes

    def _run_state(self, ti: Any, run_id: str) -> ingest.RunState:
        if ti.get_dr_count(dag_id=self.swap_dag_id, run_ids=[run_id]) == 0:
            return "missing"
        raw = ti.get_dagrun_state(dag_id=self.swap_dag_id, run_id=run_id)
        state = str(getattr(raw, "value", raw))  # the Task SDK's enum prints as "DagRunState.SUCCESS"
        return cast("ingest.RunState", state if state in ("queued", "running", "success", "failed") else "running")

    def _claim(
        self, hook: IngestLedgerHook, plan: ingest.IngestPlan, config: ingest.IngestConfig
    ) -> tuple[list[dict[str, Any]], list[ingest.VideoReport]]:
        """Create the claims of the plan's starts; a claim another run created first is that run's video."""
        won = {
            start.claim.run_id for start in plan.starts if start.resume or hook.claim(config.ledger_prefix, start.claim)
        }
        triggers = [
            {"trigger_run_id": start.claim.run_id, "conf": ingest.swap_conf(start.claim, config)}
            for start in plan.starts
            if start.claim.run_id in won
        ]
        reports = [
            ingest.VideoReport(r.uri, r.version, "in_flight", r.attempt, r.run_id, "claimed by an overlapping run")
            if r.kind in ("start", "retry") and r.run_id not in won
            else r
            for r in plan.reports
        ]
        return triggers, reports


def _report(
    reports: list[ingest.VideoReport], newly_failed: list[ingest.Outcome], config: ingest.IngestConfig
) -> dict[str, Any]:
    by_video = {ingest.video_id(r.uri, r.version): r for r in reports}
    next_step = {"retry": "retried now", "given_up": "given up", "deferred": "retried on a later run"}
    return {
        "input_prefix": config.input_prefix,
        "videos": [r.as_dict() for r in reports],
        "newly_failed": [
            {
                "uri": video.uri if (video := by_video.get(o.video_id)) else None,
                "attempt": o.attempt,
                "max_attempts": config.max_attempts,
                "run_id": o.run_id,
                "next": next_step.get(video.kind, "not listed any more") if video else "not listed any more",
            }
            for o in newly_failed
        ],
    }


def _summary(report: Mapping[str, Any]) -> list[str]:
    counts: dict[str, int] = {}
    for video in report["videos"]:
        counts[video["kind"]] = counts.get(video["kind"], 0) + 1
    lines = [
        f"{report['input_prefix']}: " + (", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no videos")
    ]
    for video in report["videos"]:
        if video["kind"] != "done":
            detail = f" ({video['detail']})" if video["detail"] else ""
            lines.append(f"{video['kind'].upper():>9} {video['uri']} attempt {video['attempt']}{detail}")
    return lines


class IngestReportOperator(BaseOperator):
    """Log the scan's per-video report; fail (without retries) when videos failed since the last ingestion run.

    A failed video fails exactly one ingestion run (the one that first sees the failure), with its key, the attempt
    and what happens next in the message, so Airflow's failure alerts reach whoever watches the DAG.

    :param scan_task_id: the task that pushed the report.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, "scan_task_id")

    def __init__(self, *, scan_task_id: str = "scan", **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)
        self.scan_task_id = scan_task_id

    def execute(self, context: Context) -> dict[str, Any] | None:
        report = context["ti"].xcom_pull(task_ids=self.scan_task_id, key="report")
        if not report:
            raise AirflowFailException(f"no report from {self.scan_task_id}: the scan failed, see its log")
        for line in _summary(report):
            self.log.info("%s", line)
        failed = report["newly_failed"]
        if failed:
            raise AirflowFailException(
                "videos failed: "
                + "; ".join(
                    f"{f['uri'] or f['run_id']} (attempt {f['attempt']} of {f['max_attempts']} failed in run "
                    f"{SWAP_DAG_ID}/{f['run_id']}; {f['next']})"
                    for f in failed
                )
            )
        return cast("dict[str, Any]", report)
