"""Real Airflow for the DAG's end-to-end tests: an isolated home for ``airflow dags test``, ``airflow standalone``
started at most once per module, and a multi-process Airflow on a private Postgres (one Postgres per session, one
Airflow per module). The helpers live in ``airflow_harness.py`` and ``multiprocess_harness.py``."""

from __future__ import annotations

import os
import tempfile

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))

import itertools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from airflow_harness import TEST_SETTINGS, StandaloneAirflow
from demo_airflow import airflow_env, init_home
from multiprocess_harness import AirflowCluster, PostgresCluster, postgres_bin


@pytest.fixture(scope="session")
def dags_test_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An Airflow home with its SQLite DB migrated, for ``airflow dags test``."""
    home = tmp_path_factory.mktemp("airflow_dags_test")
    env = airflow_env(home, settings={**TEST_SETTINGS, "work_root": (home / "work").as_uri()})
    env.pop("FACEFUSION_TEST_FAULTS", None)
    init_home(env)
    return env


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


# Database names of the session's Postgres, unique across modules.
_DATABASE_NUMBERS = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One private Postgres server for the session; each Airflow cluster gets a database of its own in it."""
    postgres_bin()  # a skip without Postgres, before anything starts
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        assert cluster.processes() == [], "Postgres processes outlived the cluster"


@pytest.fixture(scope="module")
def airflow_cluster_factory(
    postgres_cluster: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., AirflowCluster]]:
    """Start a multi-process Airflow on a new database: ``factory(settings, extra_env=None, drop_env=())``;
    ``drop_env`` removes the test's own variables with those prefixes (``"AWS_"``: a connection is the only way to S3).
    Share one per module (startup is about 25 s on 2 cores). At the end each is stopped and must leave no process
    behind."""
    started: list[AirflowCluster] = []

    def start(
        settings: Mapping[str, str], extra_env: Mapping[str, str] | None = None, drop_env: tuple[str, ...] = ()
    ) -> AirflowCluster:
        home: Path = tmp_path_factory.mktemp("airflow_cluster")
        database = postgres_cluster.create_database(f"airflow_{next(_DATABASE_NUMBERS)}")
        cluster = AirflowCluster(home, database, {**TEST_SETTINGS, **settings}, extra_env, drop_env=drop_env)
        started.append(cluster)
        seconds = cluster.start()
        print(f"airflow cluster healthy in {seconds:.1f} s: {cluster.base_url}, logs in {home}")
        return cluster

    yield start
    leftovers = {cluster.home: cluster.stop() for cluster in started}
    assert not any(leftovers.values()), f"processes outlived their Airflow cluster: {leftovers}"
