"""The coordination protocol under deterministic simulation (``simulation.py``, docs/protocol.md "Invariants"): many
seeded schedules of Airflow runs, CLI runs and standing workers sharing works, running the real worker loop, with
kills before and after writes, pauses past every TTL, clock jumps, kept leases, mixed claim TTLs, a clock a quarter
hour off and damaged segment bytes; every invariant is checked at every step. A failing seed is named and reproduces
alone: ``FACEFUSION_SIM_SEEDS=1234 pytest tests/unit/work/test_simulation.py``."""

from __future__ import annotations

import ast
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from .simulation import FAULT_KINDS, World

SCHEDULES = int(os.environ.get("FACEFUSION_SIM_SCHEDULES", "400"))
# The real loops each schedule must run between them (counted by wrappers around them, not by the simulation's say).
REAL_LOOPS = (
    "work_segments",  # worker/span.py: a worker's segments within one work
    "swap_span",  # worker/scheduler.py: a span task's worker
    "work_live_runs",  # worker/scheduler.py: the loop over live runs (standing workers, helpers)
    "serve",  # worker/serve.py: the standing worker
    "run",  # worker/run.py: a CLI run
    "merge_work",  # output/merge.py: the checked merge, healing damaged segments
    "merge_waiting_outputs",  # worker/scheduler.py: the worker that completes a work (span or standing) merges it
    "_commit",  # worker/segments.py: the committer
    "SpanCommittedTrigger.run",  # triggers/span_committed.py: a span waiting for standing workers
)


def _seeds() -> list[int]:
    chosen = os.environ.get("FACEFUSION_SIM_SEEDS")
    return [int(seed) for seed in chosen.split(",")] if chosen else list(range(SCHEDULES))


def test_every_invariant_holds_in_every_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    began = time.monotonic()
    stats = Counter[str]()
    fired, ran = Counter[str](), Counter[str]()
    for seed in _seeds():
        world = World(seed, monkeypatch)
        try:
            world.play()
        except Exception as error:  # an invariant, or an error a real loop raised where none should be
            tail = "\n".join(world.scheduler.log[-40:])
            raise AssertionError(
                f"seed {seed}: {type(error).__name__}: {error}\n(FACEFUSION_SIM_SEEDS={seed} reproduces it)\n{tail}"
            ) from error
        finally:
            monkeypatch.undo()
        stats["runs"] += len(world.runs)
        stats["finished"] += sum(record.finished for record in world.runs.values())
        stats["stopped"] += sum(bool(record.stopped) for record in world.runs.values())
        stats["clears"] += sum(record.clears for record in world.runs.values())
        stats["steps"] += world.scheduler.steps
        stats["stale_sweeps"] += world.stale_sweeps
        fired.update(world.scheduler.fired)
        ran.update(world.ran)
        # No live claim is taken: not by a process whose clock is a quarter hour off, nor by one with a shorter TTL.
        assert world.live_claims_taken == 0, (seed, world.live_claims_taken)
        for record in world.runs.values():  # I4: every Airflow run finishes; a CLI run finishes or stops clearly
            assert record.finished or (record.plan.kind == "cli" and record.stopped), (seed, record)
    print(f"{len(_seeds())} schedules in {time.monotonic() - began:.1f} s: {dict(stats)}")
    print(f"faults fired: {dict(fired)}")
    print(f"real loops run: {dict(ran)}")
    if len(_seeds()) >= SCHEDULES:  # a chosen seed alone need not inject every fault nor run every loop
        assert [kind for kind in FAULT_KINDS if not fired[kind]] == [], fired
        assert [loop for loop in REAL_LOOPS if not ran[loop]] == [], ran


# Names with which a simulation would work segments, claims or commits itself instead of running the worker loop.
PROTOCOL_STEPS = {
    "scan_work",
    "latest_claims",
    "SegmentClaims",
    "WorkState",
    "commit_marker",
    "retire_commit",
    "segment_file_name",
    "merge_claim_name",
    "PREPARE_CLAIM",
    "take_name",
    "is_free",
    "is_free_name",
    "prepare_work",
    "SegmentMarker",
}


def test_the_simulation_runs_the_worker_loop_instead_of_a_copy_of_it() -> None:
    """simulation.py takes, claims and commits no segment of its own: the real loops do (counted above)."""
    tree = ast.parse(Path(__file__).with_name("simulation.py").read_text())
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert sorted(used & PROTOCOL_STEPS) == []
