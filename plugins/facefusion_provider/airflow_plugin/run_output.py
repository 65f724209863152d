"""Where a run's output stands, from the run's task states and the output in storage together: what its Output tab
says and whether its output links serve anything (pure: the facts are read by ``run_view`` and ``outputs``).

The output at a path is this run's only while its marker (``.{name}.facefusion.json``) names the run's work: a later
run writing the same path replaces it, and from then on this run's tab says by whom and its links serve nothing. A
finished run never shows "Preparing": once Airflow says the run ended, the tab says how, and stops refreshing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from facefusion_provider.airflow_plugin.run_notes import PROVIDER_NOTE_PREFIXES  # a reason the provider wrote
from facefusion_provider.work.records import OutputMarker, RunHolder

VALIDATE_OPERATOR = "ValidateSwapConfOperator"  # its ``work_uri`` and ``output_uri`` XComs name the run's output
PLAN_OPERATOR = "PlanSpansOperator"  # runs once the work is prepared
SCAN_OPERATOR = "ScanForNewJobsOperator"  # the ingestion DAG: its return value lists the runs it starts
PROVIDER_PACKAGE = "facefusion_provider"
FINISHED_RUN_STATES = frozenset({"success", "failed"})
FAILED_TASK_STATES = frozenset({"failed", "upstream_failed"})


class Stage(StrEnum):
    WAITING = "waiting"
    CHECKING = "checking"
    REFUSED = "refused"
    PREPARING = "preparing"
    SWAPPING = "swapping"
    DONE = "done"
    REPLACED = "replaced"
    REMOVED = "removed"
    FAILED = "failed"


FINAL_STAGES = frozenset({Stage.REFUSED, Stage.DONE, Stage.REPLACED, Stage.REMOVED, Stage.FAILED})


@dataclass(frozen=True)
class DagTasks:
    """The provider's tasks a DAG holds, by the class that made them (any task ids: a DAG built from the operators)."""

    validate: str = ""
    plan: str = ""
    scan: str = ""

    @property
    def has_output(self) -> bool:
        return bool(self.validate)


def provider_tasks(tasks: Collection[Any]) -> DagTasks:
    """The validate, plan and scan tasks of a (serialized) DAG's tasks, found by operator class and module."""
    found: dict[str, str] = {}
    for task in tasks:
        module = str(getattr(task, "_task_module", "") or "")
        if module != PROVIDER_PACKAGE and not module.startswith(PROVIDER_PACKAGE + "."):
            continue
        kind = {VALIDATE_OPERATOR: "validate", PLAN_OPERATOR: "plan", SCAN_OPERATOR: "scan"}.get(
            str(getattr(task, "task_type", ""))
        )
        if kind:
            found.setdefault(kind, str(task.task_id))
    return DagTasks(**found)


@dataclass(frozen=True)
class RunFacts:
    """What Airflow's database says about the run."""

    run_id: str
    run_state: str  # queued, running, success, failed
    task_states: Mapping[str, tuple[str | None, ...]]  # each task's instances' states (a mapped task has several)
    tasks: DagTasks
    work_id: str | None = None  # validate's: None until validate succeeded
    output_uri: str | None = None
    work_uri: str | None = None
    note: str = ""  # the run's note: a failed run's reason, written by the scheduler as the run fails (run_notes)

    def succeeded(self, task_id: str) -> bool:
        states = self.task_states.get(task_id, ())
        return bool(states) and all(state in ("success", "skipped") for state in states)

    def failed_tasks(self) -> list[str]:
        """The tasks that failed themselves (not those that did not run because of them)."""
        return sorted(task for task, states in self.task_states.items() if "failed" in states)


@dataclass(frozen=True)
class StoredOutput:
    """What storage holds at the run's output path now."""

    marker: OutputMarker | None  # the marker beside it (None: missing or unreadable)
    output_exists: bool

    def holds(self, work_id: str | None) -> bool:
        """Whether the output there is ``work_id``'s: its marker names the work and the file exists."""
        return self.output_exists and self.marker is not None and self.marker.work_id == work_id

    def holds_another(self, work_id: str | None) -> bool:
        return self.output_exists and self.marker is not None and self.marker.work_id != work_id


