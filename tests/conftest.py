"""Shared fixtures: a clean environment, the daemon's database, the exchange simulator and the chart service."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest

from testkit.lanes import excluded_whole

# Test lanes.  Every test file declares its own markers (``pytestmark`` or a test's decorator, or
# ``pytest.param(..., marks=...)`` for the "postgres" storage param of tests/alerts/test_store.py);
# none is added here.  The markers (declared in pyproject.toml):
#   slow     the chaos and crash suites (tests/chaos/, the daemon crash and kill tests) and other
#            long runs: `make chaos`;
#   servers  the storage and cluster suites that start PostgreSQL or nats-server: `make test-servers`
#            runs those not slow;
#   process  every test that starts a subprocess (the daemon, PostgreSQL, nats-server, nginx,
#            Chromium, node, systemd-analyze, a process pool).
# `make test` runs "not slow and not servers", `make test-fast` "not slow and not servers and not
# process" (the lane that answers in a minute), CI all of them.  tests/test_markers.py fails when a
# test that starts a process carries none of these markers.


# --- hypothesis: the quick lane's profile ---------------------------------------------
# `make test-fast` sets HYPOTHESIS_PROFILE=fast: no deadline, and every property test runs a fifth
# of its examples (at least 10, never more than it asks for; 20 for one that names no count): most
# property tests name their own ``max_examples``, which a profile alone cannot lower.  `make test`
# and CI load the default profile and run every example count as written.
FAST_PROFILE = "fast"
FAST_EXAMPLES_DIVISOR = 5
FAST_EXAMPLES_FLOOR = 10
hypothesis.settings.register_profile(FAST_PROFILE, deadline=None)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A test file that ``-m`` deselects whole, by the markers its ``pytestmark`` declares, is not
    imported at all (testkit/lanes.py ``excluded_whole``): the quick lane leaves out 82 of 216 test
    files, whose imports (the MCP client, ccxt, selenium …) each of its four workers paid before."""
    markexpr = config.getoption("markexpr")
    if markexpr and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        if excluded_whole(collection_path, markexpr):
            return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under the fast profile, cut each property test's own example count (once per function)."""
    if os.environ.get("HYPOTHESIS_PROFILE") != FAST_PROFILE:
        return
    done: set[int] = set()
    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        if not getattr(test, "is_hypothesis_test", False) or id(test) in done:
            continue
        done.add(id(test))
        # hypothesis keeps a test's settings here and reads them when the test runs (core.py)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is None:
            raise pytest.UsageError(f"{item.nodeid}: hypothesis keeps a test's settings elsewhere now")
        fewer = max(min(own.max_examples, FAST_EXAMPLES_FLOOR), own.max_examples // FAST_EXAMPLES_DIVISOR)
        test._hypothesis_internal_use_settings = hypothesis.settings(own, max_examples=fewer, deadline=None)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    """No CHARTGEN_* or Binance variables leak into a test; HOME points at a temp dir.

    ``CHARTGEN_CI`` stays: it is the test run's own switch (testkit.external fails instead
    of skipping under CI), not the daemon's configuration."""
    for key in list(os.environ):
        if key == "CHARTGEN_CI":
            continue
        if key.startswith(("CHARTGEN_", "BINANCE_")) or key == "STATE_DIRECTORY":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield


@pytest.fixture
async def db(tmp_path: Any) -> AsyncIterator[Any]:
    """The daemon's database in the test's temp dir, with every package's migrations applied."""
    from daemon import ALL_MIGRATIONS
    from storage import Database

    database = await Database.open(tmp_path / "chartgen.db")
    await database.migrate(ALL_MIGRATIONS)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    """The Binance-compatible exchange simulator on a free loopback port."""
    from simulator import start_simulator

    running = await start_simulator(host="127.0.0.1", port=0)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def charts(sim: Any) -> AsyncIterator[Any]:
    """A ChartService reading market data from the simulator, rendering inline."""
    import aiohttp

    from engine import ChartService, ExternalSources, InlineRenderer, MarketData

    async with aiohttp.ClientSession() as session:
        market = MarketData(
            session, binance_rest_url=sim.url, yahoo_url="http://127.0.0.1:9", timeout_s=5, cache_ttl_s=0
        )
        yield ChartService(market, InlineRenderer(), external_sources=ExternalSources(session=None))


# --- the log scan (testkit/secret_scan.py) -------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    from testkit.secret_scan import log_dir

    log_dir()  # created now, so every daemon of the session writes into the same folder


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Scan every log line this session's daemons wrote; a secret found fails the run.

    Under pytest-xdist the controller scans once, after its workers: they share its log folder
    (the environment they inherit) and their temp dirs lie under its basetemp."""
    from pathlib import Path

    from testkit.secret_scan import log_dir, scan

    if hasattr(session.config, "workerinput"):
        return
    paths = sorted(log_dir().glob("*.log"))
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = factory.getbasetemp() if factory is not None else None
    if basetemp is not None:
        paths += sorted(Path(basetemp).rglob("*.log"))
    files, lines, findings = scan(paths)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"log scan: {lines} lines in {files} log files, {len(findings)} secrets found")
        for f in findings[:20]:
            reporter.write_line(f"  SECRET IN LOG {f.path}:{f.line_no}: {f.excerpt}", red=True)
    if findings:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """One PostgreSQL cluster for the session (testkit.postgres); each test makes its own database."""
    from testkit.postgres import postgres_server

    with postgres_server() as server:
        yield server
