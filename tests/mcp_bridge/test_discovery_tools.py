"""get_exchanges and get_symbols: the agent convention, Binance symbols from the simulator's exchangeInfo,
Yahoo's search on a loopback stub, a ccxt exchange's markets from the simulator, the hour's cache, errors;
and both tools end to end through a daemon on the simulator with the official SDK client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import ccxt.pro as ccxtpro
import pytest
from aiohttp import web

from engine import ChartService, InlineRenderer, MarketData, SymbolSearch, build_pro_exchange
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import Services
from mcp_bridge.tools.agent_calls import RESULT_CACHE
from mcp_bridge.tools.discovery import use_search
from testkit.daemon_proc import mcp_client, running_daemon
from testkit.http_stub import http_stub

QUOTES = [
    {
        "symbol": "AAPL",
        "shortname": "Apple Inc.",
        "longname": "Apple Inc.",
        "quoteType": "EQUITY",
        "exchDisp": "NASDAQ",
    },
    {"symbol": "APLE", "shortname": "Apple Hospitality REIT", "quoteType": "EQUITY", "exchDisp": "NYSE"},
    {"symbol": "^GSPC", "shortname": "S&P 500", "quoteType": "INDEX", "exchDisp": "SNP"},
]


@pytest.fixture
async def yahoo_stub() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """Yahoo's /v1/finance/search on loopback: answers QUOTES, records each request's query."""
    seen: list[dict[str, str]] = []

    async def search(request: web.Request) -> web.Response:
        seen.append(dict(request.query))
        return web.json_response({"quotes": QUOTES, "news": []})

    async with http_stub({"/v1/finance/search": search}) as url:
        yield url, seen


@pytest.fixture
async def router(sim: Any, yahoo_stub: tuple[str, list[dict[str, str]]]) -> AsyncIterator[ToolRouter]:
    RESULT_CACHE.clear()
    async with aiohttp.ClientSession() as session:
        market = MarketData(session, binance_rest_url=sim.url, yahoo_url=yahoo_stub[0], timeout_s=5, cache_ttl_s=0)
        search = SymbolSearch(
            market.binance,
            yahoo=market.yahoo,
            ccxt_factory=lambda i: build_pro_exchange(i, urls={"public": f"{sim.url}/api/v3"}),
        )
        use_search(market, search)
        services = Services(charts=ChartService(market, InlineRenderer()))
        services.market = market
        yield ToolRouter(services)


async def call(router: ToolRouter, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    result = await router.call(name, args, principal="alice")
    body = json.loads(result.content[0].text)
    assert body == result.structured_content
    return bool(result.is_error), body


async def test_get_exchanges_lists_our_sources_and_the_ccxt_exchanges_honestly(router: ToolRouter) -> None:
    err, body = await call(router, "get_exchanges", {"tool_call_id": "ex_1"})
    assert not err and body["tool_call_id"] == "ex_1"
    data = body["data"]
    assert data["source_refs"][0] == "ex_1" and any(r.startswith("ccxt:pro.exchanges@") for r in data["source_refs"])
    listed = data["exchanges"]
    assert data["count"] == len(listed) == len(ccxtpro.exchanges) + 1  # ccxt's binance is BINANCE
    assert [(e["type"], e["name"].lower()) for e in listed] == sorted((e["type"], e["name"].lower()) for e in listed)
    by_id = {e["id"]: e for e in listed}
    assert by_id["BINANCE"]["capabilities"] == ["charts", "live engine", "orders"]
    assert by_id["YAHOO"]["type"] == "stock" and by_id["YAHOO"]["capabilities"] == ["charts"]
    assert "charts" not in by_id["kraken"]["capabilities"] and "live engine" in by_id["kraken"]["capabilities"]
    assert "orders (live only)" in by_id["kraken"]["capabilities"]  # ccxt has no kraken sandbox
    assert "Charts: no" in by_id["okx"]["description"]


async def test_an_identical_call_within_the_hour_is_served_from_cache(router: ToolRouter) -> None:
    _, first = await call(router, "get_exchanges", {"tool_call_id": "ex_a"})
    _, second = await call(router, "get_exchanges", {"tool_call_id": "ex_b"})
    assert second["data"]["source_refs"][:3] == ["ex_b", "cache:ex_a", "ex_a"]
    assert second["data"]["exchanges"] == first["data"]["exchanges"]


async def test_get_exchanges_refuses_arguments(router: ToolRouter) -> None:
    err, body = await call(router, "get_exchanges", {"tool_call_id": "ex_2", "type": "crypto"})
    assert err and body["tool_call_id"] == "ex_2" and body["error"]["code"] == "INVALID_ARGUMENT"


async def test_binance_symbols_come_from_exchange_info(router: ToolRouter) -> None:
    err, body = await call(router, "get_symbols", {"exchange": "binance", "search": "btc", "tool_call_id": "s1"})
    assert not err
    data = body["data"]
    assert data["exchange"] == "BINANCE"
    assert data["symbols"] == [
        {"symbol": "BTCUSDT", "fullSymbol": "BINANCE:BTCUSDT", "description": "Bitcoin / TetherUS", "type": "crypto"}
    ]
    assert data["source_refs"][0] == "s1"
    assert any(r.startswith("binance:GET /api/v3/exchangeInfo@") for r in data["source_refs"])
    _, solana = await call(router, "get_symbols", {"exchange": "BINANCE", "search": "solana"})
    assert [s["symbol"] for s in solana["data"]["symbols"]] == ["SOLUSDT"]  # matched on the description
    _, two = await call(router, "get_symbols", {"exchange": "BINANCE", "limit": 2})
    assert two["data"]["count"] == 2 and two["data"]["total"] == 4


async def test_yahoo_symbols_come_from_its_search_endpoint_once_an_hour(
    router: ToolRouter, yahoo_stub: tuple[str, list[dict[str, str]]]
) -> None:
    err, body = await call(router, "get_symbols", {"exchange": "YAHOO", "search": "apple", "limit": 5})
    assert not err
    symbols = body["data"]["symbols"]
    assert symbols[0] == {
        "symbol": "AAPL",
        "fullSymbol": "YAHOO:AAPL",
        "description": "Apple Inc. (NASDAQ)",
        "type": "stock",
    }
    assert symbols[2]["type"] == "index"
    assert any(r.startswith("yahoo:GET /v1/finance/search?q=apple") for r in body["data"]["source_refs"])
    assert yahoo_stub[1] == [{"q": "apple", "quotesCount": "5", "newsCount": "0"}]
    await call(router, "get_symbols", {"exchange": "YAHOO", "search": "APPLE", "limit": 5, "tool_call_id": "again"})
    assert len(yahoo_stub[1]) == 1  # the same search within the hour is not sent again


async def test_a_ccxt_exchange_lists_its_markets(router: ToolRouter) -> None:
    err, body = await call(router, "get_symbols", {"exchange": "binanceus", "search": "eth"})
    assert not err
    assert body["data"]["symbols"][0] == {
        "symbol": "ETHUSDT",
        "fullSymbol": "BINANCEUS:ETHUSDT",
        "description": "Ethereum / TetherUS",
        "type": "crypto",
    }
    assert body["data"]["total"] == 4  # the substring "eth" is in every "TetherUS" too
    assert any(r.startswith("binanceus:ccxt load_markets@") for r in body["data"]["source_refs"])


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        ({"exchange": "NASDAQX"}, "INVALID_ARGUMENT", "get_exchanges"),
        ({"exchange": "krakn"}, "INVALID_ARGUMENT", "kraken"),
        ({"exchange": "YAHOO"}, "INVALID_ARGUMENT", "search"),
        ({"exchange": "BINANCE", "limit": 501}, "INVALID_ARGUMENT", "limit"),
        ({"exchange": "BINANCE", "sort": "name"}, "INVALID_ARGUMENT", "sort"),
    ],
)
async def test_get_symbols_errors(router: ToolRouter, args: dict[str, Any], code: str, words: str) -> None:
    err, body = await call(router, "get_symbols", {**args, "tool_call_id": "bad_1"})
    assert err and body["tool_call_id"] == "bad_1"
    assert body["error"]["code"] == code and words in body["error"]["message"]


async def test_without_market_data_get_symbols_is_not_available() -> None:
    router = ToolRouter(Services(charts=ChartService(None, InlineRenderer())))
    err, body = await call(router, "get_symbols", {"exchange": "BINANCE"})
    assert err and body["error"]["code"] == "NOT_AVAILABLE"


@pytest.mark.process
async def test_both_tools_through_a_daemon_on_the_simulator(
    tmp_path: Path, yahoo_stub: tuple[str, list[dict[str, str]]]
) -> None:
    env = {"CHARTGEN_YAHOO_URL": yahoo_stub[0]}
    async with running_daemon(["--serve", "--sim"], data_dir=tmp_path, env=env) as daemon:
        async with mcp_client(daemon.mcp_url, daemon.token) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"get_exchanges", "get_symbols"} <= names
            result = await client.call_tool("get_exchanges", {"tool_call_id": "d_ex"})
            assert not result.is_error
            body = result.structured_content
            assert body["tool_call_id"] == "d_ex" and body["data"]["source_refs"][0] == "d_ex"
            assert body["data"]["exchanges"][0]["type"] == "crypto"
            result = await client.call_tool(
                "get_symbols", {"exchange": "BINANCE", "search": "ETH", "tool_call_id": "d_s"}
            )
            assert not result.is_error
            data = result.structured_content["data"]
            assert data["symbols"][0]["fullSymbol"] == "BINANCE:ETHUSDT"  # "eth" is also in "TetherUS"
            assert any("exchangeInfo" in r for r in data["source_refs"])
            result = await client.call_tool(
                "get_symbols", {"exchange": "YAHOO", "search": "apple", "tool_call_id": "d_y"}
            )
            assert not result.is_error and result.structured_content["data"]["symbols"][0]["symbol"] == "AAPL"
            result = await client.call_tool("get_symbols", {"exchange": "NOPE", "tool_call_id": "d_bad"})
            assert result.is_error
            assert result.structured_content["tool_call_id"] == "d_bad"
            assert result.structured_content["error"]["code"] == "INVALID_ARGUMENT"
