"""Token scopes at the MCP edge: tools/list offers a token only the tools its scopes allow (all of
them without a bearer), and a call outside the scopes is refused with a message naming the missing
scope — through the official SDK client over HTTP and through a bare session-less tools/call alike."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon import serving as serve_app
from daemon import token_authenticator
from mcp_bridge.http_app import build_http_app
from mcp_bridge.scopes import (
    ADMIN,
    ALL_SCOPES,
    CHARTS,
    SCOPE_ORDER,
    TOOL_SCOPES,
    TRADE,
    ScopeError,
    allows,
    parse_scopes,
    required_scope,
)
from mcp_bridge.server import ToolRouter, build_server
from mcp_bridge.tokens import TokenStore
from mcp_bridge.tools import Services
from mcp_bridge.tools.catalog import TOOL_NAMES
from mcp_bridge.tools.unit import ToolContext
from storage import Database
from testkit.daemon_proc import mcp_client
from testkit.oauth import tools_call, tools_list

TRADE_TOOLS = {"place_order", "cancel_order", "get_orders", "get_positions", "get_balance"}
TRADE_TOOLS |= {"schedule_order", "list_schedules", "cancel_schedule"}
TRADE_TOOLS |= {"halt_trading"}
TRADE_TOOLS |= {"place_oco"}
TRADE_TOOLS |= {"get_portfolio", "trade_simulate", "trade_execute"}
ORDER = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 1}


def test_every_tool_has_a_scope_and_an_unassigned_tool_needs_admin() -> None:
    # chartgen's 15, the schedule tools, halt_trading, place_oco, the 12 agent tools
    assert len(TOOL_NAMES) == 15 + 3 + 1 + 1 + 12
    assert set(TOOL_NAMES) <= set(TOOL_SCOPES)
    assert {t for t in TOOL_NAMES if TOOL_SCOPES[t] == TRADE} == TRADE_TOOLS
    assert required_scope("a_tool_added_later") == ADMIN
    assert not allows(frozenset({"charts", "alerts", "trade"}), "a_tool_added_later")
    assert all(allows(frozenset({ADMIN}), t) for t in TOOL_NAMES)


@given(st.lists(st.sampled_from(SCOPE_ORDER), min_size=1), st.sampled_from([",", " ", ", "]))
def test_any_list_of_known_scopes_parses_in_any_order_and_separator(names: list[str], sep: str) -> None:
    assert parse_scopes(sep.join(names)) == frozenset(names)


@pytest.mark.parametrize("text", ["charts,trad", "read", "charts,,alerts,Trading", ""])
def test_an_unknown_or_empty_scope_list_is_an_error_naming_the_valid_scopes(text: str) -> None:
    with pytest.raises(ScopeError) as err:
        parse_scopes(text)
    assert "charts, alerts, trade, admin" in str(err.value)


@dataclass
class Edge:
    url: str
    tokens: dict[str, str]
    seen: list[frozenset[str]]
    """The scopes list_indicators' handler saw in its ToolContext, per call."""


def record_scopes(router: ToolRouter, seen: list[frozenset[str]]) -> None:
    unit = router.units["list_indicators"]

    async def recording(ctx: ToolContext, args: Any) -> Any:
        seen.append(ctx.scopes)
        return await unit.handler(ctx, args)

    router.units["list_indicators"] = dataclasses.replace(unit, handler=recording)


@pytest.fixture(params=["sdk", "direct"])
async def edge(request: pytest.FixtureRequest, services: Services, db: Database) -> AsyncIterator[Edge]:
    """Our HTTP app authenticating through a real token store; session-less calls are served by the
    SDK's stateless manager ("sdk") or by the daemon's fast path ("direct")."""
    store = TokenStore(db)
    services.tokens = store
    tokens = {
        "default": (await store.create("default"))[0],
        "trader": (await store.create("trader", scopes={"charts", "trade"}))[0],
        "admin": (await store.create("admin", scopes={"admin"}))[0],
    }
    server, router = build_server(services)
    seen: list[frozenset[str]] = []
    record_scopes(router, seen)
    app = build_http_app(
        server,
        authenticate=token_authenticator(store),
        direct=router.direct if request.param == "direct" else None,
    )
    async with serve_app(app) as url:
        yield Edge(f"{url}/mcp", tokens, seen)


async def test_a_default_token_sees_no_trading_tools_and_cannot_call_them_via_the_sdk_client(
    edge: Edge,
) -> None:
    url, tokens = edge.url, edge.tokens
    async with mcp_client(url, tokens["default"]) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == set(TOOL_NAMES) - TRADE_TOOLS
        for tool, args in (("place_order", ORDER), ("get_orders", {})):
            result = await client.call_tool(tool, args)
            assert result.is_error
            text = result.content[0].text
            assert f"{tool} needs the 'trade' scope" in text
            assert "chartgen token create NAME --scope charts,alerts,trade" in text
        ok = await client.call_tool("list_indicators", {})
        assert not ok.is_error


async def test_a_default_token_is_refused_trading_on_a_bare_session_less_call(edge: Edge) -> None:
    url, tokens = edge.url, edge.tokens
    async with httpx2.AsyncClient() as http:
        for tool, args in (("place_order", ORDER), ("get_orders", {})):
            answer = await tools_call(http, url, tokens["default"], tool, **args)
            assert answer.status_code == 200, answer.text
            result = answer.json()["result"]
            assert result["isError"] is True
            assert "'trade' scope" in result["content"][0]["text"]
        assert set(await tools_list(http, url, tokens["default"])) == set(TOOL_NAMES) - TRADE_TOOLS


async def test_tools_list_without_a_bearer_lists_all_15_and_scopes_narrow_it_with_one(edge: Edge) -> None:
    url, tokens = edge.url, edge.tokens
    async with httpx2.AsyncClient() as http:
        assert await tools_list(http, url, None) == list(TOOL_NAMES)
        assert await tools_list(http, url, tokens["admin"]) == list(TOOL_NAMES)
        trader = await tools_list(http, url, tokens["trader"])
        assert set(trader) == {n for n in TOOL_NAMES if TOOL_SCOPES[n] in (TRADE, CHARTS)}
        assert TRADE_TOOLS | {"generate_chart", "list_indicators", "get_indicators"} <= set(trader)
        # a trade-scoped token gets past the scope check (the handler answers: no engine in this app)
        answer = (await tools_call(http, url, tokens["trader"], "get_orders")).json()["result"]
        assert "scope" not in answer["content"][0]["text"]
        refused = (await tools_call(http, url, tokens["trader"], "set_alert")).json()["result"]
        assert "set_alert needs the 'alerts' scope" in refused["content"][0]["text"]


async def test_tool_handlers_see_the_callers_scopes(edge: Edge) -> None:
    url, tokens = edge.url, edge.tokens
    async with httpx2.AsyncClient() as http:
        answer = await tools_call(http, url, tokens["trader"], "list_indicators")
        assert not answer.json()["result"].get("isError"), answer.text
    assert edge.seen == [frozenset({"charts", "trade"})]


async def test_stdio_and_an_unconfigured_router_hold_every_scope(services: Services) -> None:
    _, router = build_server(services)
    seen: list[frozenset[str]] = []
    record_scopes(router, seen)
    result = await router.call("list_indicators", {})
    assert not result.is_error
    assert seen == [ALL_SCOPES]
    refused = await router.call("place_order", ORDER, "someone", frozenset({"charts"}))
    assert refused.is_error and "'trade' scope" in json.dumps(refused.model_dump(mode="json"))
