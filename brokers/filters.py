"""Exchange filters (Binance ``exchangeInfo``) applied with Decimal before an order is sent.

An order that would be refused by the exchange is refused here first, with the nearest
valid values in the message ("quantity 0.00123 is not a multiple of the LOT_SIZE step
0.001; nearest valid: 0.001 or 0.002").  Nothing is rounded silently: moving a trader's
quantity or price is the trader's decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any


class FilterError(ValueError):
    """The order violates an exchange filter; the message names it and the valid neighbours."""


def _d(value: Any) -> Decimal:
    return Decimal(str(value))


def _plain(x: Decimal) -> str:
    """A Decimal without exponent or trailing zeros (``0.00100000`` → ``0.001``)."""
    text = format(x.normalize(), "f")
    return text


@dataclass(frozen=True, slots=True)
class SymbolRules:
    """The filters of one symbol that matter for spot orders."""

    symbol: str
    base_asset: str
    quote_asset: str
    status: str
    tick_size: Decimal
    min_price: Decimal
    max_price: Decimal
    step_size: Decimal
    min_qty: Decimal
    max_qty: Decimal
    market_step_size: Decimal
    market_min_qty: Decimal
    market_max_qty: Decimal
    min_notional: Decimal
    apply_min_to_market: bool
    max_notional: Decimal | None
    price_bands: tuple[Decimal, Decimal, Decimal, Decimal] | None = None
    """PERCENT_PRICE_BY_SIDE: (bid up, bid down, ask up, ask down) multipliers, or None."""

    @classmethod
    def from_exchange_info(cls, entry: dict[str, Any]) -> SymbolRules:
        filters = {f.get("filterType"): f for f in entry.get("filters", []) if isinstance(f, dict)}
        price = filters.get("PRICE_FILTER", {})
        lot = filters.get("LOT_SIZE", {})
        market = filters.get("MARKET_LOT_SIZE", {})
        notional = filters.get("NOTIONAL") or {}
        legacy = filters.get("MIN_NOTIONAL") or {}
        min_notional = _d(notional.get("minNotional", legacy.get("minNotional", "0")))
        apply_market = bool(notional.get("applyMinToMarket", legacy.get("applyToMarket", True)))
        max_notional = notional.get("maxNotional")
        band = filters.get("PERCENT_PRICE_BY_SIDE")
        bands = None
        if band is not None:
            keys = ("bidMultiplierUp", "bidMultiplierDown", "askMultiplierUp", "askMultiplierDown")
            bands = (_d(band[keys[0]]), _d(band[keys[1]]), _d(band[keys[2]]), _d(band[keys[3]]))
        return cls(
            symbol=str(entry["symbol"]).upper(),
            base_asset=str(entry.get("baseAsset", "")),
            quote_asset=str(entry.get("quoteAsset", "")),
            status=str(entry.get("status", "TRADING")),
            tick_size=_d(price.get("tickSize", "0")),
            min_price=_d(price.get("minPrice", "0")),
            max_price=_d(price.get("maxPrice", "0")),
            step_size=_d(lot.get("stepSize", "0")),
            min_qty=_d(lot.get("minQty", "0")),
            max_qty=_d(lot.get("maxQty", "0")),
            market_step_size=_d(market.get("stepSize", "0")),
            market_min_qty=_d(market.get("minQty", "0")),
            market_max_qty=_d(market.get("maxQty", "0")),
            min_notional=min_notional,
            apply_min_to_market=apply_market,
            max_notional=None if max_notional is None else _d(max_notional),
            price_bands=bands,
        )

    def check_price(self, price: Decimal) -> None:
        if price <= 0:
            raise FilterError(f"price must be greater than 0; got {_plain(price)}")
        if self.min_price > 0 and price < self.min_price:
            raise FilterError(f"price {_plain(price)} is below {self.symbol}'s minimum {_plain(self.min_price)}")
        if self.max_price > 0 and price > self.max_price:
            raise FilterError(f"price {_plain(price)} is above {self.symbol}'s maximum {_plain(self.max_price)}")
        if self.tick_size > 0:
            _check_step("price", price, self.tick_size, self.min_price, "PRICE_FILTER tick")

    def check_price_band(self, side: str, price: Decimal, reference: Decimal) -> None:
        """PERCENT_PRICE_BY_SIDE against ``reference`` (our last trade price; Binance uses its own
        average, so an order near a band edge may still be refused there)."""
        if self.price_bands is None or reference <= 0:
            return
        bid_up, bid_down, ask_up, ask_down = self.price_bands
        up, down = (bid_up, bid_down) if side == "BUY" else (ask_up, ask_down)
        lo, hi = reference * down, reference * up
        if (down > 0 and price < lo) or (up > 0 and price > hi):
            raise FilterError(
                f"price {_plain(price)} is outside {self.symbol}'s PERCENT_PRICE_BY_SIDE range for a "
                f"{side.lower()} order: {_plain(lo.quantize(self.tick_size or Decimal('0.00000001')))} to "
                f"{_plain(hi.quantize(self.tick_size or Decimal('0.00000001')))} around the last price "
                f"{_plain(reference)}"
            )

    def check_quantity(self, qty: Decimal, *, market: bool) -> None:
        if qty <= 0:
            raise FilterError(f"quantity must be greater than 0; got {_plain(qty)}")
        step, lo, hi = self.step_size, self.min_qty, self.max_qty
        if lo > 0 and qty < lo:
            raise FilterError(f"quantity {_plain(qty)} is below {self.symbol}'s LOT_SIZE minimum {_plain(lo)}")
        if hi > 0 and qty > hi:
            raise FilterError(f"quantity {_plain(qty)} is above {self.symbol}'s LOT_SIZE maximum {_plain(hi)}")
        if step > 0:
            _check_step("quantity", qty, step, lo, "LOT_SIZE step")
        if market:
            if self.market_max_qty > 0 and qty > self.market_max_qty:
                raise FilterError(
                    f"quantity {_plain(qty)} is above {self.symbol}'s MARKET_LOT_SIZE maximum "
                    f"{_plain(self.market_max_qty)} for market orders; use a limit order or split it"
                )
            if self.market_step_size > 0:
                _check_step("quantity", qty, self.market_step_size, self.market_min_qty, "MARKET_LOT_SIZE step")

    def check_notional(self, qty: Decimal, price: Decimal, *, market: bool) -> None:
        notional = qty * price
        if self.min_notional > 0 and (self.apply_min_to_market or not market) and notional < self.min_notional:
            need = (self.min_notional / price) if price > 0 else Decimal(0)
            if self.step_size > 0:
                need = (need / self.step_size).to_integral_value(rounding=ROUND_CEILING) * self.step_size
            raise FilterError(
                f"order value {_plain(notional.quantize(Decimal('0.00000001')))} {self.quote_asset} is below "
                f"{self.symbol}'s minimum notional {_plain(self.min_notional)}; at {_plain(price)} the smallest "
                f"quantity is {_plain(need)}"
            )
        if self.max_notional is not None and self.max_notional > 0 and not market and notional > self.max_notional:
            raise FilterError(
                f"order value {_plain(notional)} is above {self.symbol}'s maximum notional {_plain(self.max_notional)}"
            )


def _check_step(name: str, value: Decimal, step: Decimal, base: Decimal, label: str) -> None:
    offset = value - (base if base > 0 else Decimal(0))
    if offset % step == 0:
        return
    start = base if base > 0 else Decimal(0)
    down = start + (offset / step).to_integral_value(rounding=ROUND_FLOOR) * step
    up = down + step
    choices = [_plain(v) for v in (down, up) if v > 0]
    raise FilterError(
        f"{name} {_plain(value)} is not a multiple of the {label} {_plain(step)}; nearest valid: {' or '.join(choices)}"
    )


def rules_by_symbol(exchange_info: dict[str, Any]) -> dict[str, SymbolRules]:
    out: dict[str, SymbolRules] = {}
    for entry in exchange_info.get("symbols", []):
        if isinstance(entry, dict) and "symbol" in entry:
            rules = SymbolRules.from_exchange_info(entry)
            out[rules.symbol] = rules
    return out
