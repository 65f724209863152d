"""Helpers of the Airflow end-to-end tests: tiny media made with PyAV, the conf JSON, and ``airflow standalone`` in its
own session and home, driven over REST with a token (stopped by ending its process group)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import httpx
from demo_airflow import airflow_env
from readback import frame_digests
from synth import VideoSpec, pattern_frames, write_video

from facefusion_provider.media.images import encode_image

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = REPO / ".venv" / "bin"
DAG_ID = "facefusion_swap"


@dataclass(frozen=True)
class SwapTasks:
    """The task ids of ``facefusion_swap`` and the worker command of its mapped task, named once for every harness and
    test."""

    validate: str = "validate"
    prepare: str = "prepare"
    plan: str = "plan"
    swap: str = "swap_span"
    merge: str = "merge"
    cleanup: str = "cleanup"
    swap_command: str = "swap-span"


SWAP_TASKS = SwapTasks()
# Fast retries so a retried span does not hold a test for long.
TEST_SETTINGS = {"retry_delay_seconds": "1", "retry_exponential_backoff": "2", "max_retry_delay_seconds": "4"}


def make_clip(
    path: Path, frames: int, *, seed: int = 0, width: int = 64, height: int = 48, gop: int | None = None
) -> Path:
    """A tiny H.264 clip with distinct frames (25 fps); ``gop`` caps the distance between keyframes (the pre-roll of a
    seek)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    codec_options = {"preset": "ultrafast", "crf": "18", **({"g": str(gop)} if gop else {})}
    write_video(
        str(path),
        VideoSpec(width=width, height=height, frame_rate=Fraction(25), codec_options=codec_options),
        pattern_frames(frames, width, height, seed),
    )
    return path


def make_image(path: Path, *, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_image(next(pattern_frames(1, 32, 32, seed)), codec="png"))
    return path


def count_frames(path: Path) -> int:
    """Frames of the first video stream, by decoding them all."""
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def frame_md5s(source: Path | str) -> list[str]:
    """The md5 of every decoded frame, in display order: two videos show the same pictures when these are equal."""
    return [digest.md5 for digest in frame_digests(str(source))]


def keyframes(path: Path) -> list[int]:
    """Display numbers of the keyframes: where a seek lands before decoding forward (the pre-roll)."""
    with av.open(str(path)) as container:
        packets = [p for p in container.demux(video=0) if p.pts is not None]
    order = sorted(packets, key=lambda packet: packet.pts)
    return [number for number, packet in enumerate(order) if packet.is_keyframe]


def conf(sources: Sequence[Path | str], target: Path | str, output: Path | str, **options: Any) -> dict[str, Any]:
    """A swap run's conf, flat as the trigger form and ingestion send it: the options beside the three inputs."""
    return {"source_uris": [str(s) for s in sources], "target_uri": str(target), "output_uri": str(output), **options}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    session: int


