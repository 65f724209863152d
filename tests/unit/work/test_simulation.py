"""The coordination protocol under deterministic simulation (``simulation.py``, docs/protocol.md "Invariants"): many
seeded schedules of Airflow runs, CLI runs and standing workers sharing works, with kills, pauses past every TTL and
clock jumps; every invariant is checked at every step. A failing seed is named and reproduces alone:
``FACEFUSION_SIM_SEEDS=1234 pytest tests/unit/work/test_simulation.py``."""

from __future__ import annotations

import os
import time

import pytest

from .simulation import World

SCHEDULES = int(os.environ.get("FACEFUSION_SIM_SCHEDULES", "400"))


def _seeds() -> list[int]:
    chosen = os.environ.get("FACEFUSION_SIM_SEEDS")
    return [int(seed) for seed in chosen.split(",")] if chosen else list(range(SCHEDULES))


def test_every_invariant_holds_in_every_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    began = time.monotonic()
    stats = {"runs": 0, "finished": 0, "stopped": 0, "clears": 0, "stale_sweeps": 0, "steps": 0}
    for seed in _seeds():
        world = World(seed, monkeypatch)
        try:
            world.play()
        except AssertionError as error:
            tail = "\n".join(world.scheduler.log[-40:])
            raise AssertionError(f"seed {seed}: {error}\n(FACEFUSION_SIM_SEEDS={seed} reproduces it)\n{tail}") from None
        finally:
            monkeypatch.undo()
        stats["runs"] += len(world.runs)
        stats["finished"] += sum(record.finished for record in world.runs.values())
        stats["stopped"] += sum(bool(record.stopped) for record in world.runs.values())
        stats["clears"] += sum(record.clears for record in world.runs.values())
        stats["steps"] += world.scheduler.steps
        stats["stale_sweeps"] += world.stale_sweeps
        for record in world.runs.values():  # I4: every Airflow run finishes; a CLI run finishes or stops clearly
            assert record.finished or (record.plan.kind == "cli" and record.stopped), (seed, record)
    print(f"{len(_seeds())} schedules in {time.monotonic() - began:.1f} s: {stats}")
