"""A run's serial seconds, step by step, on ``airflow dags test``: trigger to the first frame, the last frame to the
output. Optionally an older commit's code against this tree's, alternating in one invocation.

Each run is the demo (``tests/support/demo.py``: 300 frames of carphone at 352x288 with sound, the astronaut's face,
the default swap) through ``airflow dags test facefusion_swap`` on a fresh work root, with ``[facefusion]
worker_command`` set to ``bench/serial_probe.py``: every worker process records its start, its CLI's import, a few
named steps, its first and last frame at the encoder, its CPU (user + sys) and its exit. The task instances' start and
end come from the run's metadata database. Python runs with its bytecode cached (as in the worker image, which
compiles it at build time; this machine sets ``PYTHONDONTWRITEBYTECODE``), after one discarded run per tree. ``--baseline COMMIT`` takes that commit's ``plugins/`` and ``dags/`` (``git
archive``) and runs them with the same virtual environment, alternating with this tree's, ``--repeats`` times each.

``--stack multiprocess`` measures the same steps on the multi-process stack instead: scheduler (LocalExecutor),
dag-processor, API server and triggerer as separate processes on a private Postgres
(``tests/integration/airflow/multiprocess_harness.py``), the demo triggered over REST, each run on an empty work root,
the task instances from the stack's Postgres. Each tree runs on stacks of its own, one stack at a time (two would
share the cores): a stack is started for each block of ``--block-runs`` runs, its first run discarded, the trees'
blocks alternating; the scheduler's CPU is taken per run and, idle, after each block.

    python bench/bench_serial.py --baseline 83465c3 --repeats 3   # writes bench/results/serial-seconds.{json,md}
    python bench/bench_serial.py --stack multiprocess --baseline 83465c3 --repeats 3  # bench/results/serial-seconds-stack.*
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import resource
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(BENCH_DIR))

from demo import DEMO_SEGMENT_SIZE, make_demo_inputs  # noqa: E402
from demo_airflow import (  # noqa: E402
    SCHEDULER_IDLE_SLEEP_VARIABLE,
    airflow,
    airflow_env,
    init_home,
    run_succeeded,
    swap_conf,
)
from serial_probe import LOG_VARIABLE  # noqa: E402
from worker_runs import machine, write_report  # noqa: E402

DAG_ID = "facefusion_swap"
PROBE = BENCH_DIR / "serial_probe.py"


def code_of(commit: str, folder: Path) -> Path:
    """``plugins/`` and ``dags/`` of ``commit``, extracted under ``folder`` (once)."""
    if not (folder / "plugins").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", commit, "plugins", "dags"], check=True, stdout=subprocess.PIPE
        )
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def task_instances(
    connection: Any, run_id: str | None = None, mark: str = "?"
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The run's (default: the latest run's) start and end and its task instances' (wall clock, seconds since the
    epoch), from a DB-API connection to Airflow's database whose parameter mark is ``mark`` (SQLite ``?``, psycopg2
    ``%s``)."""

    def at(value: str | datetime | None) -> float:
        if not value:
            return 0.0
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()  # SQLite's: naive UTC

    cursor = connection.cursor()
    cursor.execute(
        f"select run_id, start_date, end_date from dag_run where dag_id = {mark}"
        + (f" and run_id = {mark}" if run_id else "")
        + " order by id desc limit 1",
        (DAG_ID, run_id) if run_id else (DAG_ID,),
    )
    run_id, started, ended = cursor.fetchone()
    cursor.execute(
        "select task_id, map_index, start_date, end_date, state from task_instance "
        f"where dag_id = {mark} and run_id = {mark} order by start_date",
        (DAG_ID, run_id),
    )
    rows = cursor.fetchall()
    tasks = [
        {"task": task, "index": index, "start": at(start), "end": at(end), "state": state}
        for task, index, start, end, state in rows
    ]
    return {"start": at(started), "end": at(ended)}, tasks


def probe_env(code: Path, folder: Path, probe_log: Path) -> dict[str, str]:
    """Workers of ``code`` under ``serial_probe.py``, logging to ``probe_log``, their bytecode cached as the worker
    image has it (UV_COMPILE_BYTECODE): compiled once, in a cache of this benchmark's own (with
    ``PYTHONDONTWRITEBYTECODE`` dropped)."""
    return {
        "PYTHONPATH": os.pathsep.join([str(code / "plugins"), str(BENCH_DIR)]),
        "PYTHONPYCACHEPREFIX": str(folder / "pycache"),
        LOG_VARIABLE: str(probe_log),
    }


