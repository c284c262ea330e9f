"""get_portfolio, trade_simulate and trade_execute end to end: a daemon (Binance broker) on the in-process
simulator, called with the official SDK client; every figure checked against the simulator's own state and
an independent computation in this file (pure Python over the same daily klines, fetched from the simulator)."""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from mcp import Client

from mcp_bridge.server import ToolRouter
from mcp_bridge.tools.context import Services
from simulator import RunningSimulator
from testkit.daemon_proc import create_token, mcp_client
from testkit.http_stub import http_stub
from testkit.risk_oracle import percentile
from testkit.sim_daemon import sim_env, start_on_sim

pytestmark = pytest.mark.timeout(240)

PRICES = {"BTCUSDT": "65000.00", "ETHUSDT": "3200.00"}
FEE = 0.001  # Binance's default (the Binance broker exposes no account commission): maker and taker
LOOKBACK = 365


async def call(client: Client, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(name, args)
    body = result.structured_content
    assert body is not None
    return bool(result.is_error), body


async def ok(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    failed, body = await call(client, name, args)
    assert not failed, body
    return body


async def _get(http: aiohttp.ClientSession, sim: RunningSimulator, path: str) -> Any:
    async with http.get(f"{sim.url}{path}") as r:
        assert r.status == 200, await r.text()
        return await r.json()


def _balances(sim: RunningSimulator) -> dict[str, float]:
    acct = sim.exchange.account
    return {a: float(acct.free[a] + acct.locked.get(a, Decimal(0))) for a in acct.free}


def _metrics(values: list[float]) -> tuple[float, float, float]:
    """VaR 95 % (historical), max drawdown, Sharpe (rf 0, √365): loops and a sorted list."""
    r = [values[t] / values[t - 1] - 1 for t in range(1, len(values))]
    peak, dd = values[0], 0.0
    for v in values:
        peak = max(peak, v)
        dd = max(dd, 1 - v / peak)
    mean = sum(r) / len(r)
    sd = math.sqrt(sum((x - mean) ** 2 for x in r) / (len(r) - 1))
    return max(0.0, -percentile(r, 5)), dd, mean / sd * math.sqrt(365)


async def _yahoo_chart(request: web.Request) -> web.Response:
    """Yahoo's chart endpoint for AAPL with its regular session over (an hour ago); anything else 404."""
    if request.match_info["symbol"] != "AAPL":
        return web.json_response({"chart": {"result": None, "error": {"description": "No data found"}}}, status=404)
    now = int(time.time())
    meta = {
        "regularMarketPrice": 190.0,
        "previousClose": 189.0,
        "regularMarketVolume": 1000,
        "regularMarketTime": now - 3600,
        "currentTradingPeriod": {"regular": {"start": now - 7 * 3600, "end": now - 3600}},
    }
    return web.json_response({"chart": {"result": [{"meta": meta}], "error": None}})


@contextlib.asynccontextmanager
async def _yahoo() -> AsyncIterator[str]:
    """A loopback stand-in for Yahoo's chart endpoint (the tests stay offline)."""
    async with http_stub({"/v8/finance/chart/{symbol}": _yahoo_chart}) as url:
        yield url


@contextlib.asynccontextmanager
async def running(sim: RunningSimulator, tmp_path: Path) -> AsyncIterator[tuple[Client, Client]]:
    """The daemon on ``sim`` with 0.02 BTC and 0.5 ETH bought through place_order; two principals' clients."""
    async with aiohttp.ClientSession() as http:
        for symbol, price in PRICES.items():
            async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": symbol, "price": price}) as r:
                assert r.status == 200
    token = await create_token(tmp_path, "agent", "charts,alerts,trade")
    other = await create_token(tmp_path, "other", "charts,alerts,trade")
    stack = contextlib.AsyncExitStack()
    yahoo = await stack.enter_async_context(_yahoo())
    limit = "3000"
    env = sim_env(
        sim, broker="binance", CHARTGEN_SYMBOLS="BTCUSDT,ETHUSDT", CHARTGEN_TRADING_MAX_ORDER_NOTIONAL=limit,
        CHARTGEN_YAHOO_URL=yahoo,
    )  # fmt: skip
    proc = await start_on_sim(sim, tmp_path, env)
    try:
        async with mcp_client(proc.mcp_url, token) as client, mcp_client(proc.mcp_url, other) as second:
            for symbol, qty in (("BTCUSDT", 0.02), ("ETHUSDT", 0.5)):
                order = {"symbol": symbol, "side": "buy", "type": "market", "quantity": qty}
                result = await client.call_tool("place_order", order)
                assert not result.is_error, result.content[0].text
            yield client, second
    finally:
        await proc.stop()
        await stack.aclose()


@pytest.mark.process
async def test_trade_simulate_matches_an_independent_computation_and_sends_nothing(
    sim: RunningSimulator, tmp_path: Path
) -> None:
    async with running(sim, tmp_path) as (client, _):
        await _check_trade_simulate_matches_an_independent_computation_and_sends_nothing(sim, client, _)


async def _check_trade_simulate_matches_an_independent_computation_and_sends_nothing(
    sim: RunningSimulator, client: Client, _: Client
) -> None:
    arrivals, orders = dict(sim.exchange.order_arrivals), len(sim.exchange.account.orders)
    legs = [
        {"symbol": "BTCUSDT", "action": "sell", "quantity": 0.005},
        {"symbol": "ETHUSDT", "action": "buy", "quantity": 0.1, "price": 3100},
    ]
    body = await ok(client, "trade_simulate", {"trades": legs, "tool_call_id": "sim_1"})
    assert body["tool_call_id"] == "sim_1" and body["data"]["source_refs"][0] == "sim_1"
    sim_out = body["data"]["simulation"]
    assert sim.exchange.order_arrivals == arrivals and len(sim.exchange.account.orders) == orders

    async with aiohttp.ClientSession() as http:
        price = {s: float((await _get(http, sim, f"/api/v3/ticker/price?symbol={s}"))["price"]) for s in PRICES}
        klines = {
            s: await _get(http, sim, f"/api/v3/klines?symbol={s}&interval=1d&limit={LOOKBACK + 1}") for s in PRICES
        }
    held = _balances(sim)
    btc = held["BTC"] - 0.005
    eth = held["ETH"] + 0.1 * (1 - FEE)
    cash = held["USDT"] + 0.005 * price["BTCUSDT"] * (1 - FEE) - 0.1 * 3100
    total = cash + btc * price["BTCUSDT"] + eth * price["ETHUSDT"]

    t0, t1 = sim_out["trades"]
    assert t0["status"] == t1["status"] == "filled"
    assert t0["price"] == pytest.approx(price["BTCUSDT"], rel=1e-12) and t1["price"] == 3100
    assert t0["fees"] == pytest.approx(0.005 * price["BTCUSDT"] * FEE, rel=1e-9)
    assert t0["total_cost"] == pytest.approx(-(0.005 * price["BTCUSDT"] * (1 - FEE)), rel=1e-9)
    assert t1["fees"] == pytest.approx(0.1 * FEE * 3100, rel=1e-9) and t1["liquidity"] == "maker"
    after = sim_out["portfolio_after"]
    assert after["cash"] == pytest.approx(cash, rel=1e-9)
    assert after["total_value"] == pytest.approx(total, rel=1e-9)
    by_symbol = {p["symbol"]: p for p in after["positions"]}
    assert by_symbol["BTCUSDT"]["quantity"] == pytest.approx(btc, rel=1e-12)
    assert by_symbol["ETHUSDT"]["market_value"] == pytest.approx(eth * price["ETHUSDT"], rel=1e-9)
    assert by_symbol["ETHUSDT"]["weight"] == pytest.approx(eth * price["ETHUSDT"] / total, rel=1e-9)

    times = [row[0] for row in klines["BTCUSDT"]]
    assert times == [row[0] for row in klines["ETHUSDT"]] and len(times) == LOOKBACK + 1
    values = [
        btc * float(b[4]) + eth * float(e[4]) + cash for b, e in zip(klines["BTCUSDT"], klines["ETHUSDT"], strict=True)
    ]
    var, dd, sharpe = _metrics(values)
    risk = sim_out["risk_metrics"]
    assert risk["observations"] == LOOKBACK and risk["lookback_days"] == LOOKBACK and risk["reasons"] == {}
    assert risk["var_95_1d"] == pytest.approx(var, abs=1e-9)
    assert risk["max_drawdown"] == pytest.approx(dd, abs=1e-9)
    assert risk["sharpe_ratio"] == pytest.approx(sharpe, abs=1e-9)
    refs = body["data"]["source_refs"]
    for s in PRICES:
        assert any(
            r.startswith(f"binance:GET /api/v3/klines?symbol={s}&interval=1d&limit={LOOKBACK + 1}@") for r in refs
        )


@pytest.mark.process
async def test_a_leg_over_the_order_limit_is_risk_limit_exceeded_and_nothing_reaches_the_exchange(
    sim: RunningSimulator, tmp_path: Path
) -> None:
    async with running(sim, tmp_path) as (client, _):
        await _check_a_leg_over_the_order_limit_is_risk_limit_exceeded_and_nothing_reaches_the_exchange(sim, client, _)


async def _check_a_leg_over_the_order_limit_is_risk_limit_exceeded_and_nothing_reaches_the_exchange(
    sim: RunningSimulator, client: Client, _: Client
) -> None:
    arrivals, orders = dict(sim.exchange.order_arrivals), len(sim.exchange.account.orders)
    legs = [
        {"symbol": "ETHUSDT", "action": "buy", "quantity": 0.1},
        {"symbol": "BTCUSDT", "action": "buy", "quantity": 0.1},  # 6500 USDT > 3000
    ]
    failed, body = await call(client, "trade_simulate", {"trades": legs, "tool_call_id": "sim_limit"})
    assert failed and body["tool_call_id"] == "sim_limit"
    assert body["error"]["code"] == "RISK_LIMIT_EXCEEDED"
    assert "leg 2 (BUY 0.1 BTCUSDT)" in body["error"]["message"] and "per-order limit 3000" in body["error"]["message"]
    assert sim.exchange.order_arrivals == arrivals and len(sim.exchange.account.orders) == orders

    stock = {"trades": [{"symbol": "AAPL", "action": "buy", "quantity": 1}], "tool_call_id": "sim_stock"}
    failed, body = await call(client, "trade_simulate", stock)
    assert failed and body["tool_call_id"] == "sim_stock" and body["error"]["code"] == "MARKET_CLOSED", body
    assert "exchange pairs only" in body["error"]["message"]
    unknown = {"trades": [{"symbol": "ZZZZ", "action": "buy", "quantity": 1}]}
    failed, body = await call(client, "trade_simulate", unknown)
    assert failed and body["error"]["code"] == "INVALID_SYMBOL" and body["tool_call_id"].startswith("trade_simulate_")
    stocks = {"trades": [{**legs[0], "symbol": "AAPL", "order_type": "market"}], "tool_call_id": "exec_stock"}
    failed, body = await call(client, "trade_execute", stocks)
    assert failed and body["error"]["code"] == "MARKET_CLOSED" and body["tool_call_id"] == "exec_stock"
    assert sim.exchange.order_arrivals == arrivals and len(sim.exchange.account.orders) == orders


@pytest.mark.process
async def test_trade_execute_reports_each_leg_as_the_exchange_has_it(sim: RunningSimulator, tmp_path: Path) -> None:
    async with running(sim, tmp_path) as (client, _):
        await _check_trade_execute_reports_each_leg_as_the_exchange_has_it(sim, client, _)


async def _check_trade_execute_reports_each_leg_as_the_exchange_has_it(
    sim: RunningSimulator, client: Client, _: Client
) -> None:
    legs = [
        {"symbol": "BTCUSDT", "action": "buy", "quantity": 0.01, "order_type": "market"},
        {"symbol": "BTCUSDT", "action": "buy", "quantity": 0.000015, "order_type": "market"},  # LOT_SIZE step
        {"symbol": "ETHUSDT", "action": "buy", "quantity": 0.1, "order_type": "limit", "price": 3000},
    ]
    arrivals = set(sim.exchange.order_arrivals)
    body = await ok(client, "trade_execute", {"trades": legs, "tool_call_id": "exec_1"})
    trades = body["data"]["execution"]["trades"]
    assert [t["status"] for t in trades] == ["filled", "rejected", "open"]
    assert trades[1]["error"]["code"] == "INVALID_ARGUMENT" and "LOT_SIZE" in trades[1]["error"]["message"]
    assert trades[1]["order_id"] is None
    on_exchange = {o.client_order_id: o for o in sim.exchange.account.orders.values()}
    filled, resting = on_exchange[trades[0]["order_id"]], on_exchange[trades[2]["order_id"]]
    assert filled.status == "FILLED" and resting.status == "NEW" and float(resting.price) == 3000
    assert set(sim.exchange.order_arrivals) - arrivals == {trades[0]["order_id"], trades[2]["order_id"]}
    fill_price = float(filled.cumulative_quote / filled.executed_qty)
    assert trades[0]["price"] == pytest.approx(fill_price) and trades[0]["filled_quantity"] == 0.01
    assert trades[0]["fees"] == pytest.approx(0.01 * FEE * fill_price, rel=1e-9)
    assert trades[0]["total_cost"] == pytest.approx(0.01 * fill_price * (1 + FEE), rel=1e-9)
    assert trades[2]["price"] == 3000 and trades[2]["total_cost"] == 0 and trades[2]["fees"] == 0
    after = body["data"]["execution"]["portfolio_after"]
    assert after["cash"] == pytest.approx(_balances(sim)["USDT"], rel=1e-12)
    assert body["data"]["source_refs"][0] == "exec_1"

    again = await ok(client, "trade_execute", {"trades": legs, "tool_call_id": "exec_1"})  # a retried call
    assert [t["replayed"] for t in again["data"]["execution"]["trades"]] == [True, False, True]
    assert set(sim.exchange.order_arrivals) - arrivals == {trades[0]["order_id"], trades[2]["order_id"]}

    stop = {"symbol": "BTCUSDT", "action": "sell", "quantity": 0.005, "order_type": "stop", "stop_price": 60000}
    stopped = (await ok(client, "trade_execute", {"trades": [stop], "tool_call_id": "exec_stop"}))["data"]
    leg = stopped["execution"]["trades"][0]
    assert leg["status"] == "open" and leg["price"] == 60000 and leg["filled_quantity"] == 0
    on_exchange = {o.client_order_id: o for o in sim.exchange.account.orders.values()}
    assert (on_exchange[leg["order_id"]].type, on_exchange[leg["order_id"]].status) == ("STOP_LOSS", "NEW")

    failed, body = await call(client, "trade_execute", {"trades": [legs[1]], "tool_call_id": "exec_2"})
    assert failed and body == {
        "tool_call_id": "exec_2",
        "error": {"code": "INVALID_ARGUMENT", "message": body["error"]["message"]},
    }


@pytest.mark.process
async def test_get_portfolio_values_the_account_at_the_exchanges_prices(sim: RunningSimulator, tmp_path: Path) -> None:
    async with running(sim, tmp_path) as (client, second):
        await _check_get_portfolio_values_the_account_at_the_exchanges_prices(sim, client, second)


async def _check_get_portfolio_values_the_account_at_the_exchanges_prices(
    sim: RunningSimulator, client: Client, second: Client
) -> None:
    body = await ok(client, "get_portfolio", {"tool_call_id": "pf_1"})
    assert body["tool_call_id"] == "pf_1" and body["data"]["source_refs"][0] == "pf_1"
    pf = body["data"]["portfolio"]
    held = _balances(sim)
    async with aiohttp.ClientSession() as http:
        price = {s: float((await _get(http, sim, f"/api/v3/ticker/price?symbol={s}"))["price"]) for s in PRICES}
    expected = {"BTCUSDT": held["BTC"] * price["BTCUSDT"], "ETHUSDT": held["ETH"] * price["ETHUSDT"]}
    total = held["USDT"] + sum(expected.values())
    assert pf["cash"] == pytest.approx(held["USDT"], rel=1e-12)
    assert pf["total_value"] == pytest.approx(total, rel=1e-9)
    positions = {p["symbol"]: p for p in pf["positions"]}
    assert set(positions) == set(PRICES)
    for s, mv in expected.items():
        assert positions[s]["current_price"] == pytest.approx(price[s], rel=1e-12)
        assert positions[s]["market_value"] == pytest.approx(mv, rel=1e-9)
        assert positions[s]["weight"] == pytest.approx(mv / total, rel=1e-9)
    assert positions["BTCUSDT"]["avg_price"] == pytest.approx(price["BTCUSDT"])

    failed, body = await call(second, "get_portfolio", {"user_id": "agent", "tool_call_id": "pf_2"})
    assert failed and body["tool_call_id"] == "pf_2" and body["error"]["code"] == "INVALID_ARGUMENT"
    assert "omit user_id" in body["error"]["message"]
    principal = re.search(r"is not your principal \((tok_[^)]+)\)", body["error"]["message"])
    assert principal is not None, body  # the refusal names the caller's own principal: the value that works
    own = await call(second, "get_portfolio", {"user_id": principal.group(1)})
    assert not own[0], own


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("get_portfolio", {}),
        ("trade_simulate", {"trades": [{"symbol": "BTCUSDT", "action": "buy", "quantity": 0.001}]}),
        (
            "trade_execute",
            {"trades": [{"symbol": "BTCUSDT", "action": "buy", "quantity": 0.001, "order_type": "market"}]},
        ),
    ],
)
async def test_without_the_trading_engine_each_tool_answers_not_available_with_the_fix(
    name: str, args: dict[str, Any]
) -> None:
    router = ToolRouter(Services(charts=cast(Any, None)))
    result = await router.call(name, {**args, "tool_call_id": f"{name}_off"})
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["tool_call_id"] == f"{name}_off"
    assert result.structured_content["error"]["code"] == "NOT_AVAILABLE"
    assert "--trade" in result.structured_content["error"]["message"]


@pytest.mark.parametrize(
    ("leg", "field"),
    [
        ({"order_type": "limit"}, "price is required"),
        ({"order_type": "stop"}, "stop_price is required"),
        ({"order_type": "market", "price": 1}, "price applies to limit orders only"),
        ({"order_type": "market", "quantity": 0}, "greater than 0"),
    ],
)
async def test_trade_execute_refuses_a_malformed_leg_before_sending_anything(leg: dict[str, Any], field: str) -> None:
    router = ToolRouter(Services(charts=cast(Any, None), orders=cast(Any, object())))
    trade = {"symbol": "BTCUSDT", "action": "buy", "quantity": 0.001, **leg}
    result = await router.call("trade_execute", {"trades": [trade], "tool_call_id": "bad_leg"})
    body = result.structured_content
    assert result.is_error and body is not None and body["tool_call_id"] == "bad_leg"
    assert body["error"]["code"] == "INVALID_ARGUMENT" and field in body["error"]["message"], body
