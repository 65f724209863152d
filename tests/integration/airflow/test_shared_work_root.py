"""One work root shared by deployments that know nothing of each other (docs/protocol.md, "One liveness rule"): two
Airflow installations, each with its own metadata database, and a ``facefusion-worker run`` beside an Airflow. Each
judges the other's lease by the rule alone; no cleanup removes work under a live run, and every output is whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from airflow_harness import TEST_SETTINGS, count_frames, frame_md5s, make_clip, make_image
from demo_airflow import airflow_env, dags_test, init_home, run_succeeded, swap_conf
from faults import fault_env

pytestmark = pytest.mark.slow

SEGMENT = 8
OPTIONS = {"processors": [], "segment_size": SEGMENT, "output_video_quality": 100}


def _home(tmp_path: Path, name: str, work_root: str, **settings: str) -> dict[str, str]:
    env = airflow_env(tmp_path / name, settings={**TEST_SETTINGS, "work_root": work_root, **settings})
    env.pop("FACEFUSION_TEST_FAULTS", None)
    init_home(env)
    return env


def _work_folders(work_root: Path) -> list[str]:
    return sorted(path.name for path in (work_root / "work").glob("*")) if (work_root / "work").exists() else []


def test_two_airflows_with_their_own_databases_share_a_work_root(tmp_path: Path) -> None:
    """B starts first and its merge fails once (retried after 30 s); A, started 4 s later over the same input, finishes
    meanwhile. A's cleanup cannot look B's run up (another database): by B's live lease it keeps the work, and B's
    retried merge finds every segment."""
    work_root = tmp_path / "shared-work"
    target = make_clip(tmp_path / "in" / "clip.mp4", 6 * SEGMENT, gop=SEGMENT)
    source = make_image(tmp_path / "in" / "face.png")
    first = _home(tmp_path, "airflow-b", work_root.as_uri(), retry_delay_seconds="30", retry_exponential_backoff="1")
    first.update(fault_env([{"command": "merge", "tries": [1], "retryable": True}]))
    second = _home(tmp_path, "airflow-a", work_root.as_uri())
    outputs = {"b": tmp_path / "out" / "b.mp4", "a": tmp_path / "out" / "a.mp4"}
    results: dict[str, subprocess.CompletedProcess[str]] = {}

    def run(name: str, env: dict[str, str]) -> None:
        conf = swap_conf([str(source)], str(target), str(outputs[name]), OPTIONS)
        results[name] = dags_test(conf, env, timeout=400)

    threads = [threading.Thread(target=run, args=("b", first)), threading.Thread(target=run, args=("a", second))]
    threads[0].start()
    time.sleep(4)
    threads[1].start()
    for thread in threads:
        thread.join()

    texts = {name: result.stdout + result.stderr for name, result in results.items()}
    for name, result in results.items():
        assert run_succeeded(result), f"run {name}:\n{texts[name][-6000:]}"
    assert "still use it" in texts["a"], texts["a"][-4000:]  # A's cleanup kept the work for B's live lease
    assert "injected transient failure (merge" in texts["b"]
    assert count_frames(outputs["a"]) == count_frames(outputs["b"]) == 6 * SEGMENT
    assert frame_md5s(outputs["a"]) == frame_md5s(outputs["b"])
    assert _work_folders(work_root) == []  # the last run's cleanup removed it


def test_a_cli_run_paused_beside_an_airflow_run_keeps_its_work_and_finishes_whole(
    dags_test_env: dict[str, str], tmp_path: Path
) -> None:
    """The CLI run is paused (SIGSTOP) after its second segment; the Airflow run over the same input takes its lapsed
    claims over and finishes; its cleanup keeps the work for the CLI's live lease (a CLI run has no DAG run to look
    up). Resumed, the CLI finishes with every frame, then removes the work."""
    work_root = tmp_path / "shared-work"
    target = make_clip(tmp_path / "in" / "clip.mp4", 6 * SEGMENT, gop=SEGMENT)
    source = make_image(tmp_path / "in" / "face.png")
    cli_output, airflow_output = tmp_path / "out" / "cli.mp4", tmp_path / "out" / "airflow.mp4"
    short_claims = {"FACEFUSION_CLAIM_LEASE_SECONDS": "3"}
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "facefusion_provider.worker",
            "run",
            "--source",
            str(source),
            "--target",
            str(target),
            "--output",
            str(cli_output),
            "--work-root",
            str(work_root),
            "--processors",
            "--segment-size",
            str(SEGMENT),
            "--output-video-quality",
            "100",
        ],
        env={
            **os.environ,
            **short_claims,
            "FACEFUSION_RUN_LEASE_SECONDS": "120",
            **fault_env([{"command": "swap-span", "indexes": [0], "frame_delay": 0.1}]),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stderr is not None
    committed, seen = 0, []
    while committed < 2:
        line = cli.stderr.readline()
        assert line, f"the CLI run ended early: {''.join(seen)[-3000:]}"
        seen.append(line)
        committed += " committed" in line and "segment " in line
    os.kill(cli.pid, signal.SIGSTOP)
    try:
        env = {**dags_test_env, **short_claims, "AIRFLOW__FACEFUSION__WORK_ROOT": work_root.as_uri()}
        time.sleep(4)  # the paused run's claims lapse; its run lease (120 s) does not
        result = dags_test(swap_conf([str(source)], str(target), str(airflow_output), OPTIONS), env, timeout=400)
        text = result.stdout + result.stderr
        assert run_succeeded(result), text[-6000:]
        assert "still use it" in text, text[-4000:]  # kept for the CLI's lease
        assert _work_folders(work_root) != []
    finally:
        os.kill(cli.pid, signal.SIGCONT)
    out, err = cli.communicate(timeout=300)
    assert cli.returncode == 0, "".join(seen) + err[-4000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["frame_count"] == count_frames(cli_output) == count_frames(airflow_output) == 6 * SEGMENT
    assert frame_md5s(cli_output) == frame_md5s(airflow_output)
    assert _work_folders(work_root) == []  # the CLI, last to finish, removed it