def one_run(
    code: Path, label: str, folder: Path, inputs: tuple[str, str], options: Mapping[str, Any]
) -> dict[str, Any]:
    """One ``dags test`` of ``code`` (its plugins and dags) on a fresh work root; its timeline."""
    run = folder / f"{label}-{time.time_ns()}"
    run.mkdir(parents=True)
    probe_log = run / "probe.jsonl"
    env = airflow_env(
        folder / f"airflow-{label}",
        dags_folder=code / "dags",
        settings={"work_root": (run / "work").as_uri(), "worker_command": shlex.join([sys.executable, str(PROBE)])},
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(probe_env(code, folder, probe_log))
    if not (Path(env["AIRFLOW_HOME"]) / "airflow.db").exists():
        init_home(env)
    source, target = inputs
    conf = swap_conf([source], target, str(run / "output.mp4"), options)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.time()
    result = airflow(["dags", "test", DAG_ID, "-c", json.dumps(conf)], env, timeout=1800)
    wall = time.time() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    (run / "dags_test.log").write_text(result.stdout + result.stderr)
    if not run_succeeded(result):
        raise RuntimeError(f"{label}: the run failed; see {run / 'dags_test.log'}")
    with contextlib.closing(sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db")) as connection:
        dag_run, tasks = task_instances(connection)
    workers = [json.loads(line) for line in probe_log.read_text().splitlines()]
    return {
        "label": label,
        "command_wall_s": round(wall, 3),
        "command_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3),
        "load_1min": round(os.getloadavg()[0], 2),
        "dag_run": dag_run,
        "tasks": tasks,
        "workers": workers,
        "steps": steps(dag_run, tasks, workers),
    }


# Airflow's own default, which every tree before this setting shipped: a baseline's stack runs with it.
BASELINE_STACK_ENV = {SCHEDULER_IDLE_SLEEP_VARIABLE: "1"}
IDLE_WINDOW_S = 15.0  # how long a stack is watched idle after its runs, for the scheduler's and Postgres' CPU


def stack_runs(
    trees: Mapping[str, Path],
    folder: Path,
    inputs: tuple[str, str],
    options: Mapping[str, Any],
    repeats: int,
    *,
    block_runs: int,
) -> list[dict[str, Any]]:
    """``repeats`` runs of the demo on multi-process stacks of each tree, one stack at a time, on one Postgres (a
    database per tree): blocks of ``block_runs`` runs, each on a stack started for it, after one discarded run; the
    trees' blocks alternate (ABBA). Each run triggered over REST on an empty work root; their timelines."""
    sys.path.insert(0, str(REPO / "tests" / "integration" / "airflow"))
    from multiprocess_harness import PostgresCluster

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    postgres = PostgresCluster()
    try:
        postgres.start()
        databases = {label: f"bench_{label}" for label in trees}
        for database in databases.values():
            postgres.create_database(database)
        runs: list[dict[str, Any]] = []
        done = dict.fromkeys(trees, 0)
        for block in range(2 * math.ceil(repeats / block_runs)):
            for label in list(trees)[:: 1 if block % 2 == 0 else -1]:
                count = min(block_runs, repeats - done[label])
                if count > 0:
                    where = folder / f"{label}-{block}"
                    runs += stack_block(label, trees[label], where, postgres, databases[label], inputs, options, count)
                    done[label] += count
        return runs
    finally:
        postgres.stop()


def stack_block(  # noqa: PLR0917 - one block's inputs, passed on once
    label: str,
    code: Path,
    folder: Path,
    postgres: Any,
    database: str,
    inputs: tuple[str, str],
    options: Mapping[str, Any],
    count: int,
) -> list[dict[str, Any]]:
    """One stack of ``code`` started, one discarded run and ``count`` measured ones, then the stack watched idle for
    ``IDLE_WINDOW_S`` (its scheduler's and Postgres' CPU, on the last run's record), then stopped."""
    import psycopg2
    from multiprocess_harness import AirflowCluster

    work, probe_log = folder / "work", folder / "probe.jsonl"
    stack_env = {"AIRFLOW__CORE__DAGS_FOLDER": str(code / "dags"), **(BASELINE_STACK_ENV if code != REPO else {})}
    cluster = AirflowCluster(
        folder / "airflow",
        postgres.url(database),
        {"work_root": work.as_uri(), "worker_command": shlex.join([sys.executable, str(PROBE)])},
        {**probe_env(code, folder.parent, probe_log), **stack_env},
        drop_env=("PYTHONDONTWRITEBYTECODE",),
    )
    try:
        print(f"{label}: stack healthy in {cluster.start():.1f} s: logs in {cluster.home}", flush=True)
        scheduler = cluster.components["scheduler"].process.pid
        runs = []
        for number in range(count + 1):
            shutil.rmtree(work, ignore_errors=True)  # no segment of the last run to find
            probe_log.unlink(missing_ok=True)
            run = folder / f"run-{number}"
            run.mkdir()
            scheduler_cpu = process_cpu_s([scheduler])
            triggered = time.time()
            run_id = cluster.trigger(swap_conf([inputs[0]], inputs[1], str(run / "output.mp4"), options))
            if (state := cluster.wait(run_id, timeout=1800)) != "success":
                raise RuntimeError(f"stack run {run_id}: {state} {cluster.task_states(run_id)}\n{cluster.log_tail()}")
            scheduler_cpu = process_cpu_s([scheduler]) - scheduler_cpu
            connection = psycopg2.connect(
                host="127.0.0.1", port=postgres.port, user=database, password=database, dbname=database
            )
            with contextlib.closing(connection):
                dag_run, tasks = task_instances(connection, run_id, mark="%s")
            dag_run["triggered"] = triggered
            workers = [json.loads(line) for line in probe_log.read_text().splitlines()]
            timeline = {
                "label": label,
                "run_id": run_id,
                "trigger_to_run_end_s": round(dag_run["end"] - triggered, 3),
                "scheduler_cpu_s": round(scheduler_cpu, 3),
                "load_1min": round(os.getloadavg()[0], 2),
                "dag_run": dag_run,
                "tasks": tasks,
                "workers": workers,
                "steps": steps(dag_run, tasks, workers),
            }
            print(json.dumps({"label": label, "run": number, "warm-up": number == 0, **timeline["steps"]}), flush=True)
            if number:
                runs.append(timeline)
        time.sleep(2.0)  # the run's last task gone: the window sees an idle stack
        before = process_cpu_s([scheduler]), process_cpu_s(postgres.processes(), children=True)
        time.sleep(IDLE_WINDOW_S)
        after = process_cpu_s([scheduler]), process_cpu_s(postgres.processes(), children=True)
        runs[-1]["scheduler_idle_cpu_pct"] = round(100 * (after[0] - before[0]) / IDLE_WINDOW_S, 1)
        runs[-1]["postgres_idle_cpu_pct"] = round(100 * (after[1] - before[1]) / IDLE_WINDOW_S, 1)
        print(
            f"{label}: idle CPU {runs[-1]['scheduler_idle_cpu_pct']} % scheduler, "
            f"{runs[-1]['postgres_idle_cpu_pct']} % Postgres",
            flush=True,
        )
        return runs
    finally:
        if left := cluster.stop():
            print(f"processes outlived the stack: {left}", file=sys.stderr)


def process_cpu_s(pids: Sequence[int], *, children: bool = False) -> float:
    """The CPU seconds (user + sys) of the live processes ``pids``, with ``children`` those of their reaped children
    too (``/proc/PID/stat`` fields 14-17)."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(value) for value in fields[11 : 15 if children else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def worker_of(workers: Sequence[dict[str, Any]], command: str, first: bool = True) -> dict[str, Any] | None:
    mine = [worker for worker in workers if worker["argv"] and worker["argv"][0] == command]
    return (mine[0] if first else mine[-1]) if mine else None


def steps(
    dag_run: Mapping[str, float], tasks: Sequence[dict[str, Any]], workers: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The serial steps, wall seconds (``cpu:`` keys: the worker process's CPU, user + sys)."""
    task = {(row["task"], row["index"]): row for row in tasks}
    validate, prepare, plan = task[("validate", -1)], task[("prepare", -1)], task[("plan", -1)]
    # The first span: the one whose worker reaches a frame first (on the stack the spans run at once, and their
    # workers log in the order they exit), else the first span task to start (dags test runs them in order).
    spanning = min(
        (worker for worker in workers if "first_frame_at" in worker), key=lambda w: w["first_frame_at"], default=None
    )
    span = task.get(("swap_span", span_index(spanning))) or min(
        (row for row in tasks if row["task"] == "swap_span"), key=lambda row: row["start"]
    )
    merge, cleanup = task[("merge", -1)], task[("cleanup", -1)]
    out: dict[str, Any] = {}

    def add(name: str, value: float) -> None:
        out[name] = round(value, 3)

    trigger = dag_run.get("triggered", dag_run["start"])  # the stack's REST call; dags test's run start
    if "triggered" in dag_run:
        add("REST trigger to run start (the scheduler's)", dag_run["start"] - trigger)
    add("validate task", validate["end"] - validate["start"])
    add("trigger to validate (run start to its first task)", validate["start"] - trigger)
    add("prepare task", prepare["end"] - prepare["start"])
    prepare_worker = worker_of(workers, "prepare")
    if prepare_worker:
        worker_parts(add, "prepare", prepare, prepare_worker)
    add("plan task", plan["end"] - plan["start"])
    add("gaps between the tasks, prepare to the first span", span["start"] - prepare["end"] - out["plan task"])
    if spanning:
        worker_parts(add, "first span", span, spanning, until="first_frame_at")
        load = spanning.get("summary", {}).get("timings", {}).get("load_s", 0.0)
        add("first span: of its imports to the first frame, the processors' load", load)
        add("trigger to first frame", spanning["first_frame_at"] - trigger)
    last_frame = max(worker.get("last_frame_at", 0.0) for worker in workers)
    add("last frame to the merge task (the span's commit, the other spans' tasks)", merge["start"] - last_frame)
    add("merge task", merge["end"] - merge["start"])
    merge_worker = worker_of(workers, "merge")
    if merge_worker:
        worker_parts(add, "merge", merge, merge_worker)
        timings = merge_worker.get("summary", {}).get("timings", {})
        for key, value in timings.items():
            if isinstance(value, int | float) and key.endswith("_s"):
                add(f"merge: worker's own {key}", value)
    add("last frame to output (merge task end)", merge["end"] - last_frame)
    add("cleanup task (after the output)", cleanup["end"] - merge["end"])
    add(
        "serial: trigger to first frame + last frame to output",
        out.get("trigger to first frame", 0.0) + out["last frame to output (merge task end)"],
    )
    return out


def span_index(worker: Mapping[str, Any] | None) -> int | None:
    """The ``--span`` of a ``swap-span`` worker's command (its task's map index); None without one."""
    argv = worker["argv"] if worker else []
    return int(argv[argv.index("--span") + 1]) if "--span" in argv[:-1] else None


def worker_parts(
    add: Any, name: str, task: Mapping[str, float], worker: Mapping[str, Any], until: str = "exited_at"
) -> None:
    add(f"{name}: task start to worker process start (Airflow, launch)", worker["started_at"] - task["start"])
    add(f"{name}: interpreter start", worker["probe_at"] - worker["started_at"])
    add(f"{name}: CLI imports", worker["imported_at"] - worker["probe_at"])
    add(f"cpu: {name}: CLI imports", worker["import_cpu_s"])
    for step, value in sorted(worker.get("steps", {}).items()):
        add(f"{name}: {step}", value["wall_s"])
        add(f"cpu: {name}: {step}", value["cpu_s"])
    if until == "exited_at":
        add(f"{name}: worker process (start to exit)", worker["exited_at"] - worker["started_at"])
        add(f"cpu: {name}: worker process", worker["cpu_s"])
        add(f"{name}: worker exit to task end (Airflow)", task["end"] - worker["exited_at"])
    else:
        add(f"{name}: worker process start to first frame", worker[until] - worker["started_at"])
        add(f"{name}: imports to first frame", worker[until] - worker["imported_at"])


# --- the scaling model's serial inputs, measured in each tree's own process --------------------------------------------

CLIP_FRAMES = 600  # 20 s of 1080p at 30 fps: three keyframe intervals, so prepare's seek checks decode as on an hour
MODEL_SEGMENT = 512  # the scaling model's segment size


def model_inputs_here(folder: Path, source: str, clip: str, repeats: int) -> dict[str, Any]:
    """In this process (the tree on ``PYTHONPATH``): prepare's work on the 1080p clip as a standing worker does it
    (imports done: the first call is not counted), wall and CPU seconds, and its two parts alone in CPU seconds (the
    target's probe and checks, the sources' identity); and the index join's CPU (``scaling_measure.join_costs``)."""
    from committed import work_uri_for
    from scaling_measure import join_costs

    from facefusion_provider import worker
    from facefusion_provider.options import Options
    from facefusion_provider.work.access import checked_uris

    preparing = importlib.import_module(
        "facefusion_provider.worker.prepare"
    )  # the module (the package names its function)

    options = Options(segment_size=MODEL_SEGMENT)
    uris = checked_uris([source], clip, None)
    samples = []
    for number in range(repeats + 1):
        root = folder / f"prepare-{os.getpid()}-{number}"
        work_uri = work_uri_for(root.as_uri(), [source], clip, segment_size=MODEL_SEGMENT)
        wall, cpu = time.perf_counter(), time.process_time()
        worker.prepare(work_uri, [source], clip, segment_size=MODEL_SEGMENT)
        sample = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
        shutil.rmtree(root)
        cpu = time.process_time()
        probed = preparing._probe_video_target(uris.target_uri, options)
        sample["target_checks_cpu_s"] = time.process_time() - cpu
        cpu = time.process_time()
        preparing._identity(uris, options, probed[0], None)
        sample["identity_cpu_s"] = time.process_time() - cpu
        samples.append(sample)
    join_folder = folder / f"join-{os.getpid()}"
    join_folder.mkdir(parents=True)
    join = join_costs(join_folder)
    shutil.rmtree(join_folder)
    return {"prepare": samples[1:], "join": {"per_segment_s": join.per_segment_s, "per_frame_s": join.per_frame_s}}


def model_inputs(trees: Mapping[str, Path], folder: Path, source: str, repeats: int) -> dict[str, list[dict[str, Any]]]:
    """``model_inputs_here`` in a process of each tree, alternating, ``repeats`` times each."""
    from scaling_measure import write_clip_1080p

    clip = folder / "clip-1080p.mp4"
    if not clip.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_clip_1080p(clip, CLIP_FRAMES)
    found: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    for repeat in range(repeats):
        order = list(trees.items())[:: 1 if repeat % 2 == 0 else -1]
        for label, code in order:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code / "plugins"), str(BENCH_DIR)])}
            command = [sys.executable, str(Path(__file__)), "--inputs-here", str(folder), source, str(clip)]
            done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            found[label].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps({"label": label, **found[label][-1]}), flush=True)
    return found


