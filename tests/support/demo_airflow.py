"""Run the ``facefusion_swap`` DAG once through Airflow on the embedded default, with ``airflow dags test``.

An isolated ``AIRFLOW_HOME`` (SQLite metadata, local files, the local backend) is set up under ``<out>/airflow`` the
first time (``airflow db migrate``; no pool or other setup). Then the DAG runs in one process with the conf JSON::

    PYTHONPATH=tests/support python -m demo_airflow --out out    # the demo clip: out/demo.mp4 + out/demo.preview.jpg
    PYTHONPATH=tests/support python -m demo_airflow --source face.png --target in.mp4 --output out/swapped.mp4 \\
        --options '{"segment_size": 64}'

It only shells out to Airflow (the demo clip is made by ``demo``, beside it, imported only for that), so the
tests and the benchmark reuse its functions freely.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DAG_ID = "facefusion_swap"
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
# [scheduler] scheduler_idle_sleep_time (Airflow's default 1 s): how long an idle scheduler loop sleeps, so how late a
# finished task's downstream is queued; 0.2 s measured 5 % more of a core on an idle scheduler and 1.4 % on Postgres.
SCHEDULER_IDLE_SLEEP_VARIABLE = "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"
SCHEDULER_IDLE_SLEEP_SECONDS = "0.2"


def airflow_env(
    home: Path, *, dags_folder: Path = DAGS_FOLDER, settings: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of an isolated Airflow: its own home and SQLite DB, this project's DAGs, no examples.
    ``settings`` are ``[facefusion]`` keys (``{"retry_delay_seconds": "1"}``)."""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home.absolute()),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder.absolute()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        # As the compose file and the Helm values ship it: a task's downstream starts within 0.2 s, not up to 1 s.
        SCHEDULER_IDLE_SLEEP_VARIABLE: SCHEDULER_IDLE_SLEEP_SECONDS,
    }
    for key, value in (settings or {}).items():
        env[f"AIRFLOW__FACEFUSION__{key.upper()}"] = value
    return env


def airflow(args: Sequence[str], env: Mapping[str, str], *, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the ``airflow`` CLI of this Python (``python -m airflow``), capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def init_home(env: Mapping[str, str]) -> None:
    """Create the metadata DB (once); nothing else: the DAG runs on a fresh Airflow as it is."""
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    result = airflow(["db", "migrate"], env)
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{result.stdout}\n{result.stderr}")


def swap_conf(
    sources: Sequence[str], target: str, output: str, options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The DAG's conf JSON, flat as the trigger form sends it."""
    return {"source_uris": list(sources), "target_uri": target, "output_uri": output, **(options or {})}


def dags_test(
    conf: Mapping[str, Any], env: Mapping[str, str], *, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    """One run of the DAG in this process's Airflow (``airflow dags test facefusion_swap -c JSON``)."""
    return airflow(["dags", "test", DAG_ID, "-c", json.dumps(conf)], env, timeout=timeout)


def run_succeeded(result: subprocess.CompletedProcess[str]) -> bool:
    """``dags test`` reports the run's final state in its log; its exit code alone does not say."""
    text = result.stdout + result.stderr
    return result.returncode == 0 and "state=success" in text.replace("state=DagRunState.SUCCESS", "state=success")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path("out"), help="folder of the demo inputs, output and Airflow home"
    )
    parser.add_argument("--source", action="append", help="source face image (repeatable); default: the demo face")
    parser.add_argument("--target", help="target video; default: the demo clip")
    parser.add_argument("--output", help="output video; default: <out>/demo.mp4")
    parser.add_argument("--options", default="{}", help="options JSON, keyed by option name")
    parser.add_argument("--home", type=Path, help="isolated AIRFLOW_HOME; default: <out>/airflow")
    args = parser.parse_args(argv)
    out = args.out.absolute()
    if bool(args.source) != bool(args.target):
        parser.error("give --source and --target together, or neither for the demo clip")
    if args.target:
        sources, target = [str(Path(s).absolute()) for s in args.source], str(Path(args.target).absolute())
    else:
        from demo import make_demo_inputs

        source, target = make_demo_inputs(str(out))
        sources = [source]
    output = str(Path(args.output).absolute()) if args.output else str(out / "demo.mp4")
    env = airflow_env(args.home or out / "airflow")
    init_home(env)
    conf = swap_conf(sources, target, output, json.loads(args.options))
    print(f"airflow dags test {DAG_ID} -c '{json.dumps(conf)}'  (AIRFLOW_HOME={env['AIRFLOW_HOME']})", flush=True)
    began = time.perf_counter()
    result = dags_test(conf, env)
    ok = run_succeeded(result)
    if not ok:
        sys.stdout.write(result.stdout[-6000:])
        sys.stderr.write(result.stderr[-6000:])
    print(f"{DAG_ID}: {'success' if ok else 'FAILED'} in {time.perf_counter() - began:.1f} s; output {output}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
