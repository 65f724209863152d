"""Pods sized by GPU type: the chart's CPU requests, the Airflow side's cores per gpu_type and the READMEs' tables are what
bench/pod_sizing.py computes from the measured CPU per frame; a change of the measurements without a rerun fails here."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

import pod_sizing  # noqa: E402

from facefusion_provider.operators.kubernetes import pod_resources  # noqa: E402
from facefusion_provider.settings import SETTINGS, KubernetesSettings  # noqa: E402


def chart_rows() -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = yaml.safe_load(pod_sizing.VALUES.read_text())["gpu"]["resourcesByType"]
    return rows


def test_the_charts_cpu_per_gpu_type_is_the_sizing_scripts() -> None:
    sized = {
        row.gpu.key: str(row.cpu_request) for row in pod_sizing.sizings(pod_sizing.read_costs(), pod_sizing.gpu_rate())
    }

    assert {key: row["cpu"] for key, row in chart_rows().items()} == sized, "run python bench/pod_sizing.py"


def test_span_pods_of_the_airflow_side_ask_for_the_charts_row_of_their_gpu_type() -> None:
    values = yaml.safe_load(pod_sizing.VALUES.read_text())
    airflow = yaml.safe_load(pod_sizing.AIRFLOW_VALUES.read_text())["config"]["facefusion"]
    assert airflow["gpu_type"] == values["gpu"]["type"] and "worker_cpu" not in airflow

    for key, row in chart_rows().items():
        pod = pod_resources(KubernetesSettings.from_raw(raw_settings(gpu_type=key)), gpu=True)
        assert pod.requests["cpu"] == row["cpu"], key
        assert pod_resources(KubernetesSettings.from_raw(raw_settings(gpu_type=key)), gpu=False).requests["cpu"] == "4"
    explicit = KubernetesSettings.from_raw(raw_settings(gpu_type="h100", worker_cpu="6"))
    assert pod_resources(explicit, gpu=True).requests["cpu"] == "6"  # a user's worker_cpu wins
    with pytest.raises(ValueError, match=r"gpu_type: 'v100' is not among l4"):
        KubernetesSettings.from_raw(raw_settings(gpu_type="v100"))


def raw_settings(**values: str) -> dict[str, str]:
    return {spec.name: values.get(spec.name, spec.default) for spec in SETTINGS}


def test_the_readmes_carry_the_current_table() -> None:
    expected = pod_sizing.expected_files(pod_sizing.read_costs(), pod_sizing.gpu_rate())

    for path in pod_sizing.READMES:
        assert path.read_text() == expected[path], f"{path}: run python bench/pod_sizing.py"
    assert pod_sizing.main(["--check"]) == 0


def test_a_pod_asks_for_the_cores_that_keep_its_gpu_busy_within_its_nodes_share() -> None:
    for row in pod_sizing.sizings(pod_sizing.read_costs(), pod_sizing.gpu_rate()):
        assert row.cpu_request <= row.gpu.node_vcpus_per_gpu - 1
        if row.cpu_request == row.cores_needed:
            assert row.busy_share >= pod_sizing.BUSY_TARGET, row
        else:  # the node has no more cores per GPU: CPU-bound, and said so by its busy share
            assert row.busy_share < pod_sizing.BUSY_TARGET, row
        assert (row.cpu_ms_nvenc is not None) == (row.nvenc > 0)
        if row.cpu_ms_nvenc is not None:
            assert row.cpu_ms_nvenc < row.cpu_ms


@pytest.mark.parametrize("factor", [0.25, 2.0])
def test_new_cpu_costs_move_the_requests_written_into_the_values(factor: float) -> None:
    costs = pod_sizing.read_costs()
    changed = replace(
        costs,
        beside_inference_ms=costs.beside_inference_ms * factor,
        decode_ms=costs.decode_ms * factor,
        encoder_ms=costs.encoder_ms * factor,
    )
    before = {row.gpu.key: row for row in pod_sizing.sizings(costs, pod_sizing.gpu_rate())}
    after = {row.gpu.key: row for row in pod_sizing.sizings(changed, pod_sizing.gpu_rate())}

    written = yaml.safe_load(pod_sizing.with_requests(pod_sizing.VALUES.read_text(), list(after.values())))
    rows = written["gpu"]["resourcesByType"]
    assert {key: row["cpu"] for key, row in rows.items()} == {key: str(row.cpu_request) for key, row in after.items()}
    for key, row in after.items():
        if factor < 1:
            assert row.cores_needed < before[key].cores_needed and row.busy_share >= before[key].busy_share
        else:
            assert row.cores_needed > before[key].cores_needed and row.busy_share <= before[key].busy_share
    assert {key: row["memory"] for key, row in rows.items()} == {
        key: row["memory"] for key, row in chart_rows().items()
    }


def test_gpus_without_nvenc_are_sized_for_the_cpu_encoder() -> None:
    rows = {row.gpu.key: row for row in pod_sizing.sizings(pod_sizing.read_costs(), pod_sizing.gpu_rate())}

    assert {key for key, row in rows.items() if not row.nvenc} == {"a100", "h100", "h200"}
    table = pod_sizing.markdown(list(rows.values()), pod_sizing.read_costs(), pod_sizing.gpu_rate())
    assert "stated, not measured here" in table


def _gpu_check_report(gpu_name: str, detector_ms: float, swapper_ms: float) -> dict[str, object]:
    """What bench/gpu_check.sh writes, cut to what the sizing reads: each graph's PyTorch rows."""

    def runs(best_ms: float) -> list[dict[str, object]]:
        return [
            {"precision": "fp32", "batch_size": 16, "ms_per_item": best_ms / 3},  # fp32 is not what the pods run
            {"precision": "fp16", "batch_size": 1, "ms_per_item": best_ms * 2},
            {"precision": "fp16", "batch_size": 16, "ms_per_item": best_ms},
        ]

    return {
        "gpu": {"name": gpu_name},
        "engine_torch": {
            "models": {
                "RetinaFace detector (640x384)": {"runs": runs(detector_ms)},
                "inswapper stand-in (128 px)": {"runs": runs(swapper_ms)},
            }
        },
    }


