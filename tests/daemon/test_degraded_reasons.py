"""Degraded states that say why: /readyz, /status, STATUS= and the start-up banner name the exchange's refusal.

A region Binance refuses is reproduced with the simulator's faults: ``http_error`` 451 on
REST and ``refuse_streams`` 451 on the websocket handshake.
"""

from __future__ import annotations

import asyncio
import io
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import aiohttp
import pytest

from config import load_settings
from daemon.parts.engine import engine_config
from daemon.single.modes import announce_not_ready, daemon_readiness, daemon_status, status_line
from engine import REFUSED_HINT, BinanceRest, EngineConfig, LiveEngine, StreamManager, StreamSettings
from simulator import RESTRICTED_LOCATION_MSG, start_simulator
from testkit.daemon_proc import start_daemon
from tests.engine.test_refused_location import until

WAIT = 30.0
REFUSED_REGION = {
    "refuse_streams": {"status": 451},
    "http_error": {"status": 451, "count": 1_000_000},
}


async def _fault(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
    async with http.post(f"{url}/sim/v1/faults", json=body) as r:
        assert r.status == 200, await r.text()


async def test_readiness_status_line_and_banner_name_the_refusal_then_clear() -> None:
    sim = await start_simulator(host="127.0.0.1", port=0, clock="manual", symbols=["BTCUSDT"], seed=5)
    try:
        async with aiohttp.ClientSession() as http:
            await _fault(http, sim.url, REFUSED_REGION)
            streams = StreamSettings(
                stall_timeout_s=None, rotate_after_s=None, backoff_initial_s=0.05, backoff_max_s=0.5
            )
            engine = LiveEngine(
                session=http,
                rest=BinanceRest(http, sim.url),
                stream_url=sim.ws_url,
                config=EngineConfig(window_bars=50, streams=streams, retry_initial_s=0.05),
                rng=random.Random(1),
            )
            engine.follow("BTCUSDT", "1h")
            services: Any = SimpleNamespace(engine=engine, orders=None, alerts=None, push=None)
            async with engine.running():
                assert isinstance(engine.streams, StreamManager)
                conn = engine.streams.connections[0]
                await until(lambda: conn.last_error is not None, engine.status)

                ready, reasons = daemon_readiness(services)
                assert not ready and len(reasons) == 1
                assert "HTTP 451 on websocket handshake" in reasons[0]
                assert RESTRICTED_LOCATION_MSG in reasons[0] and "--exchange binanceus" in reasons[0]
                line = status_line(services)
                assert line.startswith("degraded: BTCUSDT 1h: stream: HTTP 451 on websocket handshake to ")
                assert REFUSED_HINT in line and line.endswith("| 1 markets, 0 alerts active")
                status = daemon_status(services)
                assert status["ready"] is False and status["reasons"] == reasons
                assert status["engine"]["connections"][0]["last_error"]["status"] == 451

                out = io.StringIO()
                await announce_not_ready(services, "http://127.0.0.1:1/readyz", after_s=0.01, out=out)
                printed = out.getvalue().splitlines()
                assert printed[0] == "Live engine not ready after 0.01 s (details: http://127.0.0.1:1/readyz):"
                assert printed[1] == f"  {reasons[0]}"

                await _fault(http, sim.url, {"reset": True})
                engine.streams.restart_all()  # stands in for the long backoff running out
                async with asyncio.timeout(WAIT):
                    await engine.wait_ready()
                assert daemon_readiness(services) == (True, [])
                assert status_line(services).startswith("ready |")
                assert daemon_status(services)["reasons"] == []
                quiet = io.StringIO()
                await announce_not_ready(services, "http://127.0.0.1:1/readyz", after_s=WAIT, out=quiet)
                assert quiet.getvalue() == ""  # ready in time: no banner line
    finally:
        await sim.close()


async def test_the_banner_line_is_printed_only_when_not_ready_by_the_deadline() -> None:
    class NeverReady:
        markets: ClassVar = [("BTCUSDT", "1h")]

        def readiness(self) -> tuple[bool, list[str]]:
            return False, [f"M{i} 1h: stream not connected" for i in range(7)]

        async def wait_ready(self) -> None:
            await asyncio.Event().wait()

    services: Any = SimpleNamespace(engine=NeverReady(), orders=None, alerts=None, push=None)
    out = io.StringIO()
    await announce_not_ready(services, "http://h:1/readyz", after_s=0.001, out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "Live engine not ready after 0.001 s (details: http://h:1/readyz):"
    assert lines[1:6] == [f"  M{i} 1h: stream not connected" for i in range(5)] and lines[6] == "  … and 2 more"
    assert status_line(services).endswith("; +4 more (see /readyz) | 1 markets, 0 alerts active")


@pytest.mark.process
@pytest.mark.slow
async def test_the_daemons_readyz_and_status_name_the_451_and_the_hint(tmp_path: Path) -> None:
    proc = await start_daemon(
        ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1h"], data_dir=tmp_path
    )
    try:
        assert proc.sim_url is not None and proc.token is not None
        await proc.wait_ready()
        async with aiohttp.ClientSession() as http:
            await _fault(http, proc.sim_url, {**REFUSED_REGION, "drop_streams": True})
            body: dict[str, Any] = {}
            async with asyncio.timeout(WAIT):
                while not any("451" in r for r in body.get("reasons", [])):
                    async with http.get(f"{proc.base}/readyz") as r:
                        body = await r.json()
                        assert r.status == (200 if body["status"] == "ready" else 503)
                    await asyncio.sleep(0.05)  # polling /readyz, bounded by the timeout
            engine_reason = next(r for r in body["reasons"] if r.startswith("BTCUSDT 1h:"))
            assert "HTTP 451 on websocket handshake" in engine_reason
            assert RESTRICTED_LOCATION_MSG in engine_reason and REFUSED_HINT in engine_reason
            headers = {"Authorization": f"Bearer {proc.token}"}
            async with http.get(f"{proc.base}/status", headers=headers) as r:
                assert r.status == 200
                status = await r.json()
            assert status["ready"] is False and engine_reason in status["reasons"]
            (conn,) = status["engine"]["connections"]
            assert conn["last_error"]["status"] == 451 and conn["last_error"]["retry_in_s"] > 60
    finally:
        await proc.stop()


def test_the_refusal_backoff_is_minutes_and_never_shorter_than_the_reconnect_maximum() -> None:
    assert engine_config(load_settings({})).streams.refused_backoff_s == 300.0
    assert engine_config(load_settings({"engine_reconnect_max_s": 900})).streams.refused_backoff_s == 900.0
