"""A multi-process Airflow on a private Postgres, as a deployment runs it: scheduler (LocalExecutor), dag-processor,
API server and triggerer, each its own process in its own process group with its own log file, driven over REST.

``PostgresCluster`` is a throwaway Postgres (``initdb`` + ``pg_ctl`` as the ``postgres`` user when we are root) on a
free loopback port. ``AirflowCluster`` migrates one database of it and starts the four components; a test can kill any
of them (``kill_component``) and bring it back (``restart_component``) as a supervisor would, kill a worker subprocess
by its command line (``kill_worker``), and must find nothing left after ``stop`` (``processes``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg2
from airflow_harness import (
    DAG_ID,
    VENV_BIN,
    AirflowRestClient,
    find_processes,
    free_port,
    kill_session,
    signal_group,
    signal_pid,
    stop_processes,
)
from demo_airflow import airflow_env
from system_binaries import require_binary

POSTGRES_USER = "postgres"
# Scheduler, dag-processor, API server, triggerer: the names of their ``airflow`` subcommands.
COMPONENTS = ("scheduler", "dag-processor", "api-server", "triggerer")
# Durability off: a test database is thrown away, and fsync dominates Airflow's migration and scheduling loop here.
POSTGRES_OPTIONS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


def postgres_bin() -> Path:
    """The folder of Postgres' server programs (Debian keeps them off PATH, under /usr/lib/postgresql/<version>/bin);
    a skip without the postgresql package."""
    pg_ctl = require_binary("pg_ctl", package="postgresql", also=["/usr/lib/postgresql/*/bin/pg_ctl"])
    return Path(pg_ctl).resolve().parent


def _ensure_user(name: str) -> pwd.struct_passwd:
    """The system user Postgres runs as (root may not run it); created when missing, as the Debian package would."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    useradd = require_binary("useradd", package="passwd")
    subprocess.run([useradd, "--system", "--user-group", "--no-create-home", name], check=True)
    return pwd.getpwnam(name)


class PostgresCluster:
    """A private Postgres server in a temporary folder, on a free loopback port, trusting local connections."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.port = free_port()
        self.user: str | None = None  # the OS user running the server: None means ourselves
        self.root = Path(tempfile.mkdtemp(prefix="ffpg-"))  # short: the socket path must fit in 107 bytes
        self.data = self.root / "data"
        self.log_path = self.root / "postgres.log"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            user=self.user,
            cwd=self.root,
            start_new_session=True,  # the server it starts ignores the test's Ctrl-C; stop() ends it
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def start(self) -> None:
        if os.geteuid() == 0:
            account = _ensure_user(POSTGRES_USER)
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self.user = POSTGRES_USER
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        options = " ".join(f"-c {key}={value}" for key, value in POSTGRES_OPTIONS.items())
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60",
            "-o", f"-p {self.port} -k {self.root} {options}", "start",
        )  # fmt: skip

    def execute(self, sql: str, database: str = "postgres") -> None:
        """One statement outside a transaction (CREATE DATABASE cannot run inside one)."""
        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=database)
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(sql)
        finally:
            connection.close()

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """A new database owned by a login role of the same name; its SQLAlchemy URL for Airflow."""
        self.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{name}'")
        self.execute(f"CREATE DATABASE {name} OWNER {name}" + (f" TEMPLATE {template}" if template else ""))
        return self.url(name)

    def url(self, name: str) -> str:
        return f"postgresql+psycopg2://{name}:{name}@127.0.0.1:{self.port}/{name}"

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return None

    def processes(self) -> list[int]:
        """The server and its backends: the postmaster and every process it started."""
        master = self.postmaster_pid()
        if master is None or not Path(f"/proc/{master}").exists():
            return []
        children = Path(f"/proc/{master}/task/{master}/children")
        with contextlib.suppress(OSError):
            return [master, *(int(pid) for pid in children.read_text().split())]
        return [master]

    def stop(self, timeout: float = 30) -> None:
        """Fast shutdown (connections cut), SIGKILL when it hangs; the folder is removed."""
        master = self.postmaster_pid()
        if self.data.exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", str(int(timeout)), "stop")
        if master is not None:
            for pid in self.processes():
                signal_pid(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Component:
    """One Airflow component process: the leader of its own process group."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path