def summarise_inputs(found: Mapping[str, list[dict[str, Any]]]) -> dict[str, dict[str, list[float]]]:
    table: dict[str, dict[str, list[float]]] = {}
    for label, results in found.items():
        for result in results:
            for key in ("wall_s", "cpu_s", "target_checks_cpu_s", "identity_cpu_s"):
                values = [sample[key] for sample in result["prepare"]]
                table.setdefault(f"prepare's work, 1080p: {key}", {}).setdefault(label, []).append(min(values))
            for key, value in result["join"].items():
                table.setdefault(f"index join CPU {key}", {}).setdefault(label, []).append(value)
    return table


# --- the standing workers' path: a run announced unprepared, on real `serve` processes ---------------------------

STANDING_SEGMENTS = 96  # of 8 frames, each frame an injected 0.01 s: 7.7 s of frames, free runs past PIECE_SEGMENTS
STANDING_FRAME_DELAY = 0.01
STANDING_WORKERS = 2  # of four started on this machine, two exited at once (code 0)


def standing_run(code: Path, folder: Path, *, warm: bool) -> dict[str, Any]:
    """``STANDING_WORKERS`` idle, warm standing workers of ``code``; a run announced by its lease alone (as
    ``validate`` writes it): one prepares the work from the lease, the others join. Seconds after the lease:
    work.json, the first and the last worker's first claim, the output; and the segments each worker claimed.
    ``warm``: they worked a prepared run first and idled; else the run is their first (started together, as KEDA
    starts them: they look in one phase, and the preparer's first prepare imports the engine)."""
    import bench_calibration as calibration
    from committed import hold_run_lease, work_uri_for
    from faults import fault_env
    from synth import VideoSpec, pattern_frames, write_video

    from facefusion_provider import worker
    from facefusion_provider.contract import CLAIM_LEASE_SECONDS_VARIABLE
    from facefusion_provider.work.layout import RootLayout, WorkLayout, output_marker_uri, parse_claim_name
    from facefusion_provider.work.records import Claim

    folder.mkdir(parents=True)
    root, spec, options = str(folder / "work"), VideoSpec(), calibration.OPTIONS
    runs = []
    for number, segments in enumerate((16, STANDING_SEGMENTS) if warm else (STANDING_SEGMENTS,)):
        target = str(folder / f"target-{number}.mp4")
        write_video(target, spec, pattern_frames(segments * calibration.SEGMENT_FRAMES, spec.width, spec.height))
        runs.append((target, WorkLayout(work_uri_for(root, [], target, **options)), str(folder / f"out-{number}.mp4")))
    if warm:
        worker.prepare(runs[0][1].work_uri, [], runs[0][0], **options)  # the warm-up run: both workers join it
    # The slow frames: tests/support's fault site installs them, where an older tree's package does not read them itself.
    faults = fault_env([{"command": "swap-span", "indexes": [0], "frame_delay": STANDING_FRAME_DELAY}])
    own_faults = (code / "plugins" / "facefusion_provider" / "worker" / "faults.py").exists()
    site = [] if own_faults else [faults["PYTHONPATH"]]
    env = {
        **os.environ,
        **faults,
        "PYTHONPATH": os.pathsep.join([*site, str(code / "plugins"), str(BENCH_DIR)]),
        CLAIM_LEASE_SECONDS_VARIABLE: "600",
    }
    command = [sys.executable, "-m", "facefusion_provider.worker", "serve", "--work-root", root, "--idle-exit", "60"]
    processes = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    try:
        leases_dir = calibration.local(RootLayout.of(root).workers_dir)
        calibration.wait_until(lambda: bool(calibration.worker_leases(leases_dir)), processes, 120, "a lease")
        time.sleep(8.0)  # the others up too (imports on a loaded machine), all idle at the signal
        for number, (target, layout, output) in enumerate(runs):
            hold_run_lease(layout, f"run-{number}", target, output_uri=output, options=options)
            announced = time.time()
            marker = calibration.local(output_marker_uri(output))
            calibration.wait_until(marker.exists, processes, 180, "the output")
            time.sleep(4.0 if number < len(runs) - 1 else 0.0)  # idle: both back to their steady look
        alive = sum(process.poll() is None for process in processes)
    finally:
        for process in processes:
            process.kill()
            process.wait()
    target, layout, output = runs[-1]
    first_claims: dict[str, float] = {}
    committed_by: dict[str, int] = {}
    for path in calibration.local(layout.claims_dir).glob("*.json"):
        parsed = parse_claim_name(path.name)
        if parsed is not None and parsed[0].isdigit():
            owner = Claim.model_validate_json(path.read_bytes()).owner
            first_claims[owner] = min(first_claims.get(owner, math.inf), calibration.mtime(path) - announced)
            committed_by[owner] = committed_by.get(owner, 0) + 1
    claims = sorted(first_claims.values())
    return {
        "work_json_s": round(calibration.mtime(calibration.local(layout.work_json)) - announced, 3),
        "first_claim_s": round(claims[0], 3),
        "last_worker_first_claim_s": round(claims[-1], 3),
        "workers_joined": len(claims),
        "workers_alive": alive,
        "output_s": round(calibration.mtime(calibration.local(output_marker_uri(output))) - announced, 3),
        "segments_by_worker": sorted(committed_by.values(), reverse=True),
    }


