"""The run's note says why a run of this provider failed, naming the field as the form shows it, and a note the
provider wrote goes once the condition is gone; a person's note is never touched."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from facefusion_provider.airflow_plugin import run_notes
from facefusion_provider.operators.params import field_label, titled_reason

POOL_NOTE = "Not started: pool 'gpu_missing' (tasks swap_span) does not exist. Create it ...; then clear this run."


def _run(note: str | None, user: str | None = None, dag_id: str = "facefusion_swap", **more: Any) -> Any:
    run = SimpleNamespace(dag_id=dag_id, run_id="manual__1", conf={}, dag=None, state="running", note=note, **more)
    run.dag_run_note = None if note is None else SimpleNamespace(content=note, user_id=user)
    return run


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "output_uri: '..' is not allowed in /out/../x.mp4; name the file itself",
            "Output video (output_uri): '..' is not allowed in /out/../x.mp4; name the file itself",
        ),
        (
            "invalid options: options.face_swapper_blend: Input should be less than or equal to 100 (got 150)",
            "Face swapper blend (face_swapper_blend): Input should be less than or equal to 100 (got 150)",
        ),
        (
            "source_uris[1]: file:///in/b.png: no such file",
            "Source faces (source_uris)[1]: file:///in/b.png: no such file",
        ),
        ("no face found in the source image", "no face found in the source image"),  # names no field: as it is
        ("chunk_sise: unknown key; did you mean 'chunk_size'?", "chunk_sise: unknown key; did you mean 'chunk_size'?"),
    ],
)
def test_a_reason_names_the_field_by_its_form_title_and_key(message: str, reason: str) -> None:
    assert titled_reason(message) == reason
    assert field_label("face_detector_model") == "Face detector model (face_detector_model)"


def test_a_failed_run_note_names_the_task_and_the_reason_or_the_log_to_read() -> None:
    note = run_notes.failure_note(
        {"validate": "target_uri: file:///in/x.mp4: no such file"}, ["validate", "swap_span [frames 0-7]"]
    )
    assert note == (
        "Failed in validate: Target video (target_uri): file:///in/x.mp4: no such file; "
        "swap_span [frames 0-7]: see the task's log"
    )
    assert run_notes.failure_note({}, []) == "Failed in a task: see the failed task's log"
    assert len(run_notes.failure_note({"merge": "x" * 5000}, ["merge"])) == run_notes.NOTE_LIMIT


def test_the_providers_note_goes_when_the_run_starts_again_a_persons_note_stays() -> None:
    stale = _run(POOL_NOTE)
    run_notes.on_dag_run_running(dag_run=stale, msg="started")
    assert stale.note is None  # the pool exists now (no pool check fails without a DAG): the note is gone

    theirs = _run("Not started: I paused this on purpose", user="alice")
    run_notes.on_dag_run_running(dag_run=theirs, msg="started")
    assert theirs.note == "Not started: I paused this on purpose"

    other_dag = _run("Failed in validate: ...", dag_id="someone_elses")
    run_notes.on_dag_run_running(dag_run=other_dag, msg="started")
    assert other_dag.note == "Failed in validate: ..."


def test_a_start_check_that_fails_again_writes_its_note_after_the_old_one_went() -> None:
    states: list[Any] = []
    run = _run("Failed in merge: an old reason", set_state=states.append)
    run.conf = {"segment_size": 10**30}
    run_notes.on_dag_run_running(dag_run=run, msg="started")
    assert len(states) == 1 and run.note.startswith("Not started: segment_size: a 31-digit number is out of range")


def test_a_succeeded_run_keeps_no_failure_note_of_the_provider() -> None:
    run = _run("Failed in swap_span [frames 16-23]: see the task's log")
    run_notes.on_dag_run_success(dag_run=run, msg="success")
    assert run.note is None
    kept = _run("reviewed: good", user="alice")
    run_notes.on_dag_run_success(dag_run=kept, msg="success")
    assert kept.note == "reviewed: good"


def test_a_failed_run_gets_the_reason_unless_a_person_wrote_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    failures = ({"validate": "output_uri: '..' is not allowed in /out/../x.mp4"}, ["validate"])
    monkeypatch.setattr(run_notes, "run_failures", lambda session, dag_run: failures)
    monkeypatch.setattr("sqlalchemy.orm.object_session", lambda dag_run: object())
    run = _run(None)
    run_notes.on_dag_run_failed(dag_run=run, msg="task_failure")
    assert run.note == "Failed in validate: Output video (output_uri): '..' is not allowed in /out/../x.mp4"
    theirs = _run("looking into it", user="alice")
    run_notes.on_dag_run_failed(dag_run=theirs, msg="task_failure")
    assert theirs.note == "looking into it"
    not_started = _run(POOL_NOTE)
    run_notes.on_dag_run_failed(dag_run=not_started, msg="task_failure")
    assert not_started.note == POOL_NOTE
