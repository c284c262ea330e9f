"""Positions per symbol computed from fills: quantity, average entry, realized PnL, fees.

Average-cost accounting on a signed quantity (a spot account is long-only in practice,
but a sell beyond the holding is shown as negative rather than hidden).  A commission
paid in the base asset changes the quantity actually held (Binance takes it from what
you receive); every commission is also valued in the quote asset for the fee total.
Unrealized PnL is marked to the price the caller supplies (the engine's last price).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from brokers.models import Fill

ZERO = Decimal(0)


@dataclass(slots=True)
class Position:
    symbol: str
    quantity: Decimal = ZERO
    entry_price: Decimal = ZERO
    realized_pnl: Decimal = ZERO
    fees: Decimal = ZERO
    """Commissions valued in the quote asset."""

    def apply(self, fill: Fill, base_asset: str, quote_asset: str) -> None:
        signed = fill.quantity if fill.side == "BUY" else -fill.quantity
        base_fee = fill.commission if fill.commission_asset == base_asset else ZERO
        if fill.commission_asset == base_asset:
            self.fees += fill.commission * fill.price
        elif fill.commission_asset == quote_asset:
            self.fees += fill.commission
        delta = signed - base_fee
        if delta == 0:
            return
        q = self.quantity
        if q == 0 or (q > 0) == (delta > 0):
            total = abs(q) + abs(delta)
            self.entry_price = (self.entry_price * abs(q) + fill.price * abs(delta)) / total
            self.quantity = q + delta
            return
        closing = min(abs(delta), abs(q))
        direction = Decimal(1) if q > 0 else Decimal(-1)
        self.realized_pnl += closing * (fill.price - self.entry_price) * direction
        self.quantity = q + delta
        if self.quantity == 0:
            self.entry_price = ZERO
        elif (self.quantity > 0) != (q > 0):
            self.entry_price = fill.price

    def unrealized(self, mark: Decimal | None) -> Decimal | None:
        if mark is None or self.quantity == 0:
            return None if mark is None else ZERO
        return (mark - self.entry_price) * self.quantity

    def listing(self, mark: Decimal | None) -> dict[str, Any]:
        """get_positions' entry for this position marked at ``mark`` (None: no price known)."""
        unreal = self.unrealized(mark)
        return {
            "symbol": self.symbol,
            "side": "buy" if self.quantity >= 0 else "sell",
            "quantity": float(abs(self.quantity)),
            "entry_price": float(self.entry_price),
            "current_price": None if mark is None else float(mark),
            "unrealized_pnl": None if unreal is None else float(unreal),
            "realized_pnl": float(self.realized_pnl),
            "fees": float(self.fees),
        }

    @property
    def listed(self) -> bool:
        """Whether get_positions lists it: something held, or something realized."""
        return self.quantity != 0 or self.realized_pnl != 0


def positions_from_fills(fills: Iterable[Fill], assets: dict[str, tuple[str, str]]) -> dict[str, Position]:
    """Replay fills (oldest first) into positions; ``assets`` maps symbol → (base, quote)."""
    out: dict[str, Position] = {}
    for f in fills:
        base, quote = assets.get(f.symbol, ("", ""))
        out.setdefault(f.symbol, Position(f.symbol)).apply(f, base, quote)
    return out