def _live_processes() -> dict[int, ProcessInfo]:
    """Every process but zombies, from ``/proc/PID/stat`` (fields after the command name: state, ppid, pgrp, session)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                table[int(stat.parent.name)] = ProcessInfo(int(stat.parent.name), int(fields[1]), int(fields[3]))
    return table


def _has_env(pid: int, wanted: bytes) -> bool:
    with contextlib.suppress(OSError):
        return wanted in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return False


def find_processes(sessions: Collection[int], env: tuple[str, str] | None = None) -> list[int]:
    """Live processes in one of ``sessions``, or with ``env`` (name, value) in their environment, and all their
    descendants. The session survives re-parenting and setproctitle (which blanks ``/proc/PID/environ``: the executor's
    workers, the task runner, the API server); the environment survives a new session (the local backend's workers)."""
    table = _live_processes()
    wanted = f"{env[0]}={env[1]}".encode() if env else None
    found = {
        pid for pid, info in table.items() if info.session in sessions or (wanted is not None and _has_env(pid, wanted))
    }
    while more := {pid for pid, info in table.items() if info.ppid in found} - found:
        found |= more
    return sorted(found)


def kill_session(session: int, timeout: float = 10) -> list[int]:
    """SIGKILL every process of the session and their descendants, as a cgroup kill would; those still alive (none)."""
    deadline = time.monotonic() + timeout
    while (left := find_processes([session])) and time.monotonic() < deadline:
        for pid in left:
            signal_pid(pid, signal.SIGKILL)
        time.sleep(0.1)
    return left


def signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def stop_processes(
    leaders: Sequence[subprocess.Popen[bytes]], *, timeout: float, members: Callable[[], list[int]]
) -> list[int]:
    """Stop what ``leaders`` (started with ``start_new_session``) started: SIGTERM to the groups of the leaders still
    alive, a wait of up to ``timeout`` for them to exit, then SIGKILL to every process of ``members()`` (executor workers
    ignore SIGTERM; worker subprocesses run in sessions of their own); the pids still alive 10 s later (none)."""
    for leader in leaders:
        if leader.poll() is None:  # not yet reaped, so its group id cannot belong to anyone else
            signal_group(leader.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(leader.poll() is None for leader in leaders) and time.monotonic() < deadline:
        time.sleep(0.25)
    deadline = time.monotonic() + 10
    while True:
        for leader in leaders:
            leader.poll()  # reap our own children; the others are re-parented and reaped by init
        left = members()
        if not left or time.monotonic() > deadline:
            return left
        for pid in left:
            signal_pid(pid, signal.SIGKILL)
        time.sleep(0.25)


class AirflowRestClient:
    """The REST API of a running Airflow (simple auth manager), with a token from the generated admin password.

    Every run method takes ``dag_id`` (default: the client's ``dag_id``), so one client drives all DAGs of a server.
    """

    def __init__(self, base_url: str, home: Path, *, dag_id: str = DAG_ID) -> None:
        self.base_url = base_url
        self.home = home
        self.dag_id = dag_id
        self.client = httpx.Client(base_url=base_url, timeout=30)

    @property
    def password_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json.generated"

    def admin_password(self) -> str:
        return str(json.loads(self.password_file.read_text())["admin"])

    def health(self) -> dict[str, str]:
        """``{component: status}`` from ``/api/v2/monitor/health`` (empty while the API server does not answer)."""
        try:
            response = self.client.get("/api/v2/monitor/health")
        except httpx.HTTPError:
            return {}
        if response.status_code != 200:
            return {}
        return {name: str(part.get("status")) for name, part in response.json().items() if isinstance(part, dict)}

    def login(self) -> None:
        response = self.client.post("/auth/token", json={"username": "admin", "password": self.admin_password()})
        response.raise_for_status()
        self.client.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def log_tail(self, chars: int = 6000) -> str:
        return ""

    def api(self, method: str, path: str, *, retry_seconds: float = 20, **kwargs: Any) -> Any:
        """One REST call; its JSON body. A database error is retried for ``retry_seconds``: on SQLite (standalone) a
        write fails with "database is locked" while another component writes, and was rolled back."""
        deadline = time.monotonic() + retry_seconds
        while (response := self.client.request(method, path, **kwargs)).status_code == 500 and (
            "Database error" in response.text and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    def wait_for_dag(self, deadline: float, dag_id: str | None = None) -> None:
        """Wait until the DAG is parsed, then unpause it."""
        dag_id = dag_id or self.dag_id
        while self.client.get(f"/api/v2/dags/{dag_id}").status_code != 200:
            if time.monotonic() > deadline:
                errors = self.client.get("/api/v2/importErrors").text
                raise RuntimeError(f"{dag_id} was not parsed: {errors}\n{self.log_tail()}")
            time.sleep(0.5)
        self.api("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})

    def ensure_pool(self, name: str, slots: int) -> None:
        """Create the pool, or set its slots when it exists (``default_pool`` always does)."""
        response = self.client.get(f"/api/v2/pools/{name}")
        if response.status_code == 404:
            self.api("POST", "/api/v2/pools", json={"name": name, "slots": slots})
        else:
            self.api("PATCH", f"/api/v2/pools/{name}", json={"name": name, "slots": slots})

    def _run_path(self, run_id: str, dag_id: str | None) -> str:
        return f"/api/v2/dags/{dag_id or self.dag_id}/dagRuns/{run_id}"

    def trigger(self, run_conf: dict[str, Any], dag_id: str | None = None) -> str:
        path = f"/api/v2/dags/{dag_id or self.dag_id}/dagRuns"
        return str(self.api("POST", path, json={"logical_date": None, "conf": run_conf})["dag_run_id"])

    def run_state(self, run_id: str, dag_id: str | None = None) -> str:
        return str(self.api("GET", self._run_path(run_id, dag_id))["state"])

    def wait(self, run_id: str, timeout: float = 240, dag_id: str | None = None) -> str:
        """Wait for the run to finish; its final state."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.run_state(run_id, dag_id)
            if state in ("success", "failed"):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"run {run_id} still {state} after {timeout} s: {self.task_states(run_id, dag_id)}"
                )
            time.sleep(1)

    def task_instances(self, run_id: str, dag_id: str | None = None) -> list[dict[str, Any]]:
        body = self.api("GET", f"{self._run_path(run_id, dag_id)}/taskInstances", params={"limit": 200})
        return list(body["task_instances"])

    def task_states(self, run_id: str, dag_id: str | None = None) -> dict[tuple[str, int], tuple[str | None, int]]:
        """``{(task_id, map_index): (state, try_number)}``."""
        return {
            (ti["task_id"], ti["map_index"]): (ti["state"], ti["try_number"])
            for ti in self.task_instances(run_id, dag_id)
        }

    def task_log(
        self, run_id: str, task_id: str, try_number: int, map_index: int = -1, dag_id: str | None = None
    ) -> str:
        body = self.api(
            "GET",
            f"{self._run_path(run_id, dag_id)}/taskInstances/{task_id}/logs/{try_number}",
            params={"map_index": map_index, "full_content": True},
            headers={"Accept": "application/json"},
        )
        return json.dumps(body["content"])

    def task_log_lines(
        self, run_id: str, task_id: str, try_number: int, map_index: int = -1, dag_id: str | None = None
    ) -> list[str]:
        """The task log's messages, one per line logged (the local operator logs every worker line as one), and the
        message of each exception it shows (a failed task's error)."""
        body = self.api(
            "GET",
            f"{self._run_path(run_id, dag_id)}/taskInstances/{task_id}/logs/{try_number}",
            params={"map_index": map_index, "full_content": True},
            headers={"Accept": "application/json"},
        )
        lines = []
        for item in body["content"]:
            if not isinstance(item, dict):
                lines.append(str(item))
                continue
            lines.append(str(item.get("event", "")))
            lines += [str(error.get("exc_value", "")) for error in item.get("error_detail") or []]
        return lines

    def worker_summary(
        self, run_id: str, task_id: str, try_number: int, map_index: int = -1, dag_id: str | None = None
    ) -> dict[str, Any] | None:
        """The JSON summary a worker prints as its last stdout line (``decoded_frames``, ``reused``, ``committed``
        for a span), read from the task log of that try; None when the try started no worker or it died first."""
        for line in reversed(self.task_log_lines(run_id, task_id, try_number, map_index, dag_id)):
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict) and "failure_class" not in value:
                    return value
        return None

    def xcom(self, run_id: str, task_id: str, key: str, map_index: int = -1, dag_id: str | None = None) -> Any:
        path = f"{self._run_path(run_id, dag_id)}/taskInstances/{task_id}/xcomEntries/{key}"
        params = {"deserialize": True, "stringify": False, "map_index": map_index}
        return self.api("GET", path, params=params)["value"]

    def clear_task_instances(
        self,
        run_id: str,
        *,
        only_failed: bool = False,
        task_ids: Sequence[str] | None = None,
        map_indexes: Sequence[int] | None = None,
        include_downstream: bool = True,
        reset_dag_runs: bool = True,
        dry_run: bool = False,
        dag_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Clear task instances of one run (``POST .../clearTaskInstances``); the task instances it cleared (or would).

        ``map_indexes`` narrows each of ``task_ids`` to those map indexes (sent as ``[task_id, map_index]`` pairs).
        """
        body: dict[str, Any] = {
            "dry_run": dry_run,
            "only_failed": only_failed,
            "dag_run_id": run_id,
            "include_downstream": include_downstream,
            "reset_dag_runs": reset_dag_runs,
        }
        if map_indexes is not None and not task_ids:
            raise ValueError("map_indexes needs task_ids")
        if task_ids:
            selected: list[Any] = list(task_ids)
            if map_indexes is not None:
                selected = [[task_id, index] for task_id in task_ids for index in map_indexes]
            body["task_ids"] = selected
        path = f"/api/v2/dags/{dag_id or self.dag_id}/clearTaskInstances"
        return list(self.api("POST", path, json=body)["task_instances"])

    def clear_failed(self, run_id: str, dag_id: str | None = None) -> None:
        """Rerun only the failed task instances of the run (and what follows them)."""
        self.clear_task_instances(run_id, only_failed=True, dag_id=dag_id)


class StandaloneAirflow(AirflowRestClient):
    """``airflow standalone`` in its own session and home, driven through the REST API with a token."""

    def __init__(self, home: Path, settings: Mapping[str, str], extra_env: Mapping[str, str]) -> None:
        port = free_port()
        super().__init__(f"http://localhost:{port}", home)
        self.port = port
        self.env = airflow_env(home, settings=settings)
        self.env.update(extra_env)
        self.env.update(
            {
                "PATH": f"{VENV_BIN}{os.pathsep}{self.env.get('PATH', '')}",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__CORE__PARALLELISM": "6",
                # Not the default log-server ports 8793/8794, so servers of tests run side by side (pytest -n) coexist.
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            }
        )
        self.log_path = home / "standalone.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 240) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(VENV_BIN / "airflow"), "standalone"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # setsid: stop() ends the whole process group
            )
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"airflow standalone did not become healthy:\n{self.log_tail()}")
            time.sleep(1)
        self.login()
        self.wait_for_dag(deadline)

    def _healthy(self) -> bool:
        return self.health().get("scheduler") == "healthy" and self.password_file.exists()

    def processes(self) -> list[int]:
        """Every process of this server, workers in their own sessions included (found by their AIRFLOW_HOME)."""
        return find_processes([self.process.pid] if self.process else [], ("AIRFLOW_HOME", self.env["AIRFLOW_HOME"]))

    def stop(self, timeout: float = 60) -> list[int]:
        """SIGTERM to the whole process group, then SIGKILL after ``timeout`` to every process of the server, worker
        subprocesses in sessions of their own included; the pids that outlived it (none)."""
        self.client.close()
        if self.process is None:
            return []
        return stop_processes([self.process], timeout=timeout, members=self.processes)

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""
