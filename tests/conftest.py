"""Shared fixtures: a clean environment, the daemon's database, the exchange simulator and the chart service."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLOW_SUITES = (
    "tests/chaos/",
    "tests/alerts/test_crash_safety.py",
    "tests/brokers/test_order_crash_safety.py",
    "tests/brokers/test_binance_broker.py",
    "tests/engine/test_live_engine_sim.py",
    "tests/daemon/test_sigterm_burst.py",
    "tests/mcp_bridge/test_http_edge.py",
    "tests/mcp_bridge/test_passphrase_attempts.py",
    "tests/mcp_bridge/test_oauth_registrations.py",
    "tests/mcp_bridge/test_render_flood_daemon.py",
    "tests/engine/test_refused_location.py",
    "tests/brokers/test_order_guard_daemon.py",
    "tests/alerts/test_alert_actions_daemon.py",
    "tests/brokers/test_halt_daemon.py",
    "tests/brokers/test_unattended_daemon.py",
    "tests/cluster/test_order_leader.py",
    "tests/cluster/test_worker.py",
    "tests/cluster/test_worker_outage.py",
    "tests/cluster/test_nats_outage.py",
    "tests/alerts/test_channels_daemon.py",
)
"""The chaos and crash suites (the cluster's order leader and workers killed, paused, its PostgreSQL stopped
included): marked ``slow``, run by ``make chaos`` (``make test`` runs the rest but the
``servers`` suites below; CI runs all three)."""


SERVER_SUITES = (
    "tests/cluster/",
    "tests/alerts/test_pg_concurrent_firing.py",
    "tests/config/test_pg_migrations.py",
    "tests/daemon/test_cluster_command.py",
)
"""Suites that start PostgreSQL or nats-server: marked ``servers``, run by ``make test-servers``
(those also in SLOW_SUITES by ``make chaos``); so is every test using the session's ``postgres``
fixture or parametrized with the "postgres" storage (tests/alerts/test_store.py)."""


def _needs_servers(item: pytest.Item, where: str) -> bool:
    if where.startswith(SERVER_SUITES) or "postgres" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgres" in callspec.params.values()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.resolve().relative_to(ROOT).as_posix()
        if where.startswith(SLOW_SUITES):
            item.add_marker(pytest.mark.slow)
        if _needs_servers(item, where):
            item.add_marker(pytest.mark.servers)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    """No CHARTGEN_* or Binance variables leak into a test; HOME points at a temp dir.

    ``CHARTGEN_CI`` stays: it is the test run's own switch (tests.support.external fails instead
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
    from config.database import Database
    from daemon.database import ALL_MIGRATIONS

    database = await Database.open(tmp_path / "chartgen.db")
    await database.migrate(ALL_MIGRATIONS)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def sim() -> AsyncIterator[Any]:
    """The Binance-compatible exchange simulator on a free loopback port."""
    from brokers.simulator.app import start_simulator

    running = await start_simulator(host="127.0.0.1", port=0)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def charts(sim: Any) -> AsyncIterator[Any]:
    """A ChartService reading market data from the simulator, rendering inline."""
    import aiohttp

    from engine.charts.pool import InlineRenderer
    from engine.charts.service import ChartService
    from engine.indicators.external.sources import ExternalSources
    from engine.market_data.source import MarketData

    async with aiohttp.ClientSession() as session:
        market = MarketData(
            session, binance_rest_url=sim.url, yahoo_url="http://127.0.0.1:9", timeout_s=5, cache_ttl_s=0
        )
        yield ChartService(market, InlineRenderer(), external_sources=ExternalSources(session=None))


# --- the log scan (tests/support/secret_scan.py) -------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    from tests.support.secret_scan import log_dir

    log_dir()  # created now, so every daemon of the session writes into the same folder


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Scan every log line this session's daemons wrote; a secret found fails the run."""
    from pathlib import Path

    from tests.support.secret_scan import log_dir, scan

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
    """One PostgreSQL cluster for the session (tests.support.postgres); each test makes its own database."""
    from tests.support.postgres import postgres_server

    with postgres_server() as server:
        yield server
