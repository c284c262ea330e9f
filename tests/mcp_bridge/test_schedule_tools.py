"""schedule_order, list_schedules and cancel_schedule through the tool router: answers, ownership,
the trade scope, the per-order limit failing closed when no price can be read, and a fuzz of
schedule_order's arguments that never yields an internal error."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokers import BrokerError, SafetyLimits
from engine import ChartService, InlineRenderer
from mcp_bridge.scopes import TOOL_SCOPES, TRADE
from mcp_bridge.server import ToolRouter
from mcp_bridge.tool_specs import TOOLS
from mcp_bridge.tools import Services
from mcp_bridge.tools.catalog import TOOL_NAMES
from testkit.strategies import json_values
from tests.brokers.test_schedules import BUY, Clock, D, Rig, rig_on

RUNNER = asyncio.Runner()
_RIG: list[Rig] = []


@pytest.fixture(autouse=True, scope="module")
def _close_rig() -> Iterator[None]:
    """The module's one database and loop are closed at its end (aiosqlite's thread would keep the process up)."""
    yield
    if _RIG:
        RUNNER.run(_RIG.pop().db.close())
    RUNNER.close()


def _router() -> ToolRouter:
    if not _RIG:
        _RIG.append(RUNNER.run(rig_on(":memory:", Clock())))
    rig = _RIG[0]
    services = Services(charts=ChartService(None, InlineRenderer()), orders=rig.orders, engine=object())
    services.schedules = rig.schedules
    return ToolRouter(services)


def call(name: str, args: Any, principal: str = "alice", scopes: frozenset[str] = frozenset({TRADE})) -> Any:
    return RUNNER.run(_router().call(name, args, principal=principal, scopes=scopes))


def ok(name: str, args: Any, principal: str = "alice") -> Any:
    result = call(name, args, principal)
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error(name: str, args: Any, principal: str = "alice", scopes: frozenset[str] = frozenset({TRADE})) -> str:
    result = call(name, args, principal, scopes)
    assert result.is_error
    return str(result.content[0].text)


def test_the_schedule_tools_are_listed_in_the_trade_scope_with_place_orders_arguments() -> None:
    assert {"schedule_order", "list_schedules", "cancel_schedule"} <= set(TOOL_NAMES)
    assert all(TOOL_SCOPES[t] == TRADE for t in ("schedule_order", "list_schedules", "cancel_schedule"))
    specs = {t.name: t.input_schema for t in TOOLS}
    order_props = set(specs["place_order"]["properties"]) - {"client_order_id"}
    assert order_props | {"cron", "every", "start_at", "end_at", "max_runs"} == set(
        specs["schedule_order"]["properties"]
    )
    assert "needs the 'trade' scope" in error("schedule_order", {**BUY, "every": "1h"}, scopes=frozenset({"charts"}))


def test_schedule_list_and_cancel_act_on_the_callers_own_schedules() -> None:
    made = ok("schedule_order", {**BUY, "cron": "0 8 * * 1", "max_runs": 3})
    sid = made["schedule_id"]
    assert made["next_run_at"].endswith("Z") and made["trigger"] == "cron '0 8 * * 1' UTC"
    assert sid in [s["schedule_id"] for s in ok("list_schedules", {})]
    assert sid not in [s["schedule_id"] for s in ok("list_schedules", {}, principal="bob")]
    assert "schedule not found" in error("cancel_schedule", {"schedule_id": sid}, principal="bob")
    assert ok("cancel_schedule", {"schedule_id": sid})["ok"] is True
    assert "already cancelled" in error("cancel_schedule", {"schedule_id": sid})
    assert "cron field 'hour' (2nd): 25 is out of range 0-23" in error("schedule_order", {**BUY, "cron": "0 25 * * *"})
    assert "takes only schedule_id" in error("cancel_schedule", {"schedule_id": sid, "x": 1})
    assert "takes no arguments" in error("list_schedules", {"mine": True})


async def test_schedule_order_is_refused_when_no_price_can_value_it_against_the_per_order_limit() -> None:
    """0.05 BTC (~3,260 USDT) was accepted over a 1,000 per-order limit while no price could be read;
    set_alert with an action refuses in that case, and so does schedule_order now, naming why and the fix."""
    rig = await rig_on(":memory:", Clock(), SafetyLimits(max_order_notional=D(1000)))
    try:

        async def no_ticker(symbol: str) -> Any:
            raise BrokerError("GET /api/v3/ticker/price: connection refused")

        rig.orders.guard._ticker = no_ticker  # the exchange's market data is away; the engine has no price
        services = Services(charts=ChartService(None, InlineRenderer()), orders=rig.orders, engine=object())
        services.schedules = rig.schedules
        router = ToolRouter(services)
        big = {**BUY, "quantity": 0.05, "every": "1h"}
        result = await router.call("schedule_order", big, principal="alice", scopes=frozenset({TRADE}))
        assert result.is_error, result.content[0].text
        text = result.content[0].text
        assert "per-order limit 1000" in text and "no price for BTCUSDT" in text and "connection refused" in text
        assert "retry when market data is back" in text
        # valued without a price: a quote quantity over the limit is refused, one within it accepted
        over = {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quote_quantity": 1500, "every": "1h"}
        result = await router.call("schedule_order", over, principal="alice", scopes=frozenset({TRADE}))
        assert result.is_error and "exceeds the per-order limit 1000" in result.content[0].text
        within = {**over, "quote_quantity": 500}
        result = await router.call("schedule_order", within, principal="alice", scopes=frozenset({TRADE}))
        assert not result.is_error, result.content[0].text
        listed = await router.call("list_schedules", {}, principal="alice", scopes=frozenset({TRADE}))
        assert len(json.loads(listed.content[0].text)) == 1  # only the one within the limit was created
    finally:
        await rig.db.close()


timing_values = st.one_of(
    st.sampled_from(["0 8 * * 1", "*/5 * * * *", "0 25 * * *", "* * * *", "30s", "0s", "-1h", "4h", "1w", "", " "]),
    st.sampled_from(["2026-12-01T08:00:00Z", "2026-12-01T08:00:00+05:00", "1999-01-01", "nope", "9999-12-31T23:59:59"]),
    st.integers(min_value=-3, max_value=10**7),
    json_values(finite=False),
)
schedule_args = st.fixed_dictionaries(
    {},
    optional={
        "symbol": st.one_of(st.sampled_from(["BTCUSDT", "btcusdt", "NOPE", ""]), json_values(finite=False)),
        "side": st.one_of(st.sampled_from(["buy", "sell", "hold"]), json_values(finite=False)),
        "type": st.one_of(st.sampled_from(["market", "limit", "limit_maker", "stop_loss"]), json_values(finite=False)),
        "quantity": st.one_of(st.sampled_from([0.001, "0.001", 0, -1, 1e300]), json_values(finite=False)),
        "price": st.one_of(st.sampled_from([65000, "65000.005", 0]), json_values(finite=False)),
        "quote_quantity": json_values(finite=False),
        "client_order_id": json_values(finite=False),
        "cron": timing_values,
        "every": timing_values,
        "start_at": timing_values,
        "end_at": timing_values,
        "max_runs": timing_values,
        "bogus": json_values(finite=False),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(schedule_args, json_values(finite=False)))
def test_schedule_order_answers_every_argument_object_without_an_internal_error(args: Any) -> None:
    result = call("schedule_order", args if isinstance(args, dict) else {"value": args})
    text = result.content[0].text
    assert "Internal error" not in text
    if result.is_error:
        assert 0 < len(text) < 600
    else:
        assert json.loads(text)["schedule_id"].startswith("s-")
