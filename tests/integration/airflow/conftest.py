"""Real Airflow for the DAG's end-to-end tests: ``airflow dags test`` in an isolated home, and ``airflow standalone``
started once per module (setsid) and stopped by ending its process group. Media are made here with PyAV."""

from __future__ import annotations

import os
import tempfile

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))

import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import httpx
import pytest

from facefusion_provider.demo_airflow import airflow_env, init_home
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


@pytest.fixture(scope="session")
def dags_test_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An Airflow home with its SQLite DB migrated and the chunk pool created, for ``airflow dags test``."""
    home = tmp_path_factory.mktemp("airflow_dags_test")
    env = airflow_env(home, settings={**TEST_SETTINGS, "work_root": (home / "work").as_uri()})
    env.pop("FACEFUSION_TEST_FAULTS", None)
    init_home(env)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        self.api("PATCH", f"/api/v2/dags/{DAG_ID}", json={"is_paused": False})

    def stop(self) -> None:
        self.client.close()
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

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


@pytest.fixture(scope="module")
def standalone_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., StandaloneAirflow]]:
    """Start ``airflow standalone`` (at most one per module); it is stopped, with its process group, at the end."""
    started: list[StandaloneAirflow] = []

    def start(settings: Mapping[str, str], extra_env: Mapping[str, str]) -> StandaloneAirflow:
        server = StandaloneAirflow(tmp_path_factory.mktemp("airflow_standalone"), settings, extra_env)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()