def output_stage(run: RunFacts, stored: StoredOutput | None) -> Stage:
    """Where the run's output stands (``stored`` is None before validate accepted an output)."""
    finished = run.run_state in FINISHED_RUN_STATES
    if run.work_id is None or stored is None:
        if FAILED_TASK_STATES & set(run.task_states.get(run.tasks.validate, ())):
            return Stage.REFUSED
        if finished:
            return Stage.FAILED
        return Stage.WAITING if run.run_state == "queued" else Stage.CHECKING
    if stored.holds(run.work_id):
        return Stage.DONE
    if run.run_state == "failed":
        return Stage.FAILED
    if run.run_state == "success":
        return Stage.REPLACED if stored.holds_another(run.work_id) else Stage.REMOVED
    if run.run_state == "queued":
        return Stage.WAITING
    return Stage.SWAPPING if run.succeeded(run.tasks.plan) else Stage.PREPARING


def holder_words(holder: RunHolder | None) -> str:
    """ "run <id> of <dag>", or what else wrote the output."""
    if holder is None:
        return "another run"
    if holder.kind == "cli":
        return f"a facefusion-worker run on {holder.host or 'another machine'}"
    return f"run {holder.run_id} of {holder.dag_id}"


def replaced_words(marker: OutputMarker) -> str:
    """ "run X of D at 2026-12-06 15:40 UTC": who wrote what the output path holds now, and when."""
    when = f" at {marker.written_at:%Y-%m-%d %H:%M:%S} UTC" if marker.written_at is not None else ""
    return holder_words(marker.run) + when


def stage_line(stage: Stage, run: RunFacts, stored: StoredOutput | None, segments: tuple[int, int] | None) -> str:
    """One sentence a person reads: where the run is (``segments``: committed and total, while swapping)."""
    if stage is Stage.WAITING:
        return "Waiting: the run has not started yet."
    if stage is Stage.CHECKING:
        return "Checking the inputs."
    if stage in (Stage.REFUSED, Stage.FAILED) and run.note.startswith(PROVIDER_NOTE_PREFIXES):
        return run.note  # the reason itself, as the run's note has it (the run's header shows it after a reload)
    if stage is Stage.REFUSED:
        return "Refused: the run's inputs were not accepted; the run's note says why."
    if stage is Stage.FAILED:
        failed = run.failed_tasks()
        where = f" in {', '.join(failed)}" if failed else ""
        return f"Failed{where}: the run's note says why. Clear the failed task to run it again."
    if stage is Stage.DONE:
        return "Done: the output video is ready."
    if stage is Stage.REPLACED and stored is not None and stored.marker is not None:
        return f"Replaced: {run.output_uri} now holds the output of {replaced_words(stored.marker)}."
    if stage is Stage.REMOVED:
        return f"Removed: the output is no longer at {run.output_uri}."
    if stage is Stage.PREPARING:
        return "Preparing: the video is being read."
    committed, total = segments or (0, 0)
    if total and committed >= total:
        return f"Merging: all {total} segments saved; the output video is being written."
    percent = 100 * committed // total if total else 0
    return f"Swapping: {committed} of {total} segments saved ({percent}%)."


@dataclass(frozen=True)
class Refusal:
    """Why an output link serves nothing under this run's name."""

    status: int  # 404: nothing of this run there; 409: another run's output is there
    reason: str


def link_refusal(run: RunFacts, stored: StoredOutput | None) -> Refusal | None:
    """None when the output at the run's path is this run's (its marker names the run's work); else why not."""
    if run.work_id is None or stored is None:
        return Refusal(404, f"run {run.run_id} has no accepted output: its inputs were not accepted, or not yet")
    if stored.holds(run.work_id):
        return None
    stage = output_stage(run, stored)
    if stored.holds_another(run.work_id) and stored.marker is not None:
        what = "replaced" if stage is Stage.REPLACED else "not this run's output"
        return Refusal(
            409,
            f"{what}: {run.output_uri} holds the output of {replaced_words(stored.marker)}, not of run "
            f"{run.run_id}; nothing of it is served under this run",
        )
    if stage is Stage.REMOVED:
        return Refusal(404, f"removed: the output of run {run.run_id} is no longer at {run.output_uri}")
    if stage is Stage.FAILED:
        return Refusal(404, f"run {run.run_id} failed before it wrote its output")
    return Refusal(404, f"not written yet: run {run.run_id} is {stage.value}")
