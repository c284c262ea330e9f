"""When conditional orders trigger: Binance's stop, take-profit and trailing-stop rules, in Decimal.

One pure module (no I/O, no clock) shared by the exchange simulator and the paper broker, so
both answer the same way:

* :func:`stop_reached` — a STOP_LOSS(_LIMIT) SELL triggers when a trade is at or below its stop,
  a BUY at or above; TAKE_PROFIT(_LIMIT) the other way round (rest-api.md, "Trigger order price
  rules against market price").
* :func:`would_trigger_immediately` — the check Binance makes at placement against the last
  price (-2010 "Order would trigger immediately.", errors.md / user-data-stream.md
  ``STOP_PRICE_WOULD_TRIGGER_IMMEDIATELY``).
* :class:`TriggerState` / :func:`start` / :func:`on_trade` — a conditional order's state, moved
  by each trade, including trailing stops exactly as trailing-stop-faq.md describes: with a
  ``stopPrice`` the order starts tracking once a trade meets it (that trade sets the peak or
  trough); without one it tracks from the last price at placement; it triggers when the price
  reverses from the peak (SELL) or trough (BUY) by ``trailingDelta`` basis points.
* :func:`check_trailing_delta` — the TRAILING_DELTA filter (above / below bounds by type and side).
* :func:`oco_leg_positions` and :func:`oco_prices` — an OCO's legs in the right slots
  (-1196…-1199) and the price relationship (SELL: take-profit price > last > stop; BUY: reverse),
  answered with errors.md's codes and texts.
* :func:`percent_price_by_side` and :data:`ALGO_LIMIT` — the other filters a stop order meets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Literal

STOP_LOSS_TYPES = frozenset({"STOP_LOSS", "STOP_LOSS_LIMIT"})
TAKE_PROFIT_TYPES = frozenset({"TAKE_PROFIT", "TAKE_PROFIT_LIMIT"})
CONDITIONAL_TYPES = STOP_LOSS_TYPES | TAKE_PROFIT_TYPES
LIMIT_STOP_TYPES = frozenset({"STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT"})
BIPS = Decimal(10_000)

Direction = Literal["UP", "DOWN"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A Binance error answer: its code and exact message."""

    code: int
    msg: str


WOULD_TRIGGER = Refusal(-2010, "Order would trigger immediately.")
OCO_BAD_PRICES = Refusal(-2010, "The relationship of the prices for the orders is not correct.")
TRAILING_DELTA_FAILURE = Refusal(-1013, "Filter failure: TRAILING_DELTA")
PERCENT_PRICE_FAILURE = Refusal(-1013, "Filter failure: PERCENT_PRICE_BY_SIDE")
ALGO_LIMIT = Refusal(-2010, "Filter failure: MAX_NUM_ALGO_ORDERS")
"""Too many open stop loss and/or take profit orders on the symbol (errors.md, filter failures)."""
BUY_OCO_STOP_LOSS_MUST_BE_ABOVE = Refusal(-1196, "A stop loss order in a buy OCO must be above.")
SELL_OCO_STOP_LOSS_MUST_BE_BELOW = Refusal(-1197, "A stop loss order in a sell OCO must be below.")
BUY_OCO_TAKE_PROFIT_MUST_BE_BELOW = Refusal(-1198, "A take profit order in a buy OCO must be below.")
SELL_OCO_TAKE_PROFIT_MUST_BE_ABOVE = Refusal(-1199, "A take profit order in a sell OCO must be above.")


def trigger_direction(otype: str, side: str) -> Direction:
    """Which way the price must move to reach the stop: UP for STOP_LOSS BUY and TAKE_PROFIT SELL."""
    if otype not in CONDITIONAL_TYPES:
        raise ValueError(f"{otype} is not a conditional order type")
    stop_loss = otype in STOP_LOSS_TYPES
    return "UP" if (side == "BUY") == stop_loss else "DOWN"


def stop_reached(otype: str, side: str, stop_price: Decimal, price: Decimal) -> bool:
    """Whether a trade at ``price`` meets the stop condition of a conditional order."""
    return price >= stop_price if trigger_direction(otype, side) == "UP" else price <= stop_price


def would_trigger_immediately(otype: str, side: str, stop_price: Decimal, last: Decimal) -> bool:
    """Binance refuses a stop whose condition the last price already meets (-2010)."""
    return stop_reached(otype, side, stop_price, last)


# --- trailing stops --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TrailingBounds:
    """The TRAILING_DELTA filter (exchangeInfo); Binance's usual 10…2000 bips by default."""

    min_above: int = 10
    max_above: int = 2000
    min_below: int = 10
    max_below: int = 2000


def check_trailing_delta(otype: str, side: str, delta: int, bounds: TrailingBounds) -> Refusal | None:
    """The TRAILING_DELTA filter: "above" bounds for STOP_LOSS BUY / TAKE_PROFIT SELL, "below" otherwise."""
    if trigger_direction(otype, side) == "UP":
        lo, hi = bounds.min_above, bounds.max_above
    else:
        lo, hi = bounds.min_below, bounds.max_below
    return None if lo <= delta <= hi else TRAILING_DELTA_FAILURE


def trailing_trigger_price(side: str, extreme: Decimal, delta: int) -> Decimal:
    """Where a tracking trailing stop triggers: ``extreme`` reversed by ``delta`` bips."""
    move = extreme * Decimal(delta) / BIPS
    return extreme - move if side == "SELL" else extreme + move


