"""The simulated order book of a market: a few price levels each side around the last price.

The book is derived, not stored: from the last price (on the tick grid), the symbol's tick and
lot step and the seed.  The spread is 1-3 ticks with ``best bid < last ≤ best ask``; deeper
levels sit 1-3 ticks apart with quantities on the LOT_SIZE step that grow with depth.  The
same (seed, symbol, second, last price) always gives the same book; ``last_update_id`` grows
with time and with every trade, as Binance's ``lastUpdateId`` does.  Prices and quantities
are Decimals so the order matching code can use bid and ask exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from brokers.simulator.exchange_info import step_size_for, tick_size_for
from brokers.simulator.market import Market
from brokers.simulator.prices import _stable_hash, start_price

BOOK_LEVELS = 20
"""Levels each side (Binance's depth ``limit`` can ask for more; the simulator has only these)."""

Level = tuple[Decimal, Decimal]


@dataclass(frozen=True, slots=True)
class Book:
    """A depth snapshot: bids best (highest) first, asks best (lowest) first."""

    symbol: str
    last_update_id: int
    bids: list[Level]
    asks: list[Level]

    @property
    def best_bid(self) -> Level:
        return self.bids[0]

    @property
    def best_ask(self) -> Level:
        return self.asks[0]

    def rest_view(self, limit: int) -> dict[str, object]:
        """Binance's ``GET /api/v3/depth`` answer."""
        return {
            "lastUpdateId": self.last_update_id,
            "bids": [[f"{p:.8f}", f"{q:.8f}"] for p, q in self.bids[:limit]],
            "asks": [[f"{p:.8f}", f"{q:.8f}"] for p, q in self.asks[:limit]],
        }


def _dec(x: float) -> Decimal:
    return Decimal(f"{x:.8f}").normalize()


def _unit(key: int, *parts: object) -> float:
    """A deterministic number in [0, 1) for ``parts``."""
    return (_stable_hash(f"{key}:" + ":".join(map(str, parts))) % 1_000_003) / 1_000_003


def build_book(market: Market, now_ms: int, levels: int = BOOK_LEVELS) -> Book:
    """The book of ``market`` at ``now_ms`` with ``levels`` price levels each side."""
    p0 = start_price(market.symbol)
    tick, step = _dec(tick_size_for(p0)), _dec(step_size_for(p0))
    last = Decimal(f"{market.last_price(now_ms):.8f}").quantize(tick)
    key = _stable_hash(f"{market.path.seed}:{market.symbol}:book")
    second = now_ms // 1000
    spread = 1 + int(_unit(key, "spread", second, last) * 3)  # 1-3 ticks
    best_ask = last + tick * (spread // 2)
    best_bid = best_ask - tick * spread
    # about a tenth of a minute's volume at the top, growing with depth
    top_qty = market.base_volume / 10.0

    def side(name: str, best: Decimal, direction: int) -> list[Level]:
        out: list[Level] = []
        price = best
        for i in range(levels):
            if price <= 0:
                break
            u = _unit(key, name, second, last, i)
            lots = max(1, round(top_qty * (0.2 + 1.6 * u) * (1 + i / 4) / float(step)))
            out.append((price, step * lots))
            price += direction * tick * (1 + int(_unit(key, name, "gap", second, i) * 3))
        return out

    update_id = now_ms + len(market.path.trades_t)
    return Book(market.symbol, update_id, side("bid", best_bid, -1), side("ask", best_ask, 1))
