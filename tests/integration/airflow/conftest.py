"""Real Airflow for the DAG's end-to-end tests: an isolated home for ``airflow dags test``, and ``airflow standalone``
started at most once per module. The helpers live in ``airflow_harness.py``."""

from __future__ import annotations

import os
import tempfile

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))

from collections.abc import Callable, Iterator, Mapping

import pytest
from airflow_harness import TEST_SETTINGS, StandaloneAirflow

from facefusion_provider.demo_airflow import airflow_env, init_home


@pytest.fixture(scope="session")
def dags_test_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An Airflow home with its SQLite DB migrated and the chunk pool created, for ``airflow dags test``."""
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