def standing_runs(trees: Mapping[str, Path], folder: Path, repeats: int) -> dict[str, list[dict[str, Any]]]:
    """``standing_run`` warm and cold for each tree, alternating, ``repeats`` times each."""
    found: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    for repeat in range(repeats):
        for warm in (True, False):
            for label, code in list(trees.items())[:: 1 if repeat % 2 == 0 else -1]:
                found[label].append(
                    {"warm": warm, **standing_run(code, folder / f"{label}-{repeat}-{warm}", warm=warm)}
                )
                print(json.dumps({"label": label, "standing": found[label][-1]}), flush=True)
    return found


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Each step's values by label, in run order."""
    table: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for step, value in run["steps"].items():
            table.setdefault(step, {}).setdefault(run["label"], []).append(value)
        for key, name in WHOLE_RUN.items():
            if key in run:
                table.setdefault(name, {}).setdefault(run["label"], []).append(run[key])
    return table


WHOLE_RUN = {
    "command_wall_s": "whole `dags test` command (command_wall_s)",
    "command_cpu_s": "whole `dags test` command (command_cpu_s)",
    "trigger_to_run_end_s": "REST trigger to the run's end (trigger_to_run_end_s)",
    "scheduler_cpu_s": "cpu: the scheduler's main process, trigger to the run's end (scheduler_cpu_s)",
    "scheduler_idle_cpu_pct": "the scheduler's main process idle, % of a core (scheduler_idle_cpu_pct, one a stack)",
    "postgres_idle_cpu_pct": "Postgres with the stack idle, % of a core (postgres_idle_cpu_pct, one a stack)",
}