@dataclass(frozen=True)
class WorkerProcess:
    """A ``python -m facefusion_provider.worker ...`` subprocess that the local backend started."""

    pid: int
    argv: tuple[str, ...]


def _argv(pid: int) -> tuple[str, ...]:
    with contextlib.suppress(OSError):
        return tuple(part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
    return ()


class AirflowCluster(AirflowRestClient):
    """Airflow 3 as four processes (scheduler with the LocalExecutor, dag-processor, API server, triggerer) on a Postgres
    database, with an isolated ``AIRFLOW_HOME`` and this project's DAGs.

    ``settings`` are ``[facefusion]`` keys, passed as ``AIRFLOW__FACEFUSION__*``; ``extra_env`` adds or overrides any
    variable (``AIRFLOW__SCHEDULER__...``); ``drop_env`` removes inherited variables by prefix. ``processes`` finds everything it started by session, environment
    (``AIRFLOW_HOME``) and parentage: orphans of a killed component and worker subprocesses in sessions of their own.
    """

    def __init__(
        self,
        home: Path,
        database_url: str,
        settings: Mapping[str, str],
        extra_env: Mapping[str, str] | None = None,
        *,
        dag_id: str = DAG_ID,
        drop_env: tuple[str, ...] = (),
    ) -> None:
        self.api_port = free_port()
        super().__init__(f"http://127.0.0.1:{self.api_port}", home, dag_id=dag_id)
        self.env = airflow_env(home, settings=settings)
        for name in [name for name in self.env if drop_env and name.startswith(drop_env)]:
            del self.env[name]  # the test's own variables (AWS_*): the components must not see them
        self.env.update(self._cluster_env(database_url))
        self.env.update(extra_env or {})
        self.components: dict[str, Component] = {}
        self.started: list[subprocess.Popen[bytes]] = []  # killed ones too: their process groups' orphans live on

    def _cluster_env(self, database_url: str) -> dict[str, str]:
        return {
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "6",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(32).hex(),  # one secret for all: tokens cross processes
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__WORKERS": "1",
            # Other log-server ports than 8793/8794, so a standalone Airflow (or a second cluster) runs beside it.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            # A restarted scheduler finds the tasks of the killed one within seconds rather than minutes.
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "15",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        }

    # Lifecycle

    def migrate(self, timeout: float = 300) -> None:
        """``airflow db migrate`` on the cluster's database (nothing to do on a copy of a migrated template)."""
        self.home.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        (self.home / "db-migrate.log").write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{(result.stdout + result.stderr)[-6000:]}")

    def start(self, timeout: float = 240) -> float:
        """Migrate, start every component, wait until all are healthy, log in and unpause the DAG; seconds taken."""
        began = time.monotonic()
        deadline = began + timeout
        self.migrate()
        for name in COMPONENTS:
            self.start_component(name)
        self.wait_healthy(deadline)
        self.login()
        self.wait_for_dag(deadline)
        return time.monotonic() - began

    def start_component(self, name: str) -> Component:
        if name not in COMPONENTS:
            raise ValueError(f"unknown component {name!r}; expected one of {', '.join(COMPONENTS)}")
        log_path = self.home / f"{name}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [str(VENV_BIN / "airflow"), name],
                env=self.env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killing it never reaches the test or the others
            )
        self.components[name] = Component(name, process, log_path)
        self.started.append(process)
        return self.components[name]

    def wait_healthy(self, deadline: float, components: Sequence[str] = COMPONENTS) -> None:
        """Wait until the health endpoint reports the components (and the metadatabase) healthy."""
        wanted = ["metadatabase", *(name.replace("-", "_") for name in components if name != "api-server")]
        while True:
            health = self.health()
            if health and all(health.get(name) == "healthy" for name in wanted) and self.password_file.exists():
                return
            exited = [c.name for c in self.components.values() if c.process.poll() is not None]
            if exited or time.monotonic() > deadline:
                raise RuntimeError(f"not healthy ({health}; exited: {exited}):\n{self.log_tail()}")
            time.sleep(0.5)

    def kill_component(self, name: str, sig: signal.Signals = signal.SIGKILL, *, group: bool = False) -> int:
        """Send ``sig`` to the component's main process (``kill -9 PID``), or to its whole process group
        (``group=True``: a container restart), and reap it; its pid."""
        component = self.components[name]
        pid = component.process.pid
        if component.process.poll() is not None:
            raise RuntimeError(f"{name} (pid {pid}) has exited already: {component.process.returncode}")
        if group:
            signal_group(pid, sig)
        else:
            signal_pid(pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            component.process.wait(timeout=30)
        return pid

    def restart_component(self, name: str, timeout: float = 120, *, keep_orphans: bool = False) -> None:
        """Start the component again and wait until it is healthy. Like a supervisor (systemd's default
        ``KillMode=control-group``, a container restart), it first kills what is left of the old one: its process,
        and every process of its session, such as the executor's workers of a killed scheduler. ``keep_orphans``
        leaves those running (they hold the killed scheduler's database connections, and with them its row locks)."""
        old = self.components.get(name)
        if old is not None and old.process.poll() is None:
            self.kill_component(name)
        if old is not None and not keep_orphans:
            left = kill_session(old.process.pid)
            assert not left, f"processes of the old {name} survived SIGKILL: {left}"
        self.start_component(name)
        self.wait_healthy(time.monotonic() + timeout, components=[name])

    def processes(self) -> list[int]:
        """Every live process this cluster started: components, executor workers, task and worker subprocesses."""
        sessions = [process.pid for process in self.started]  # each component leads its own session
        return find_processes(sessions, ("AIRFLOW_HOME", self.env["AIRFLOW_HOME"]))

    def stop(self, timeout: float = 20) -> list[int]:
        """SIGTERM to every component's process group; once they exit (or after ``timeout``) SIGKILL to every process
        left (orphaned executor workers, worker subprocesses); the pids that outlived it (none)."""
        self.client.close()
        return stop_processes(self.started, timeout=timeout, members=self.processes)

    def log_tail(self, chars: int = 3000) -> str:
        parts = []
        for name in COMPONENTS:
            path = self.home / f"{name}.log"
            if path.exists():
                parts.append(f"--- {name}.log\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    # Worker subprocesses

    def worker_processes(self, *words: str) -> list[WorkerProcess]:
        """Live ``python -m facefusion_provider.worker`` processes of this cluster whose argv holds every word
        (``"swap-span", "--span", "2"``, a run's target URI), oldest first."""
        found = []
        for pid in self.processes():
            argv = _argv(pid)
            if "facefusion_provider.worker" in argv and all(word in argv for word in words):
                found.append(WorkerProcess(pid, argv))
        return found

    def wait_for_worker(self, *words: str, timeout: float = 120, interval: float = 0.2) -> WorkerProcess:
        """The first worker subprocess whose argv holds every word, once there is one."""
        deadline = time.monotonic() + timeout
        while not (workers := self.worker_processes(*words)):
            if time.monotonic() > deadline:
                raise AssertionError(f"no worker process with {words} within {timeout} s")
            time.sleep(interval)
        return workers[0]

    def kill_worker(self, *words: str, sig: signal.Signals = signal.SIGKILL, timeout: float = 120) -> WorkerProcess:
        """Wait for a worker subprocess whose argv holds every word, send it ``sig`` (``kill -9``); that process."""
        worker = self.wait_for_worker(*words, timeout=timeout)
        signal_pid(worker.pid, sig)
        return worker
