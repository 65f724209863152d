from __future__ import annotations

import subprocess
from pathlib import Path

from demo_airflow import DAGS_FOLDER, airflow_env, run_succeeded, swap_conf


def test_isolated_home_uses_this_projects_dags_and_facefusion_settings(tmp_path: Path) -> None:
    env = airflow_env(tmp_path / "home", settings={"retry_delay_seconds": "1"})

    assert env["AIRFLOW_HOME"] == str(tmp_path / "home")
    assert Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) == DAGS_FOLDER
    assert (DAGS_FOLDER / "facefusion_swap.py").exists()
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert env["AIRFLOW__FACEFUSION__RETRY_DELAY_SECONDS"] == "1"


def test_conf_has_the_dags_shape() -> None:
    assert swap_conf(["/f.png"], "/in.mp4", "/out.mp4", {"segment_size": 8}) == {
        "source_uris": ["/f.png"],
        "target_uri": "/in.mp4",
        "output_uri": "/out.mp4",
        "segment_size": 8,
    }


def _result(code: int, log: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["airflow"], code, stdout="", stderr=log)


def test_success_needs_exit_zero_and_a_successful_run() -> None:
    finished = "DagRun Finished: dag_id=facefusion_swap, run_duration=8.3, state=success, run_type=manual"
    assert run_succeeded(_result(0, finished))
    assert not run_succeeded(_result(1, finished))
    assert not run_succeeded(_result(0, finished.replace("state=success", "state=failed")))