def span_of(values: Sequence[float]) -> str:
    return f"{min(values):.2f}" if len(values) == 1 else f"{min(values):.2f}-{max(values):.2f}"


def _range(values: Sequence[float], step: str) -> str:
    if "per_frame" in step or "per_segment" in step:
        return f"{min(values) * 1e6:.2f}-{max(values) * 1e6:.2f} us"
    return span_of(values)


def table_head(first: str, labels: Sequence[str]) -> list[str]:
    """A markdown table's header and rule: ``first``, then a column per label."""
    return [f"| {first} | " + " | ".join(labels) + " |", "| --- |" + " --- |" * len(labels)]


def markdown(report: dict[str, Any]) -> str:
    labels = report["labels"]
    lines = [
        "# Serial seconds per run, step by step (`airflow dags test`)",
        "",
        f"Command: `{report['command']}` ({report['machine']}).",
        "",
        "The demo (300 frames of 352x288 carphone with sound, the astronaut's face, the default swap, segments of "
        f"{DEMO_SEGMENT_SIZE}) through `airflow dags test facefusion_swap`, a fresh work root per run; every worker "
        "process is `bench/serial_probe.py` (the worker in its process, timed from the process's start). Task "
        "instances' start and end from the run's database; min-max over the runs, "
        + (f"{labels[0]} and {labels[1]} alternating in one invocation" if len(labels) > 1 else "one tree")
        + ", after a discarded warm-up run of each (bytecode cached, as the worker image has it). Wall seconds unless the step says `cpu:` (the worker process's user + sys). `dags test` runs the "
        "mapped spans one after another: the first span's worker works every segment, the other spans' tasks find "
        "theirs committed (on a cluster they run at once).",
        "",
        *table_head("step", labels),
    ]
    if report.get("stack") == "multiprocess":
        lines[0] = "# Serial seconds per run, step by step (the multi-process stack)"
        lines[4] = (
            "The demo (the same conf as the `dags test` mode: 300 frames of 352x288 carphone with sound, the "
            f"astronaut's face, the default swap, segments of {DEMO_SEGMENT_SIZE}) triggered over REST on a "
            "multi-process Airflow (scheduler with the LocalExecutor, dag-processor, API server and triggerer as "
            "separate processes on a private Postgres: `tests/integration/airflow/multiprocess_harness.py`), an empty "
            "work root per run; every worker process is `bench/serial_probe.py`. "
            + (
                f"Each tree's `plugins/` and `dags/` (`git archive` of {report['baseline']} for `before`) on stacks of "
                "its own, one stack at a time on one Postgres (a database each), in blocks of "
                f"{report.get('block_runs', 2)} runs a stack start, the trees' blocks alternating (ABBA), the same "
                "virtual environment; `before`'s stacks run with the scheduler settings it shipped (Airflow's default "
                "`[scheduler] scheduler_idle_sleep_time = 1`), `after`'s with this tree's harness settings. "
                if len(labels) > 1
                else "This tree only, one stack. "
            )
            + "Task instances' start and end from the stack's Postgres; min-max over the runs, each stack's first run "
            "discarded (bytecode cached). Wall seconds unless the step says `cpu:`. `trigger` is the REST call. The "
            "spans' tasks run at once; the first span is the one whose worker reaches a frame first. The idle rows: "
            f"the stack watched {IDLE_WINDOW_S:.0f} s after its last run, the scheduler's main process and every "
            "Postgres process."
        )
    if not report["summary"]:  # no dags test runs (--repeats 0): the other sections alone
        lines = [
            f"# Serial seconds per run ({', '.join(labels)})",
            "",
            f"Command: `{report['command']}` ({report['machine']}).",
        ]
    for step, by_label in report["summary"].items():
        lines.append(
            f"| {step} | "
            + " | ".join(span_of(by_label[label]) if label in by_label else "-" for label in labels)
            + " |"
        )
    if report.get("model_inputs_summary"):
        lines += [
            "",
            "## The scaling model's serial inputs",
            "",
            f"Each tree in its own process, alternating: prepare's work on {CLIP_FRAMES} frames of 1080p carphone "
            f"(keyframe every 250, segments of {MODEL_SEGMENT}, the astronaut's face, the default swap on this CPU), as "
            "a standing worker prepares from a run's lease (imports done: each process's first prepare not counted; "
            "the fastest of 3 per process); the index join's CPU from the markers' moovs "
            "(`scaling_measure.join_costs`, medians of 5). Min-max over the processes.",
            "",
            *table_head("input", labels),
        ]
        for step, by_label in report["model_inputs_summary"].items():
            cells = [_range(by_label[label], step) if label in by_label else "-" for label in labels]
            lines.append(f"| {step} | " + " | ".join(cells) + " |")
    if report.get("standing"):
        lines += [
            "",
            "## The standing workers' path (`serve` processes)",
            "",
            f"{STANDING_WORKERS} standing workers of each tree, idle; warm: they worked a prepared 16-segment run "
            "first, then idled 4 s; cold: started together, the run is their first. A run of "
            f"{STANDING_SEGMENTS} segments of 8 frames (`processors=[]`, {STANDING_FRAME_DELAY} s injected per frame) "
            "announced by its lease alone, as `validate` writes it. Seconds after the lease, min-max over the repeats, "
            "alternating; `last_worker_first_claim_s` is the later worker's first claim (the first's where only one "
            "worker claimed any segment).",
            "",
            *table_head("after the lease", labels),
        ]
        for warm in (True, False):
            state = "warm" if warm else "cold"
            runs = {
                label: [run for run in report["standing"].get(label, []) if run["warm"] == warm] for label in labels
            }
            for key in ("work_json_s", "first_claim_s", "last_worker_first_claim_s", "output_s"):
                cells = [span_of([run[key] for run in runs[label]]) if runs[label] else "-" for label in labels]
                lines.append(f"| {state}: {key} | " + " | ".join(cells) + " |")
            split = [
                ", ".join("/".join(map(str, run["segments_by_worker"])) for run in runs[label]) for label in labels
            ]
            lines.append(f"| {state}: segments each worker claimed | " + " | ".join(split) + " |")
    if report.get("notes"):
        lines += ["", *report["notes"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", choices=("dags-test", "multiprocess"), default="dags-test", help="where runs run")
    parser.add_argument("--baseline", help="a commit whose code runs alternating with this tree's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--block-runs", type=int, default=2, help="--stack multiprocess: measured runs a stack start")
    parser.add_argument("--options", default="{}", help="options JSON beside the demo's segment size")
    parser.add_argument("--work", type=Path, default=REPO / "out" / "bench_serial")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    parser.add_argument("--name", help="the results' file name (default serial-seconds, serial-seconds-stack)")
    parser.add_argument("--model-inputs", type=int, default=0, help="also the model's serial inputs, this many times")
    parser.add_argument("--standing", type=int, default=0, help="also the standing workers' path, this many times")
    parser.add_argument("--inputs-here", nargs=3, metavar=("FOLDER", "SOURCE", "CLIP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inputs_here:  # a child of --model-inputs, in one tree's code
        folder, source, clip = args.inputs_here
        print(json.dumps(model_inputs_here(Path(folder), source, clip, 3)))
        return
    shutil.rmtree(args.work / "runs", ignore_errors=True)
    inputs = make_demo_inputs(str(args.work / "inputs"))
    options = {"segment_size": DEMO_SEGMENT_SIZE, **json.loads(args.options)}
    trees = {"after": REPO}
    if args.baseline:
        trees = {"before": code_of(args.baseline, args.work / f"code-{args.baseline}"), "after": REPO}
    if args.stack == "multiprocess":
        if args.model_inputs or args.standing:
            parser.error("--stack multiprocess measures runs alone")
        runs = stack_runs(trees, args.work / "stack", inputs, options, args.repeats, block_runs=args.block_runs)
        report = {
            "command": shlex.join(["python", "bench/bench_serial.py", *sys.argv[1:]]),
            "machine": machine(),
            "stack": args.stack,
            "baseline": args.baseline,
            "block_runs": args.block_runs,
            "labels": list(trees),
            "summary": summarise(runs),
            "runs": runs,
        }
        write_report(args.out, args.name or "serial-seconds-stack", report, markdown)
        return
    for label, code in trees.items() if args.repeats else ():  # bytecode written, files in the page cache; not reported
        one_run(code, label, args.work / "runs", inputs, options)
    runs = []
    for repeat in range(args.repeats):
        order = list(trees.items())[:: 1 if repeat % 2 == 0 else -1]
        for label, code in order:
            runs.append(one_run(code, label, args.work / "runs", inputs, options))
            print(json.dumps({"label": label, **runs[-1]["steps"]}), flush=True)
    inputs_found = (
        model_inputs(trees, args.work / "model-inputs", inputs[0], args.model_inputs) if args.model_inputs else {}
    )
    standing = standing_runs(trees, args.work / "standing", args.standing) if args.standing else {}
    report = {
        "command": shlex.join(["python", "bench/bench_serial.py", *sys.argv[1:]]),
        "machine": machine(),
        "baseline": args.baseline,
        "labels": list(trees),
        "summary": summarise(runs),
        "model_inputs": inputs_found,
        "model_inputs_summary": summarise_inputs(inputs_found),
        "standing": standing,
        "runs": runs,
    }
    write_report(args.out, args.name or "serial-seconds", report, markdown)


if __name__ == "__main__":
    main()
