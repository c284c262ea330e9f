"""brokers/trigger_rules.py: stop conditions, "would trigger immediately", trailing stops (the FAQ's
scenarios A–E), the TRAILING_DELTA filter and the OCO checks, with Binance's codes and texts."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers import trigger_rules as tr

D = Decimal


def run(state: tr.TriggerState, prices: list[str]) -> tuple[tr.TriggerState, int | None]:
    """Feed trades; return the final state and the index of the trade that triggered (None: none did)."""
    for i, p in enumerate(prices):
        state = tr.on_trade(state, D(p))
        if state.triggered:
            return state, i
    return state, None


@pytest.mark.parametrize(
    ("otype", "side", "stop", "price", "reached"),
    [
        ("STOP_LOSS", "SELL", "100", "100", True),
        ("STOP_LOSS", "SELL", "100", "100.01", False),
        ("STOP_LOSS_LIMIT", "BUY", "100", "100", True),
        ("STOP_LOSS_LIMIT", "BUY", "100", "99.99", False),
        ("TAKE_PROFIT", "SELL", "100", "100.5", True),
        ("TAKE_PROFIT", "SELL", "100", "99", False),
        ("TAKE_PROFIT_LIMIT", "BUY", "100", "99", True),
        ("TAKE_PROFIT_LIMIT", "BUY", "100", "101", False),
    ],
)
def test_stop_conditions(otype: str, side: str, stop: str, price: str, reached: bool) -> None:
    assert tr.stop_reached(otype, side, D(stop), D(price)) is reached
    assert tr.would_trigger_immediately(otype, side, D(stop), D(price)) is reached


def test_a_plain_stop_triggers_on_the_first_trade_through_it() -> None:
    state = tr.start("STOP_LOSS", "SELL", D("95"), None, D("100"))
    _, at = run(state, ["99", "101", "95.01", "94.5", "90"])
    assert at == 3


def test_refusal_texts_are_binances() -> None:
    assert (tr.WOULD_TRIGGER.code, tr.WOULD_TRIGGER.msg) == (-2010, "Order would trigger immediately.")
    assert tr.OCO_BAD_PRICES.msg == "The relationship of the prices for the orders is not correct."
    assert tr.TRAILING_DELTA_FAILURE == tr.Refusal(-1013, "Filter failure: TRAILING_DELTA")
    assert tr.ALGO_LIMIT == tr.Refusal(-2010, "Filter failure: MAX_NUM_ALGO_ORDERS")


# --- trailing-stop-faq.md's scenarios --------------------------------------------------------
def test_scenario_a_trailing_stop_loss_limit_buy() -> None:
    """Stop 44,000, delta 500: the drop to 37,000 is ignored, tracking starts at 44,000, the
    lowest becomes 42,000 and 44,100 = 42,000 × 1.05 triggers."""
    state = tr.start("STOP_LOSS_LIMIT", "BUY", D("44000"), 500, D("40000"))
    state, at = run(state, ["39000", "37000", "40000", "44000", "45000", "46000"])
    assert at is None and state.tracking and state.extreme == D("44000")
    state, at = run(state, ["44000", "42000", "43000", "44099.99"])
    assert at is None and state.extreme == D("42000")
    state, at = run(state, ["44100"])
    assert at == 0


def test_scenario_b_trailing_stop_loss_limit_sell() -> None:
    """Stop 39,000, delta 1000: highest 39,000, then 41,000; 36,900 = 41,000 × 0.90 triggers."""
    state = tr.start("STOP_LOSS_LIMIT", "SELL", D("39000"), 1000, D("40000"))
    state, at = run(state, ["41500", "40000", "39000", "38000", "37000"])
    assert at is None and state.extreme == D("39000")
    state, at = run(state, ["39000", "41000", "37000", "36900.01"])
    assert at is None and state.extreme == D("41000")
    assert run(state, ["36900"])[1] == 0


def test_scenario_c_trailing_take_profit_limit_buy() -> None:
    """Stop 38,000, delta 850: lowest 37,000; 39,000 and 38,000 do not trigger; 40,145 does."""
    state = tr.start("TAKE_PROFIT_LIMIT", "BUY", D("38000"), 850, D("40000"))
    state, at = run(state, ["42000", "40000", "38000", "37000", "39000", "38000", "40144.99"])
    assert at is None and state.extreme == D("37000")
    assert run(state, ["40145"])[1] == 0


def test_scenario_d_trailing_take_profit_limit_sell() -> None:
    """Stop 42,000, delta 750: tracking from 42,000, highest 46,500; 43,012.5 triggers."""
    state = tr.start("TAKE_PROFIT_LIMIT", "SELL", D("42000"), 750, D("40000"))
    state, at = run(state, ["41500", "39000", "42000", "45000", "44000", "46500", "43012.51"])
    assert at is None and state.extreme == D("46500")
    assert run(state, ["43012.5"])[1] == 0


def test_scenario_e_trailing_stop_without_a_stop_price() -> None:
    """No stop price, delta 700: tracks from 40,000 at once; highest 45,500; 42,315 triggers."""
    state = tr.start("STOP_LOSS_LIMIT", "SELL", None, 700, D("40000"))
    assert state.tracking and state.extreme == D("40000")
    state, at = run(state, ["42000", "39500", "45500", "42315.01"])
    assert at is None and state.extreme == D("45500")
    assert run(state, ["42315"])[1] == 0


def test_trailing_delta_filter_uses_above_and_below_bounds() -> None:
    bounds = tr.TrailingBounds(min_above=10, max_above=100, min_below=20, max_below=2000)
    assert tr.check_trailing_delta("STOP_LOSS", "BUY", 100, bounds) is None  # above
    assert tr.check_trailing_delta("TAKE_PROFIT", "SELL", 101, bounds) == tr.TRAILING_DELTA_FAILURE  # above
    assert tr.check_trailing_delta("STOP_LOSS_LIMIT", "SELL", 15, bounds) == tr.TRAILING_DELTA_FAILURE  # below
    assert tr.check_trailing_delta("TAKE_PROFIT_LIMIT", "BUY", 2000, bounds) is None  # below


# --- order lists and filters -----------------------------------------------------------------
def test_oco_price_relationship() -> None:
    assert tr.oco_prices("SELL", D("110"), D("90"), D("100")) is None
    assert tr.oco_prices("SELL", D("100"), D("90"), D("100")) == tr.OCO_BAD_PRICES
    assert tr.oco_prices("SELL", D("110"), D("101"), D("100")) == tr.OCO_BAD_PRICES
    assert tr.oco_prices("BUY", D("90"), D("110"), D("100")) is None
    assert tr.oco_prices("BUY", D("90"), D("99"), D("100")) == tr.OCO_BAD_PRICES


def test_oco_leg_positions_use_1196_to_1199() -> None:
    assert tr.oco_leg_positions("SELL", "LIMIT_MAKER", "STOP_LOSS_LIMIT") is None
    assert tr.oco_leg_positions("BUY", "STOP_LOSS", "LIMIT_MAKER") is None
    assert tr.oco_leg_positions("BUY", "LIMIT_MAKER", "STOP_LOSS").code == -1196  # type: ignore[union-attr]
    assert tr.oco_leg_positions("SELL", "STOP_LOSS", "LIMIT_MAKER").code == -1197  # type: ignore[union-attr]
    assert tr.oco_leg_positions("BUY", "TAKE_PROFIT", "TAKE_PROFIT").code == -1198  # type: ignore[union-attr]
    refusal = tr.oco_leg_positions("SELL", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT")
    assert refusal == tr.Refusal(-1199, "A take profit order in a sell OCO must be above.")


def test_percent_price_by_side_and_algo_limit() -> None:
    f = tr.PercentPriceBySide(D(5), D("0.2"), D(2), D("0.5"))
    assert tr.percent_price_by_side("BUY", D("20"), D("100"), f) is None
    assert tr.percent_price_by_side("BUY", D("19.99"), D("100"), f) == tr.PERCENT_PRICE_FAILURE
    assert tr.percent_price_by_side("SELL", D("200.01"), D("100"), f) == tr.PERCENT_PRICE_FAILURE
    assert tr.algo_limit(4, 1, 5) is None and tr.algo_limit(5, 1, 5) == tr.ALGO_LIMIT


# --- properties -------------------------------------------------------------------------------
prices = st.lists(st.integers(min_value=1_000, max_value=100_000).map(D), min_size=1, max_size=60)


@settings(deadline=None)
@given(start=st.integers(min_value=1_000, max_value=100_000).map(D), trades=prices, delta=st.integers(10, 2000))
def test_trailing_sell_without_stop_triggers_at_the_first_reversal_by_delta(
    start: Decimal, trades: list[Decimal], delta: int
) -> None:
    """A trailing SELL fires on the first trade at or below (highest so far) × (1 − delta/10 000),
    never earlier; a BUY mirrors it with the lowest price."""
    for side in ("SELL", "BUY"):
        state = tr.start("STOP_LOSS" if side == "SELL" else "TAKE_PROFIT", side, None, delta, start)
        _, at = run(state, [str(p) for p in trades])
        expected, extreme = None, start
        for i, p in enumerate(trades):
            if side == "SELL":
                if p <= extreme * (1 - D(delta) / 10_000) and p <= extreme:
                    expected = i
                    break
                extreme = max(extreme, p)
            else:
                if p >= extreme * (1 + D(delta) / 10_000) and p >= extreme:
                    expected = i
                    break
                extreme = min(extreme, p)
        assert at == expected


@settings(deadline=None)
@given(stop=st.integers(1_000, 100_000).map(D), trades=prices)
def test_a_stop_placed_when_it_would_not_trigger_fires_exactly_when_reached(
    stop: Decimal, trades: list[Decimal]
) -> None:
    for otype, side in (("STOP_LOSS", "SELL"), ("STOP_LOSS", "BUY"), ("TAKE_PROFIT", "SELL"), ("TAKE_PROFIT", "BUY")):
        _, at = run(tr.start(otype, side, stop, None, stop), [str(p) for p in trades])
        first = next((i for i, p in enumerate(trades) if tr.stop_reached(otype, side, stop, p)), None)
        assert at == first