def test_a_gpu_checks_measured_rate_replaces_the_stated_one_for_every_gpu_type(tmp_path: Path) -> None:
    """Once bench/gpu_check.sh has run on one GPU, its detector + swapper time sets that GPU's rate (the fastest fp16
    batch, one of each a frame) and every other type's by its fp16 peak; the table says measured, and where from."""
    report = _gpu_check_report("NVIDIA H100 80GB HBM3", detector_ms=0.5, swapper_ms=2.0)
    path = tmp_path / "engine-gpu.json"
    path.write_text(json.dumps(report))

    rate = pod_sizing.gpu_rate(path)

    assert rate.measured and rate.fps == pytest.approx(400.0)
    rows = {row.gpu.key: row for row in pod_sizing.sizings(pod_sizing.read_costs(), rate)}
    assert rows["h100"].gpu_fps == pytest.approx(400.0)
    assert rows["l4"].gpu_fps == pytest.approx(400.0 * 121.0 / 989.0)
    stated = {row.gpu.key: row for row in pod_sizing.sizings(pod_sizing.read_costs(), pod_sizing.STATED_RATE)}
    assert rows["l4"].cores_needed < stated["l4"].cores_needed  # 48.9 fps measured-and-scaled against 120 stated
    table = pod_sizing.markdown(list(rows.values()), pod_sizing.read_costs(), rate)
    assert "GPU fps (measured)" in table and "**measured** on NVIDIA H100 80GB HBM3" in table


@pytest.mark.parametrize(
    "report",
    [
        {"gpu": {"name": "NVIDIA H100 80GB HBM3"}, "engine_torch": {"error": "PyTorch sees no CUDA device"}},
        _gpu_check_report("NVIDIA GeForce RTX 4090", detector_ms=0.5, swapper_ms=2.0),  # no row of the chart
    ],
)
def test_without_a_usable_measurement_the_stated_rate_stays(tmp_path: Path, report: dict[str, object]) -> None:
    path = tmp_path / "engine-gpu.json"
    path.write_text(json.dumps(report))

    assert pod_sizing.gpu_rate(path) == pod_sizing.STATED_RATE
    assert pod_sizing.gpu_rate(tmp_path / "absent.json") == pod_sizing.STATED_RATE
