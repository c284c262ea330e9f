"""Every agent tool through the official SDK client, over HTTP and over stdio, on a daemon
trading against the simulator: listed with schemas the client accepts, callable, the answer
valid against the published outputSchema (the SDK client checks it), tool_call_id echoed and
first in source_refs; an error in the seed's shape for each tool that can fail on its input."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from mcp_bridge.tools.catalog import CATALOG, TOOL_NAMES
from testkit.daemon_proc import clean_env, create_token, mcp_client
from testkit.sim_daemon import sim_env, start_on_sim

pytestmark = pytest.mark.timeout(300)

AGENT_TOOLS = [u.name for u in CATALOG if u.listing().output_schema is not None]
LEG = {"symbol": "BTCUSDT", "action": "buy", "quantity": 0.001}
CALLS: dict[str, dict[str, Any]] = {
    "get_quotes": {"symbols": ["BTCUSDT", "ETHUSDT"]},
    "get_history": {"symbol": "BTCUSDT", "period": "5d", "interval": "1h"},
    "get_portfolio": {},
    "trade_simulate": {"trades": [LEG]},
    "trade_execute": {"trades": [{**LEG, "order_type": "market"}]},
    "log_event": {"event_type": "signal", "data": {"symbol": "BTCUSDT", "source_refs": ["q1"]}},
    "get_events": {"limit": 5},
    "get_exchanges": {},
    "get_symbols": {"exchange": "BINANCE", "search": "BTC", "limit": 5},
    "fetch_chart_documentation": {"section": "indicators"},
    "validate_chart_config": {"config": {"ticker": "BTCUSDT", "timeframe": "1h", "indicators": ["rsi"]}},
    "construct_chart_config": {"naturalLanguage": "Bitcoin with Bollinger Bands and RSI for the last 7 days"},
}
BAD: dict[str, tuple[dict[str, Any], str]] = {
    "get_quotes": ({"symbols": ["NOPEUSDT"]}, "INVALID_SYMBOL"),
    "get_history": ({"symbol": "BTCUSDT", "period": "1y", "interval": "90m"}, "INVALID_ARGUMENT"),
    "trade_simulate": ({"trades": [{**LEG, "quantity": -1}]}, "INVALID_ARGUMENT"),
    "trade_execute": ({"trades": [{**LEG, "order_type": "fok"}]}, "INVALID_ARGUMENT"),
    "log_event": ({"event_type": "rumour", "data": {}}, "INVALID_ARGUMENT"),
    "get_symbols": ({"exchange": "NOPE"}, "INVALID_ARGUMENT"),
    "construct_chart_config": ({"naturalLanguage": "Zorblax coin with RSI"}, "INVALID_SYMBOL"),
}


def test_every_agent_tool_has_a_call_here() -> None:
    assert set(AGENT_TOOLS) == set(CALLS)
    assert len(AGENT_TOOLS) == 12


@contextlib.asynccontextmanager
async def _http(sim: Any, data: Path) -> AsyncIterator[Client]:
    token = await create_token(data, "agent", "charts,alerts,trade")
    env = sim_env(sim, CHARTGEN_SYMBOLS="BTCUSDT,ETHUSDT")
    daemon = await start_on_sim(sim, data, env)
    try:
        async with mcp_client(daemon.mcp_url, token) as client:
            yield client
    finally:
        await daemon.stop()


@contextlib.asynccontextmanager
async def _stdio(sim: Any, data: Path) -> AsyncIterator[Client]:
    env = clean_env(sim_env(sim, CHARTGEN_SYMBOLS="BTCUSDT,ETHUSDT"))
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "daemon", "--mcp", "--trade", "--data-dir", str(data)], env=env
    )
    async with Client(params, mode="legacy", read_timeout_seconds=120) as client:
        yield client


@pytest.mark.process
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_each_agent_tool_answers_with_the_convention(sim: Any, tmp_path: Path, transport: str) -> None:
    opened = _http(sim, tmp_path) if transport == "http" else _stdio(sim, tmp_path)
    async with opened as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert list(listed) == list(TOOL_NAMES)
        for name in AGENT_TOOLS:
            assert listed[name].output_schema is not None
            call_id = f"{transport}_{name}_1"
            result = await client.call_tool(name, {**CALLS[name], "tool_call_id": call_id})
            assert not result.is_error, (name, result.content[0].text)
            body = result.structured_content
            assert body["tool_call_id"] == call_id
            assert body["data"]["source_refs"][0] == call_id, (name, body["data"]["source_refs"])
            minted = await client.call_tool(name, CALLS[name])
            assert not minted.is_error, (name, minted.content[0].text)
            assert minted.structured_content["tool_call_id"] and minted.structured_content["tool_call_id"] != call_id
        for name, (args, code) in BAD.items():
            result = await client.call_tool(name, {**args, "tool_call_id": f"bad_{name}"})
            assert result.is_error, (name, result.content[0].text)
            assert result.structured_content == {
                "tool_call_id": f"bad_{name}",
                "error": {"code": code, "message": result.structured_content["error"]["message"]},
            }, (name, result.structured_content)
            assert result.structured_content["error"]["message"]
