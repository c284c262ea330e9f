"""``chartgen token create NAME --scope …`` and ``token list`` with scopes, and what a token made
by the command may do against a real ``chartgen --serve`` (the official SDK client and a bare
session-less tools/call)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx2
import pytest

from mcp_bridge.tools.catalog import TOOL_NAMES
from testkit.daemon_proc import clean_env, create_token, mcp_client, start_daemon
from testkit.oauth import tools_call, tools_list

pytestmark = pytest.mark.process

TRADE_TOOLS = {"place_order", "cancel_order", "get_orders", "get_positions", "get_balance"}
TRADE_TOOLS |= {"schedule_order", "list_schedules", "cancel_schedule"}
TRADE_TOOLS |= {"halt_trading"}
TRADE_TOOLS |= {"place_oco"}
TRADE_TOOLS |= {"get_portfolio", "trade_simulate", "trade_execute"}


async def token_cli(data_dir: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "token",
        "--data-dir",
        str(data_dir),
        *args,
        env=clean_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_token_create_takes_scopes_and_token_list_shows_them(tmp_path: Path) -> None:
    code, token, err = await token_cli(tmp_path, "create", "reader")
    assert code == 0 and token.startswith("cg_pat_"), err
    assert "scopes charts,alerts" in err
    code, _, err = await token_cli(tmp_path, "create", "trader", "--scope", "charts,alerts,trade")
    assert code == 0, err
    code, _, err = await token_cli(tmp_path, "create", "ops", "--scope", "admin")
    assert code == 0, err
    code, listing, err = await token_cli(tmp_path, "list")
    assert code == 0, err
    assert "SCOPES" in listing.splitlines()[0]
    rows = {line.split()[1]: line.split()[3] for line in listing.splitlines()[1:]}
    assert rows == {"reader": "charts,alerts", "trader": "charts,alerts,trade", "ops": "admin"}


async def test_an_unknown_scope_is_a_clear_error_naming_the_valid_ones(tmp_path: Path) -> None:
    code, out, err = await token_cli(tmp_path, "create", "typo", "--scope", "charts,trading")
    assert code == 1 and out == ""
    assert "unknown scope 'trading'" in err and "charts, alerts, trade, admin" in err
    code, listing, _ = await token_cli(tmp_path, "list")
    assert code == 0 and "typo" not in listing  # nothing was created


async def test_a_default_cli_token_cannot_see_or_use_trading_tools_on_the_daemon(tmp_path: Path) -> None:
    reader = await create_token(tmp_path, "reader")
    trader = await create_token(tmp_path, "trader", "charts,alerts,trade")
    daemon = await start_daemon(["--serve"], data_dir=tmp_path)
    try:
        async with mcp_client(daemon.mcp_url, reader) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed == set(TOOL_NAMES) - TRADE_TOOLS
            refused = await client.call_tool("get_orders", {})
            assert refused.is_error and "get_orders needs the 'trade' scope" in refused.content[0].text
        async with httpx2.AsyncClient() as http:
            assert await tools_list(http, daemon.mcp_url, None) == list(TOOL_NAMES)
            assert set(await tools_list(http, daemon.mcp_url, trader)) == set(TOOL_NAMES)
            order = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 1}
            answer = (await tools_call(http, daemon.mcp_url, reader, "place_order", **order)).json()["result"]
            assert answer["isError"] and "place_order needs the 'trade' scope" in answer["content"][0]["text"]
            # the trader gets past the scope check; this daemon runs no engine, and says so
            answer = (await tools_call(http, daemon.mcp_url, trader, "place_order", **order)).json()["result"]
            assert "Trading engine not running" in answer["content"][0]["text"]
    finally:
        await daemon.stop()
