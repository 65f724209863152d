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
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import httpx

from facefusion_provider.demo_airflow import airflow_env
from facefusion_provider.media.images import encode_image
from facefusion_provider.media.synth import VideoSpec, pattern_frames, write_video

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = REPO / ".venv" / "bin"
DAG_ID = "facefusion_swap"
# Fast retries so a retried chunk does not hold a test for long.
TEST_SETTINGS = {"retry_delay_seconds": "1", "retry_exponential_backoff": "2", "max_retry_delay_seconds": "4"}


def make_clip(path: Path, frames: int, *, seed: int = 0, width: int = 64, height: int = 48) -> Path:
    """A tiny H.264 clip with distinct frames (25 fps)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_video(
        str(path),
        VideoSpec(width=width, height=height, frame_rate=Fraction(25)),
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


def conf(sources: list[Path], target: Path, output: Path, **options: Any) -> dict[str, Any]:
    return {
        "source_uris": [str(s) for s in sources],
        "target_uri": str(target),
        "output_uri": str(output),
        "options": options,
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _group_alive(group: int) -> bool:
    """Whether any process of the group still runs (zombies waiting for their reaper do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != "Z":
                return True
    return False


class StandaloneAirflow:
    """``airflow standalone`` in its own session and home, driven through the REST API with a token."""

    def __init__(self, home: Path, settings: Mapping[str, str], extra_env: Mapping[str, str]) -> None:
        self.home = home
        self.port = _free_port()
        self.base_url = f"http://localhost:{self.port}"
        self.env = airflow_env(home, settings=settings)
        self.env.update(extra_env)
        self.env.update(
            {
                "PATH": f"{VENV_BIN}{os.pathsep}{self.env.get('PATH', '')}",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__CORE__PARALLELISM": "6",
            }
        )
        self.log_path = home / "standalone.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(base_url=self.base_url, timeout=30)

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
        self._login()
        self._wait_for_dag(deadline)

    def _healthy(self) -> bool:
        try:
            response = self.client.get("/api/v2/monitor/health")
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        passwords = self.home / "simple_auth_manager_passwords.json.generated"
        return response.json()["scheduler"]["status"] == "healthy" and passwords.exists()

    def _login(self) -> None:
        password = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        response = self.client.post("/auth/token", json={"username": "admin", "password": password})
        response.raise_for_status()
        self.client.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def _wait_for_dag(self, deadline: float) -> None:
        while self.client.get(f"/api/v2/dags/{DAG_ID}").status_code != 200:
            if time.monotonic() > deadline:
                errors = self.client.get("/api/v2/importErrors").text
                raise RuntimeError(f"{DAG_ID} was not parsed: {errors}\n{self.log_tail()}")
            time.sleep(1)
        # SQLite has one writer: while the dag-processor writes the new DAG, the API server may get a database error.
        while (response := self.client.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": False})).status_code >= 500:
            if time.monotonic() > deadline:
                raise AssertionError(f"unpausing {DAG_ID}: {response.status_code} {response.text}\n{self.log_tail()}")
            time.sleep(1)
        if response.status_code >= 400:
            raise AssertionError(f"unpausing {DAG_ID}: {response.status_code} {response.text}")

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM to the whole process group, then wait until every member is gone (SIGKILL after ``timeout``)."""
        self.client.close()
        if self.process is None:
            return
        group = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _group_alive(group) and time.monotonic() < deadline + 10:
            self.process.poll()  # reap the leader; the others are re-parented and reaped by init
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
            time.sleep(0.5)

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    def trigger(self, run_conf: dict[str, Any]) -> str:
        return str(
            self.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": run_conf})[
                "dag_run_id"
            ]
        )

    def wait(self, run_id: str, timeout: float = 240) -> str:
        """Wait for the run to finish; its final state."""
        deadline = time.monotonic() + timeout
        while True:
            state = str(self.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["state"])
            if state in ("success", "failed"):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} still {state} after {timeout} s: {self.task_states(run_id)}")
            time.sleep(1)

    def task_instances(self, run_id: str) -> list[dict[str, Any]]:
        body = self.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", params={"limit": 200})
        return list(body["task_instances"])

    def task_states(self, run_id: str) -> dict[tuple[str, int], tuple[str | None, int]]:
        """``{(task_id, map_index): (state, try_number)}``."""
        return {(ti["task_id"], ti["map_index"]): (ti["state"], ti["try_number"]) for ti in self.task_instances(run_id)}

    def task_log(self, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        body = self.api(
            "GET",
            f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"map_index": map_index, "full_content": True},
            headers={"Accept": "application/json"},
        )
        return json.dumps(body["content"])

    def xcom(self, run_id: str, task_id: str, key: str) -> Any:
        path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.api("GET", path, params={"deserialize": True, "stringify": False})["value"]

    def clear_failed(self, run_id: str) -> None:
        self.api(
            "POST",
            f"/api/v2/dags/{DAG_ID}/clearTaskInstances",
            json={
                "dry_run": False,
                "only_failed": True,
                "dag_run_id": run_id,
                "include_downstream": True,
                "reset_dag_runs": True,
            },
        )
