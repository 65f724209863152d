"""Browser tests: Airflow's own UI in Debian's Chromium, driven by Playwright (sync API), against ``airflow standalone``.

One Chromium per session; per module one standalone Airflow in a fresh home (no pool created, no Variable, no example
DAGs; a module overrides ``browser_airflow_env`` to configure more) and one page logged in through the real login
page. ``ui`` hands each test that page as an ``AirflowUI`` whose screenshots go to
``$FACEFUSION_TEST_ARTIFACTS/browser/<test>/`` (or a temporary folder, printed at the end of the session); a failing
test leaves ``failure.png`` there.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# Airflow reads AIRFLOW_HOME once, at import: point it at a throwaway folder before any test imports Airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-tests-"))
# The Airflow harness of tests/integration/airflow (standalone server, REST client, media) is reused here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "airflow"))

import re
import shutil
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from airflow_harness import TEST_SETTINGS, StandaloneAirflow
from airflow_ui import AirflowUI
from system_binaries import require_binary

# Headless in a closed network: no GPU, no sandbox (root in CI), and nothing that phones home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1400, "height": 1000}
ARTIFACTS_KEY = pytest.StashKey[Path]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Keep each phase's report on the test item, so the ``ui`` fixture knows whether the test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if ARTIFACTS_KEY in config.stash:
        terminalreporter.write_line(f"browser test screenshots: {config.stash[ARTIFACTS_KEY]}")


@pytest.fixture(scope="session")
def browser_artifacts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: ``$FACEFUSION_TEST_ARTIFACTS/browser``, or a temporary folder."""
    root = os.environ.get("FACEFUSION_TEST_ARTIFACTS")
    folder = Path(root) / "browser" if root else tmp_path_factory.mktemp("browser-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    request.config.stash[ARTIFACTS_KEY] = folder
    return folder


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """Debian's Chromium under Playwright (never Playwright's own download, which this network cannot reach)."""
    program = require_binary("chromium", package="chromium")
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=program, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
    finally:
        playwright.stop()


@pytest.fixture(scope="module")
def browser_airflow_env() -> dict[str, str]:
    """Extra environment of the module's Airflow (none: a fresh home as a user gets it); override it in a module to
    configure the server differently."""
    return {}


@pytest.fixture(scope="module")
def browser_airflow(
    chromium: Any, browser_airflow_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StandaloneAirflow]:
    """``airflow standalone`` in a fresh home for the module, with nothing created (no pool, no Variable). Stopped at
    the end, with every process it started."""
    work = tmp_path_factory.mktemp("browser_work")
    server = StandaloneAirflow(
        tmp_path_factory.mktemp("browser_airflow"), {**TEST_SETTINGS, "work_root": work.as_uri()}, browser_airflow_env
    )
    try:
        server.start()
        yield server
    finally:
        left = server.stop()
        assert not left, f"processes outlived airflow standalone: {left}"


@pytest.fixture(scope="module")
def browser_page(chromium: Any, browser_airflow: StandaloneAirflow, browser_artifacts: Path) -> Iterator[Any]:
    """One page for the module, logged in as admin through the real login page with the generated password."""
    context = chromium.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        AirflowUI(page, browser_airflow.base_url, browser_artifacts).login("admin", browser_airflow.admin_password())
        yield page
    finally:
        context.close()


@pytest.fixture
def ui(
    browser_page: Any, browser_airflow: StandaloneAirflow, browser_artifacts: Path, request: pytest.FixtureRequest
) -> Iterator[AirflowUI]:
    """The module's logged-in page for one test; screenshots in a folder named after the test (emptied first)."""
    folder = browser_artifacts / re.sub(r"[^\w.-]+", "_", request.node.nodeid.split("::", 1)[-1])
    shutil.rmtree(folder, ignore_errors=True)  # a kept artifacts folder shows the last run only
    ui = AirflowUI(browser_page, browser_airflow.base_url, folder)
    yield ui
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        ui.screenshot("failure")
