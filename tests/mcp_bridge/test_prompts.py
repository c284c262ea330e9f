"""MCP prompts through the official SDK client: listing, rendering, and the contract's error codes."""

from __future__ import annotations

from decimal import Decimal as D

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from engine import ChartService
from mcp_bridge.prompts import Holding, PromptCredentialsError, PromptRateLimited, Quote
from mcp_bridge.server import build_server
from mcp_bridge.tools import Services


class FakeData:
    def __init__(self) -> None:
        self.holdings_value: list[Holding] | None = [
            Holding("BTC", D("0.5"), D(0)),
            Holding("USDT", D("10000"), D("500")),
        ]
        self.fail: Exception | None = None

    async def quote(self, symbol: str) -> Quote | None:
        if self.fail is not None:
            raise self.fail
        if symbol not in ("BTCUSDT", "ETHUSDT"):
            return None
        return Quote(symbol, D("50234.56"), D("1234.56"), D("2.5"), D("51000"), D("49000"), D("12345.67"))

    async def holdings(self) -> list[Holding] | None:
        if self.fail is not None:
            raise self.fail
        return self.holdings_value


@pytest.fixture
def data() -> FakeData:
    return FakeData()


@pytest.fixture
def client_target(charts: ChartService, data: FakeData) -> object:
    server, _ = build_server(Services(charts=charts, prompts=data))
    return server


async def test_prompts_list_has_both_prompts_with_the_contract_arguments(client_target: object) -> None:
    """trading_analysis (symbol required, strategy, risk_tolerance) and portfolio_risk (none)."""
    async with Client(client_target, mode="legacy") as client:
        listed = await client.list_prompts()
    by_name = {p.name: p for p in listed.prompts}
    assert list(by_name) == ["trading_analysis", "portfolio_risk"]
    args = {a.name: a.required for a in by_name["trading_analysis"].arguments or []}
    assert args == {"symbol": True, "strategy": False, "risk_tolerance": False}
    assert by_name["portfolio_risk"].arguments == []


async def test_trading_analysis_renders_the_quote_with_strategy_and_risk(client_target: object) -> None:
    """The markdown carries price, change, high/low, volume, the preferences, levels and a timestamp."""
    async with Client(client_target, mode="legacy") as client:
        result = await client.get_prompt("trading_analysis", {"symbol": "BTCUSDT", "strategy": "aggressive"})
    text = result.messages[0].content.text
    assert text.startswith("# Market Analysis: BTCUSDT")
    for part in (
        "**Current Price**: $50,234.56",
        "**24h Change**: +2.50% (+$1,234.56)",
        "**24h High**: $51,000.00",
        "**24h Low**: $49,000.00",
        "**24h Volume**: 12,345.67 BTC",
        "**Strategy Preference**: Aggressive",
        "**Risk Tolerance**: Medium",
        "Stop Loss",
        "Take Profit",
        "UTC*",
    ):
        assert part in text, part


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"symbol": "INVALID"}, -32003),
        ({"symbol": "BTC-USDT"}, -32003),
        ({"symbol": "XRPUSDT"}, -32003),
        ({}, -32602),
        ({"symbol": "BTCUSDT", "strategy": "yolo"}, -32602),
        ({"symbol": "BTCUSDT", "risk_tolerance": "extreme"}, -32602),
    ],
)
async def test_trading_analysis_errors_carry_the_contract_codes(client_target: object, args: dict, code: int) -> None:
    """Invalid or unknown symbols → -32003 with examples; bad enum values → -32602."""
    async with Client(client_target, mode="legacy") as client:
        with pytest.raises(MCPError) as info:
            await client.get_prompt("trading_analysis", args)
    assert info.value.code == code
    if code == -32003:
        assert info.value.data["valid_examples"] == ["BTCUSDT", "ETHUSDT", "BNBUSDT"]


async def test_portfolio_risk_renders_holdings_values_and_composition(client_target: object) -> None:
    """A table of balances with USD values, the total, and the composition by volatility."""
    async with Client(client_target, mode="legacy") as client:
        result = await client.get_prompt("portfolio_risk", {})
    text = result.messages[0].content.text
    assert "| Asset | Free Balance | Locked Balance | Total | Est. USD Value |" in text
    assert "$25,117.28" in text and "$10,500.00" in text and "~$35,617.28" in text
    assert "Bitcoin (BTC): 70.5% (High volatility)" in text and "Tether (USDT): 29.5% (Stable)" in text


async def test_portfolio_risk_without_holdings_recommends_a_start(client_target: object, data: FakeData) -> None:
    """No balances → the contract's edge-case text."""
    data.holdings_value = []
    async with Client(client_target, mode="legacy") as client:
        result = await client.get_prompt("portfolio_risk", {})
    assert "No active balances found in your account." in result.messages[0].content.text


@pytest.mark.parametrize(
    ("failure", "code", "key"),
    [
        (PromptRateLimited(60, 1200, 1200), -32001, "retry_after_secs"),
        (PromptCredentialsError("AbCd****WxYz"), -32002, "masked_api_key"),
    ],
)
async def test_rate_limits_and_bad_credentials_map_to_their_codes(
    client_target: object, data: FakeData, failure: Exception, code: int, key: str
) -> None:
    """-32001 with retry_after_secs; -32002 with the key masked."""
    data.fail = failure
    async with Client(client_target, mode="legacy") as client:
        with pytest.raises(MCPError) as info:
            await client.get_prompt("portfolio_risk", {})
    assert info.value.code == code and key in info.value.data
