"""place_order's protective types, trailing delta and bracket, and place_oco's arguments: clear errors
naming the field and the fix, and no combination of them ever yields an internal error."""

from __future__ import annotations

from decimal import Decimal as D
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokers.models import BrokerError
from brokers.orders.args import OrderInputError, parse_entry, parse_oco, parse_order
from brokers.orders.guard import OrderRefused
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from storage import Database
from tests.brokers.fake_list_broker import FakeListBroker

BASE = {"symbol": "BTCUSDT", "side": "sell", "quantity": 0.01}


def test_a_stop_loss_needs_a_stop_price_or_a_trailing_delta() -> None:
    with pytest.raises(OrderInputError, match=r"stop_price is required for stop_loss orders \(or trailing_delta"):
        parse_order({**BASE, "type": "stop_loss"})
    out = parse_order({**BASE, "type": "stop_loss", "stop_price": 60000})
    assert (out["type"], out["stop_price"], out["price"], out["time_in_force"]) == ("STOP_LOSS", D(60000), None, None)
    out = parse_order({**BASE, "type": "stop_loss", "trailing_delta": 200})
    assert (out["stop_price"], out["trailing_delta"]) == (None, 200)


def test_limit_stop_types_need_a_price_and_default_to_gtc() -> None:
    with pytest.raises(
        OrderInputError, match=r"price \(the limit price once triggered\) is required for stop_loss_limit"
    ):
        parse_order({**BASE, "type": "stop_loss_limit", "stop_price": 60000})
    out = parse_order({**BASE, "type": "take_profit_limit", "stop_price": 70000, "price": 69990})
    assert (out["type"], out["price"], out["time_in_force"]) == ("TAKE_PROFIT_LIMIT", D(69990), "GTC")
    out = parse_order({**BASE, "type": "stop_loss_limit", "stop_price": 60000, "price": 59900, "time_in_force": "ioc"})
    assert out["time_in_force"] == "IOC"


def test_a_market_stop_refuses_a_price_and_names_the_limit_type() -> None:
    with pytest.raises(OrderInputError, match=r"omit price, or use type stop_loss_limit"):
        parse_order({**BASE, "type": "stop_loss", "stop_price": 60000, "price": 59000})


def test_stop_fields_on_plain_types_are_refused_and_old_texts_are_kept() -> None:
    with pytest.raises(OrderInputError, match=r"stop_price applies to stop_loss.*omit it for a limit order"):
        parse_order({**BASE, "type": "limit", "price": 65000, "stop_price": 60000})
    with pytest.raises(OrderInputError, match=r"trailing_delta applies to"):
        parse_order({**BASE, "type": "market", "trailing_delta": 100})
    with pytest.raises(OrderInputError, match=r"^price is required for limit orders$"):
        parse_order({**BASE, "type": "limit"})
    with pytest.raises(OrderInputError, match=r"^price applies to limit orders only; omit it for a market order$"):
        parse_order({**BASE, "type": "market", "price": 1})
    with pytest.raises(OrderInputError, match=r"^time_in_force must be GTC, IOC or FOK, and only for limit orders$"):
        parse_order({**BASE, "type": "stop_loss", "stop_price": 1, "time_in_force": "GTC"})


@pytest.mark.parametrize("delta", [0, -5, 10001, 1.5, "x", True, [1]])
def test_a_bad_trailing_delta_names_the_field_and_the_range(delta: Any) -> None:
    with pytest.raises(OrderInputError, match=r"trailing_delta must be a whole number of basis points"):
        parse_order({**BASE, "type": "stop_loss", "trailing_delta": delta})


def test_the_seeds_stop_type_is_a_stop_loss() -> None:
    assert parse_order({**BASE, "type": "stop", "stop_price": 60000})["type"] == "STOP_LOSS"
    assert parse_order({**BASE, "type": "stop", "stop_price": 60000, "price": 59900})["type"] == "STOP_LOSS_LIMIT"


