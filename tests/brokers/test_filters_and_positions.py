"""Exchange filters with exact decimals, and positions replayed from fills."""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from brokers.filters import FilterError, SymbolRules
from brokers.models import Fill, state_name
from brokers.positions import positions_from_fills

ENTRY = {
    "symbol": "BTCUSDT",
    "status": "TRADING",
    "baseAsset": "BTC",
    "quoteAsset": "USDT",
    "filters": [
        {"filterType": "PRICE_FILTER", "minPrice": "0.01", "maxPrice": "1000000", "tickSize": "0.01"},
        {"filterType": "LOT_SIZE", "minQty": "0.00001", "maxQty": "9000", "stepSize": "0.00001"},
        {"filterType": "MARKET_LOT_SIZE", "minQty": "0", "maxQty": "100", "stepSize": "0"},
        {"filterType": "NOTIONAL", "minNotional": "5", "applyMinToMarket": True, "maxNotional": "9000000"},
    ],
}


def rules() -> SymbolRules:
    return SymbolRules.from_exchange_info(ENTRY)


def test_a_quantity_off_the_step_is_refused_with_both_neighbours() -> None:
    """0.000015 BTC with step 0.00001 names 0.00001 and 0.00002."""
    with pytest.raises(FilterError, match=r"LOT_SIZE step 0.00001; nearest valid: 0.00001 or 0.00002"):
        rules().check_quantity(D("0.000015"), market=False)


def test_a_price_off_the_tick_is_refused_with_both_neighbours() -> None:
    """65000.005 with tick 0.01 names 65000 and 65000.01."""
    with pytest.raises(FilterError, match=r"nearest valid: 65000 or 65000.01"):
        rules().check_price(D("65000.005"))


def test_valid_values_pass_every_filter() -> None:
    """Exact multiples inside the bounds pass (no float rounding surprises)."""
    r = rules()
    r.check_quantity(D("0.00003"), market=True)
    r.check_price(D("64999.99"))
    r.check_notional(D("0.001"), D("65000"), market=True)


def test_below_min_notional_names_the_smallest_quantity() -> None:
    """5 USDT minimum at 65000 → 0.00008 BTC (rounded up to the step)."""
    with pytest.raises(FilterError, match=r"smallest quantity is 0.00008"):
        rules().check_notional(D("0.00001"), D("65000"), market=True)


def test_market_orders_respect_market_lot_size() -> None:
    """MARKET_LOT_SIZE maxQty applies to market orders only."""
    with pytest.raises(FilterError, match="MARKET_LOT_SIZE maximum"):
        rules().check_quantity(D("150"), market=True)
    rules().check_quantity(D("150"), market=False)


def _fill(tid: int, side: str, qty: str, price: str, fee: str = "0", asset: str = "USDT") -> Fill:
    return Fill(tid, "BTCUSDT", side, f"c{tid}", D(qty), D(price), D(fee), asset, tid)  # type: ignore[arg-type]


def test_positions_average_entry_and_realize_pnl_on_reduction() -> None:
    """Buy 1 @100, buy 1 @200 → entry 150; sell 1 @300 → realized 150, 1 left at 150."""
    pos = positions_from_fills(
        [_fill(1, "BUY", "1", "100"), _fill(2, "BUY", "1", "200"), _fill(3, "SELL", "1", "300")],
        {"BTCUSDT": ("BTC", "USDT")},
    )["BTCUSDT"]
    assert (pos.quantity, pos.entry_price, pos.realized_pnl) == (D(1), D(150), D(150))
    assert pos.unrealized(D(160)) == D(10)


def test_a_base_asset_commission_reduces_the_held_quantity_and_counts_as_a_fee() -> None:
    """Binance takes a buy's commission from the BTC received."""
    pos = positions_from_fills([_fill(1, "BUY", "1", "100", "0.001", "BTC")], {"BTCUSDT": ("BTC", "USDT")})["BTCUSDT"]
    assert pos.quantity == D("0.999") and pos.fees == D("0.1")


def test_selling_through_zero_flips_the_side_at_the_fill_price() -> None:
    """Long 1 then sell 3 → short 2 entered at the sell price."""
    pos = positions_from_fills(
        [_fill(1, "BUY", "1", "100"), _fill(2, "SELL", "3", "120")], {"BTCUSDT": ("BTC", "USDT")}
    )["BTCUSDT"]
    assert pos.quantity == D(-2) and pos.entry_price == D(120) and pos.realized_pnl == D(20)


@pytest.mark.parametrize(
    ("status", "word"),
    [
        ("PENDING_SUBMIT", "Pending"),
        ("UNKNOWN", "Pending"),
        ("NEW", "Open"),
        ("PARTIALLY_FILLED", "Open"),
        ("FILLED", "Filled"),
        ("CANCELED", "Cancelled"),
        ("EXPIRED", "Cancelled"),
        ("EXPIRED_IN_MATCH", "Cancelled"),
        ("REJECTED", "Rejected"),
    ],
)
def test_binance_statuses_map_to_chartgen_state_names(status: str, word: str) -> None:
    """Tool output uses chartgen's five words."""
    assert state_name(status) == word