@dataclass(frozen=True, slots=True)
class TriggerState:
    """A conditional order's trigger state.

    ``tracking``: a trailing stop that is following the price (``extreme`` is the highest trade
    since then for a SELL, the lowest for a BUY).  ``triggered``: the condition is met and the
    order now works as a MARKET (STOP_LOSS / TAKE_PROFIT) or LIMIT (…_LIMIT) order.
    """

    otype: str
    side: str
    stop_price: Decimal | None
    trailing_delta: int | None
    tracking: bool = False
    extreme: Decimal | None = None
    triggered: bool = False


def start(otype: str, side: str, stop_price: Decimal | None, trailing_delta: int | None, last: Decimal) -> TriggerState:
    """The state of a newly placed conditional order (after :func:`would_trigger_immediately` passed).

    A trailing stop without a stop price tracks at once from the last price (FAQ Scenario E).
    """
    if stop_price is None and trailing_delta is None:
        raise ValueError("a conditional order needs a stop price or a trailing delta")
    trigger_direction(otype, side)
    if stop_price is None:
        return TriggerState(otype, side, None, trailing_delta, tracking=True, extreme=last)
    return TriggerState(otype, side, stop_price, trailing_delta)


def on_trade(state: TriggerState, price: Decimal) -> TriggerState:
    """The state after a trade at ``price``; ``triggered`` is set when the order fires on it."""
    if state.triggered:
        return state
    if state.trailing_delta is None:
        assert state.stop_price is not None
        if stop_reached(state.otype, state.side, state.stop_price, price):
            return replace(state, triggered=True)
        return state
    if not state.tracking:
        assert state.stop_price is not None
        if stop_reached(state.otype, state.side, state.stop_price, price):
            return replace(state, tracking=True, extreme=price)
        return state
    assert state.extreme is not None
    if state.side == "SELL":
        if price > state.extreme:
            return replace(state, extreme=price)
        if price <= trailing_trigger_price("SELL", state.extreme, state.trailing_delta):
            return replace(state, triggered=True)
        return state
    if price < state.extreme:
        return replace(state, extreme=price)
    if price >= trailing_trigger_price("BUY", state.extreme, state.trailing_delta):
        return replace(state, triggered=True)
    return state


def limit_marketable(side: str, limit: Decimal, last: Decimal) -> bool:
    """Whether a limit order at ``limit`` would take at ``last`` (a triggered …_LIMIT order fills at once)."""
    return last <= limit if side == "BUY" else last >= limit


# --- order lists -----------------------------------------------------------------------
def oco_leg_positions(side: str, above_type: str, below_type: str) -> Refusal | None:
    """An OCO's legs in Binance's slots: a SELL's stop loss below and take profit above; a BUY's reverse.

    Exactly one leg must be a STOP_LOSS(_LIMIT); the other LIMIT_MAKER or TAKE_PROFIT(_LIMIT).
    """
    if side == "SELL":
        if above_type in STOP_LOSS_TYPES:
            return SELL_OCO_STOP_LOSS_MUST_BE_BELOW
        if below_type in TAKE_PROFIT_TYPES or below_type == "LIMIT_MAKER":
            return SELL_OCO_TAKE_PROFIT_MUST_BE_ABOVE
    else:
        if below_type in STOP_LOSS_TYPES:
            return BUY_OCO_STOP_LOSS_MUST_BE_ABOVE
        if above_type in TAKE_PROFIT_TYPES or above_type == "LIMIT_MAKER":
            return BUY_OCO_TAKE_PROFIT_MUST_BE_BELOW
    return None


def oco_prices(side: str, take_profit_price: Decimal, stop_price: Decimal, last: Decimal) -> Refusal | None:
    """rest-api.md's OCO price restrictions; ``take_profit_price`` is the LIMIT_MAKER /
    TAKE_PROFIT_LIMIT ``price`` (a TAKE_PROFIT's ``stopPrice``) and ``stop_price`` the stop leg's
    ``stopPrice``.  SELL: take profit > last > stop; BUY: take profit < last < stop."""
    if side == "SELL":
        ok = take_profit_price > last > stop_price
    else:
        ok = take_profit_price < last < stop_price
    return None if ok else OCO_BAD_PRICES


# --- other filters ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PercentPriceBySide:
    """The PERCENT_PRICE_BY_SIDE filter's multipliers."""

    bid_up: Decimal = Decimal(5)
    bid_down: Decimal = Decimal("0.2")
    ask_up: Decimal = Decimal(5)
    ask_down: Decimal = Decimal("0.2")


def percent_price_by_side(side: str, price: Decimal, reference: Decimal, f: PercentPriceBySide) -> Refusal | None:
    """A BUY's price within ``reference·[bid_down, bid_up]``, a SELL's within ``reference·[ask_down, ask_up]``."""
    lo, hi = (f.bid_down, f.bid_up) if side == "BUY" else (f.ask_down, f.ask_up)
    return None if reference * lo <= price <= reference * hi else PERCENT_PRICE_FAILURE


def algo_limit(open_algo_orders: int, new_orders: int, max_algo: int) -> Refusal | None:
    """MAX_NUM_ALGO_ORDERS: open stop loss / take profit orders of the symbol, new ones included."""
    return None if open_algo_orders + new_orders <= max_algo else ALGO_LIMIT