def test_bracket_checks() -> None:
    order, bracket = parse_entry({**BASE, "side": "buy", "bracket": {"take_profit": 70000, "stop_loss": 60000}})
    assert bracket == {"take_profit": D(70000), "stop_loss": D(60000), "stop_limit": None}
    assert order.type == "MARKET" and order.owner is None
    with pytest.raises(OrderInputError, match=r"bracket.take_profit must be above bracket.stop_loss for a buy"):
        parse_entry({**BASE, "side": "buy", "bracket": {"take_profit": 60000, "stop_loss": 70000}})
    with pytest.raises(OrderInputError, match=r"bracket.take_profit must be below bracket.stop_loss for a sell"):
        parse_entry({**BASE, "bracket": {"take_profit": 70000, "stop_loss": 60000}})
    with pytest.raises(OrderInputError, match=r"bracket.stop_loss must be > 0"):
        parse_entry({**BASE, "side": "buy", "bracket": {"take_profit": 70000}})
    with pytest.raises(OrderInputError, match=r"bracket does not take \['trail'\]"):
        parse_entry({**BASE, "side": "buy", "bracket": {"take_profit": 7, "stop_loss": 6, "trail": 1}})
    with pytest.raises(OrderInputError, match=r"entry price must lie between"):
        parse_entry(
            {
                **BASE,
                "side": "buy",
                "type": "limit",
                "price": 75000,
                "bracket": {"take_profit": 70000, "stop_loss": 60000},
            }
        )
    with pytest.raises(OrderInputError, match=r"bracket attaches to market, limit or limit_maker entries"):
        parse_entry({**BASE, "type": "stop_loss", "stop_price": 1, "bracket": {"take_profit": 1, "stop_loss": 2}})
    with pytest.raises(OrderInputError, match=r"a bracket needs quantity"):
        parse_entry(
            {"symbol": "BTCUSDT", "side": "buy", "quote_quantity": 100, "bracket": {"take_profit": 2, "stop_loss": 1}}
        )
    with pytest.raises(OrderInputError, match=r"bracket is only taken by place_order|unknown argument"):
        parse_order({**BASE, "bracket": {}})


def test_place_oco_checks() -> None:
    args = {**BASE, "take_profit_price": 70000, "stop_price": 60000}
    assert parse_oco(args)["stop_limit_price"] is None
    with pytest.raises(OrderInputError, match=r"take_profit_price must be above stop_price for a sell OCO"):
        parse_oco({**args, "take_profit_price": 50000})
    with pytest.raises(OrderInputError, match=r"take_profit_price must be below stop_price for a buy OCO"):
        parse_oco({**args, "side": "buy"})
    with pytest.raises(OrderInputError, match=r"unknown argument\(s\) \['type'\]; place_oco takes"):
        parse_oco({**args, "type": "limit"})
    with pytest.raises(OrderInputError, match=r"stop_price must be > 0"):
        parse_oco({**BASE, "take_profit_price": 70000})


NUM = st.one_of(
    st.none(),
    st.integers(-10, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["60000", "abc", "", "1e400", "NaN", "-1"]),
    st.booleans(),
    st.lists(st.integers(), max_size=1),
)
TYPES = st.sampled_from(
    ["market", "limit", "limit_maker", "stop_loss", "stop_loss_limit", "take_profit", "take_profit_limit", "stop",
     "STOP_LOSS", "trailing", 5, None]
)  # fmt: skip
BRACKET = st.one_of(
    st.none(),
    st.fixed_dictionaries({"take_profit": NUM, "stop_loss": NUM}, optional={"stop_limit": NUM, "other": NUM}),
    st.sampled_from(["x", 1, []]),
)
ORDER_ARGS = st.fixed_dictionaries(
    {"symbol": st.sampled_from(["BTCUSDT", "ETHUSDT", ""]), "side": st.sampled_from(["buy", "sell", "hold"])},
    optional={
        "type": TYPES, "quantity": NUM, "price": NUM, "stop_price": NUM, "trailing_delta": NUM,
        "time_in_force": st.sampled_from(["GTC", "IOC", "FOK", "DAY", 3]), "bracket": BRACKET,
        "quote_quantity": NUM,
    },
)  # fmt: skip
OCO_ARGS = st.fixed_dictionaries(
    {"symbol": st.sampled_from(["BTCUSDT", "XX"]), "side": st.sampled_from(["buy", "sell", 1])},
    optional={"quantity": NUM, "take_profit_price": NUM, "stop_price": NUM, "stop_limit_price": NUM, "extra": NUM},
)


@given(ORDER_ARGS)
@settings(max_examples=400, deadline=None)
def test_any_place_order_arguments_parse_or_name_the_problem(args: dict[str, Any]) -> None:
    try:
        parse_entry(args)
    except OrderInputError as exc:
        assert str(exc)


@given(OCO_ARGS)
@settings(max_examples=200, deadline=None)
def test_any_place_oco_arguments_parse_or_name_the_problem(args: dict[str, Any]) -> None:
    try:
        parse_oco(args)
    except OrderInputError as exc:
        assert str(exc)


@given(st.lists(st.one_of(ORDER_ARGS, OCO_ARGS), min_size=1, max_size=4))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_the_service_never_fails_internally_on_any_arguments(calls: list[dict[str, Any]]) -> None:
    """Through the whole service (guard, lists, brackets) against a list-capable fake exchange: every
    call either succeeds or is refused with OrderInputError / OrderRefused / BrokerError."""
    db = await Database.open(":memory:")
    await db.migrate([MIGRATIONS])
    try:
        svc = OrderService(FakeListBroker(), OrderStore(db), limits=SafetyLimits(D(100000), D(200000)))
        for args in calls:
            try:
                if "take_profit_price" in args or "extra" in args:
                    await svc.lists.place_oco(args, owner="alice")
                else:
                    await svc.place_order(args, owner="alice")
            except (OrderInputError, OrderRefused, BrokerError) as exc:
                assert str(exc)
        await svc.reconcile()
    finally:
        await db.close()
