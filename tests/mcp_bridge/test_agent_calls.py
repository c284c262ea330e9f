"""The agent convention on its own: ids, source_refs, the result cache, and how the daemon's
errors map onto the seed's codes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import Field

from brokers import BrokerError, LimitExceeded, OrderInputError, TradingHalted
from engine import ChartService, InlineRenderer, MarketDataError, RateLimited
from mcp_bridge.errors import ToolError
from mcp_bridge.tools import Services
from mcp_bridge.tools.agent_calls import (
    RESULT_CACHE,
    AgentArgs,
    AgentCall,
    AgentError,
    Code,
    SourcedData,
    agent_error_of,
    agent_unit,
)
from mcp_bridge.tools.context import AgentSettings
from mcp_bridge.tools.unit import ToolContext


class EchoArgs(AgentArgs):
    word: str = Field(min_length=1)


class EchoData(SourcedData):
    word: str
    calls: int


def _unit(calls: list[str], ttl: float | None, fail: BaseException | None = None) -> Any:
    async def echo(ctx: ToolContext, args: EchoArgs, call: AgentCall) -> EchoData:
        calls.append(args.word)
        if fail is not None:
            raise fail
        call.cite(f"test:{args.word}")
        return EchoData(word=args.word, calls=len(calls))

    return agent_unit(
        name="echo", description="echo", args=EchoArgs, data=EchoData, handler=echo, group="chart", cache_ttl_s=ttl
    )


def _ctx(ttl_setting: float = 5.0, principal: str = "alice") -> ToolContext:
    services = Services(charts=ChartService(None, InlineRenderer()), agent=AgentSettings(cache_ttl_s=ttl_setting))
    return ToolContext(services, principal, frozenset())


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    RESULT_CACHE.clear()


async def test_identical_reads_are_answered_from_cache_citing_the_first_call() -> None:
    calls: list[str] = []
    unit = _unit(calls, ttl=30)
    first = (await unit.run(_ctx(), {"word": "a", "tool_call_id": "c1"})).structured_content
    second = (await unit.run(_ctx(), {"word": "a", "tool_call_id": "c2"})).structured_content
    assert calls == ["a"]
    assert first["data"]["source_refs"] == ["c1", "test:a"]
    assert second["tool_call_id"] == "c2"
    assert second["data"]["source_refs"] == ["c2", "cache:c1", "c1", "test:a"]
    await unit.run(_ctx(), {"word": "b"})
    await unit.run(_ctx(principal="bob"), {"word": "a"})
    assert calls == ["a", "b", "a"]


@pytest.mark.parametrize(("tool_ttl", "setting"), [(None, 5.0), (30.0, 0.0)])
async def test_no_cache_without_a_tool_ttl_or_with_the_setting_at_zero(tool_ttl: float | None, setting: float) -> None:
    calls: list[str] = []
    unit = _unit(calls, ttl=tool_ttl)
    for _ in range(3):
        await unit.run(_ctx(setting), {"word": "a"})
    assert calls == ["a", "a", "a"]


async def test_bad_arguments_and_failures_keep_the_tool_call_id() -> None:
    result = await _unit([], ttl=None).run(_ctx(), {"word": "", "tool_call_id": "x1", "extra": 1})
    body = json.loads(result.content[0].text)
    assert result.is_error and body == result.structured_content
    assert body["tool_call_id"] == "x1" and body["error"]["code"] == "INVALID_ARGUMENT"
    assert "word" in body["error"]["message"] and "extra" in body["error"]["message"]
    crashed = await _unit([], ttl=None, fail=KeyError("boom")).run(_ctx(), {"word": "a", "tool_call_id": "x2"})
    assert crashed.is_error and crashed.structured_content["error"]["code"] == "INTERNAL_ERROR"
    assert crashed.structured_content["tool_call_id"] == "x2"


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (RateLimited("slow down", 3.0), Code.RATE_LIMITED),
        (MarketDataError("no such symbol", status=400), Code.INVALID_SYMBOL),
        (MarketDataError("timed out"), Code.NETWORK_ERROR),
        (BrokerError("weight", code=-32001), Code.RATE_LIMITED),
        (BrokerError("no such pair", code=-32003), Code.INVALID_SYMBOL),
        (BrokerError("not enough USDT", code=-32004), Code.INSUFFICIENT_FUNDS),
        (BrokerError("exchange down"), Code.NETWORK_ERROR),
        (OrderInputError("quantity must be positive"), Code.INVALID_ARGUMENT),
        (OrderInputError("unknown pair", code=-32003), Code.INVALID_SYMBOL),
        (ToolError("bars must be between 1 and 5000"), Code.INVALID_ARGUMENT),
        (AgentError(Code.MARKET_CLOSED, "closed"), Code.MARKET_CLOSED),
        (LimitExceeded("order value 20000 exceeds the per-order limit 10000"), Code.RISK_LIMIT_EXCEEDED),
        (TradingHalted(), Code.RISK_LIMIT_EXCEEDED),
    ],
)
def test_the_daemons_errors_map_onto_the_seeds_codes(exc: BaseException, code: Code) -> None:
    mapped = agent_error_of(exc)
    assert mapped is not None and mapped.code == code and str(mapped)


def test_an_unknown_failure_has_no_code() -> None:
    assert agent_error_of(KeyError("x")) is None
