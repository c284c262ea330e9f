"""The public trade tape of a market: synthetic trades of the price path merged with real ones.

The path "trades" once a second (at every whole second ``k · 1000`` ms) at its price just
before any trade posted at that same millisecond, with a deterministic quantity and side; the
trades posted through the control API and the account's order fills (``PricePath.trades_*``)
are merged in.  Ids are the position in that merged sequence (synthetic trade ``k`` first, then
posted trades at the same time in posting order), so they are consecutive, increase with time
and never change once a trade is visible (``time ≤ now``).  Everything here is computed, not
stored, so any window of the past is cheap and the same seed always gives the same tape.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from simulator.exchange_info import step_size_for
from simulator.market import Market
from simulator.prices import _stable_hash, start_price

TRADE_EVERY_MS = 1_000
MAX_TRADES = 1_000


@dataclass(frozen=True, slots=True)
class Trade:
    """One public trade (Binance's ``/api/v3/trades`` row)."""

    id: int
    price: Decimal
    qty: Decimal
    time: int
    buyer_maker: bool

    def rest_row(self) -> dict[str, object]:
        return {
            "id": self.id,
            "price": f"{self.price:.8f}",
            "qty": f"{self.qty:.8f}",
            "quoteQty": f"{(self.price * self.qty).normalize():f}",
            "time": self.time,
            "isBuyerMaker": self.buyer_maker,
            "isBestMatch": True,
        }

    def agg_row(self) -> dict[str, object]:
        """Each trade is its own aggregate (no two share a taker order, time and price)."""
        return {
            "a": self.id,
            "p": f"{self.price:.8f}",
            "q": f"{self.qty:.8f}",
            "f": self.id,
            "l": self.id,
            "T": self.time,
            "m": self.buyer_maker,
            "M": True,
        }


def _dec(x: float) -> Decimal:
    return Decimal(f"{x:.8f}")


class Tape:
    """The merged trade sequence of one market."""

    def __init__(self, market: Market) -> None:
        self.market = market
        self.path = market.path
        self._step = step_size_for(start_price(market.symbol))
        self._key = _stable_hash(f"{market.path.seed}:{market.symbol}:tape")

    # --- ids ---------------------------------------------------------------------------
    def _synthetic_id(self, k: int) -> int:
        return k + bisect.bisect_left(self.path.trades_t, k * TRADE_EVERY_MS)

    def _posted_id(self, j: int) -> int:
        return self.path.trades_t[j] // TRADE_EVERY_MS + 1 + j

    # --- synthetic trades ----------------------------------------------------------------
    def _synthetic(self, k0: int, k1: int) -> list[Trade]:
        """Synthetic trades for slots ``k0 ≤ k < k1``."""
        if k1 <= k0:
            return []
        ks = np.arange(k0 - 1, k1, dtype=np.int64)
        prices = self.path.price(ks * TRADE_EVERY_MS, before_trades_at_t=True)
        h = (ks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(self._key)
        h ^= h >> np.uint64(31)
        u = (h % np.uint64(1_000_003)).astype(np.float64) / 1_000_003
        per_trade = self.market.base_volume / 60.0 * (0.1 + 1.8 * u)
        qty = np.maximum(np.round(per_trade / self._step), 1.0) * self._step
        out: list[Trade] = []
        for i in range(1, len(ks)):
            k = int(ks[i])
            p, prev = float(prices[i]), float(prices[i - 1])
            maker = p < prev if p != prev else bool(int(h[i]) & (1 << 40))
            out.append(Trade(self._synthetic_id(k), _dec(p), _dec(float(qty[i])), k * TRADE_EVERY_MS, maker))
        return out

    def _posted(self, j0: int, j1: int) -> list[Trade]:
        p = self.path
        return [
            Trade(self._posted_id(j), _dec(p.trades_p[j]), _dec(p.trades_q[j]), p.trades_t[j], p.trades_m[j])
            for j in range(max(0, j0), min(j1, len(p.trades_t)))
        ]

    # --- selections ----------------------------------------------------------------------
    def between(self, t0: int, t1: int, limit: int) -> list[Trade]:
        """The first ``limit`` trades with ``t0 ≤ time ≤ t1``, oldest first."""
        k0 = -(-t0 // TRADE_EVERY_MS)
        k1 = min(t1 // TRADE_EVERY_MS + 1, k0 + limit)
        j0 = bisect.bisect_left(self.path.trades_t, t0)
        j1 = min(bisect.bisect_right(self.path.trades_t, t1), j0 + limit)
        merged = sorted(self._synthetic(k0, k1) + self._posted(j0, j1), key=lambda t: t.id)
        return [t for t in merged if t0 <= t.time <= t1][:limit]

    def recent(self, now_ms: int, limit: int) -> list[Trade]:
        """The newest ``limit`` trades up to now, oldest first."""
        k1 = now_ms // TRADE_EVERY_MS + 1
        j1 = bisect.bisect_right(self.path.trades_t, now_ms)
        merged = sorted(self._synthetic(k1 - limit, k1) + self._posted(j1 - limit, j1), key=lambda t: t.id)
        return merged[-limit:]

    def from_id(self, first_id: int, now_ms: int, limit: int) -> list[Trade]:
        """Up to ``limit`` trades with ``id ≥ first_id`` and time ≤ now, oldest first."""
        n = len(self.path.trades_t)
        lo = max(0, first_id - n)  # synthetic ids are k plus at most n posted trades before it
        k0 = lo + bisect.bisect_left(range(lo, max(lo, first_id) + 1), first_id, key=self._synthetic_id)
        j0 = bisect.bisect_left(range(n), first_id, key=self._posted_id)
        k1 = min(k0 + limit, now_ms // TRADE_EVERY_MS + 1)
        merged = sorted(self._synthetic(k0, k1) + self._posted(j0, j0 + limit), key=lambda t: t.id)
        return [t for t in merged if t.id >= first_id and t.time <= now_ms][:limit]

    def last_trade(self, now_ms: int) -> Trade:
        return self.recent(now_ms, 1)[-1]

    def average(self, now_ms: int, minutes: int) -> tuple[Decimal, int]:
        """Volume-weighted average price of the last ``minutes`` (Binance's avgPrice) and the last trade time."""
        trades = self.between(now_ms - minutes * 60_000 + 1, now_ms, minutes * 60 * 1000)
        if not trades:
            last = self.last_trade(now_ms)
            return last.price, last.time
        qty = sum((t.qty for t in trades), Decimal(0))
        value = sum((t.price * t.qty for t in trades), Decimal(0))
        return (value / qty).quantize(Decimal("0.00000001")), trades[-1].time
