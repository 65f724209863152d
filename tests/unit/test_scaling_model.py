"""The scaling model (bench/scaling_model.py) against its calibration and its committed results: the simulation still
predicts the real standing workers' runs in bench/results/calibration.json, and the README's scaling and factory
figures are what the model gives today (a change of the model without a rerun of its commands fails here)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT / "bench"))

import bench_calibration  # noqa: E402
import bench_factory  # noqa: E402
import bench_scaling  # noqa: E402
import scaling_measure  # noqa: E402
import scaling_model  # noqa: E402


def saved(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return result


def test_the_model_predicts_the_measured_standing_worker_runs_within_the_goal() -> None:
    calibration = saved("calibration.json")
    compared = bench_calibration.compare(calibration["measured"], calibration["frame_delay_s"])
    assert compared["worst_error"] <= bench_calibration.GOAL_RATIO
    assert compared["model"] == calibration["model"], "rerun python bench/bench_calibration.py --replay ..."


def test_the_scaling_results_are_what_the_model_gives(tmp_path: Path) -> None:
    argv = ["--measured", str(RESULTS / "scaling.json"), "--cpu-stages", str(RESULTS / "cpu-stages.json")]
    assert bench_scaling.main([*argv, "--out", str(tmp_path)]) == 0
    modelled = json.loads((tmp_path / "scaling.json").read_text())
    committed = saved("scaling.json")
    assert modelled["measured"] == committed["measured"]
    assert modelled["model"] == committed["model"], f"rerun python bench/bench_scaling.py {' '.join(argv)}"


def test_the_factory_model_is_what_the_scaling_model_gives(tmp_path: Path) -> None:
    shutil.copyfile(RESULTS / "factory.json", tmp_path / "factory.json")  # its measured part, kept by --model-only
    assert bench_factory.main(["--model-only", "--out", str(tmp_path)]) == 0
    modelled = json.loads((tmp_path / "factory.json").read_text())
    assert modelled["model"] == saved("factory.json")["model"], "rerun python bench/bench_factory.py --model-only"


def test_a_standing_worker_spends_each_runs_voice_preparation_on_its_own_gpu() -> None:
    """``worker_prepare_s`` (a voice prepared per run): standing workers, who prepare the runs they start, finish
    later by about runs x that over the GPUs; span pods, prepared by their own prepare task, do not wait for it."""
    scaling = saved("scaling.json")
    measured = scaling_measure.Measured.from_dict(scaling["measured"])
    stated = scaling_model.Stated()
    runs, gpus, prepare_s = 8, 2, 10.0

    def minutes(workers: str, worker_prepare_s: float) -> float:
        result, _, _ = scaling_model.simulate(
            measured,
            stated,
            256,
            gpus,
            runs=runs,
            wave=1,
            frames=1800,
            workers=workers,
            reuse_analysis=True,
            worker_prepare_s=worker_prepare_s,
        )
        return result.makespan_s

    added = minutes(scaling_model.STANDING, prepare_s) - minutes(scaling_model.STANDING, 0.0)
    assert abs(added - runs * prepare_s / gpus) <= 0.25 * runs * prepare_s / gpus
    assert minutes(scaling_model.SPAN_PODS, prepare_s) == minutes(scaling_model.SPAN_PODS, 0.0)
