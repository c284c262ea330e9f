"""Deterministic seeded price paths that can be evaluated at any moment, vectorised.

A symbol's log-price is a sum of value-noise octaves (gaussian values on lattices from 15
seconds to 30 days, linearly interpolated).  The same (seed, symbol, time) always gives the
same price, so klines for any past window are stable without storing history, and one
function serves every interval.  Posted trades re-anchor the path: after a trade at price
``p`` and time ``t``, the price at ``t' ≥ t`` is ``p · base(t') / base(t)``.  Every price it
gives is on the symbol's tick grid (PRICE_FILTER tickSize: ``price % tickSize == 0``); trades
that must not move the path (order fills at their limit) are recorded with ``anchor=False``.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from brokers.simulator.exchange_info import tick_size_for

# (lattice step in ms, amplitude of the log-price at that scale)
_OCTAVES: tuple[tuple[int, float], ...] = (
    (15_000, 0.0004),
    (60_000, 0.0008),
    (900_000, 0.002),
    (3_600_000, 0.004),
    (14_400_000, 0.008),
    (86_400_000, 0.02),
    (604_800_000, 0.05),
    (2_592_000_000, 0.12),
)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_OFFSETS = tuple(np.uint64(((k + 1) * 0x9E3779B97F4A7C15) % 2**64) for k in range(4))

KNOWN_START_PRICES = {"BTCUSDT": 65_000.0, "ETHUSDT": 3_200.0, "SOLUSDT": 150.0, "BNBUSDT": 600.0}


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _gauss(key: int, idx: np.ndarray) -> np.ndarray:
    """A standard-normal-ish value per lattice index (sum of four uniforms, rescaled)."""
    base = (idx.astype(np.int64).view(np.uint64) * _GOLDEN) ^ np.uint64(key)
    acc = np.zeros(idx.shape, dtype=np.float64)
    for offset in _OFFSETS:
        h = _mix(base + offset)
        acc += (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return (acc - 2.0) * np.sqrt(3.0)


def start_price(symbol: str) -> float:
    """Where a symbol's path is centred (well-known pairs look familiar)."""
    if symbol in KNOWN_START_PRICES:
        return KNOWN_START_PRICES[symbol]
    return float(10 ** ((_stable_hash(symbol) % 500) / 100.0 - 1.0))  # 0.1 … 1000


@dataclass
class PricePath:
    """One symbol's price as a function of exchange time (ms)."""

    symbol: str
    seed: int
    origin_ms: int
    trades_t: list[int] = field(default_factory=list)
    trades_p: list[float] = field(default_factory=list)
    trades_q: list[float] = field(default_factory=list)
    trades_m: list[bool] = field(default_factory=list)
    """Per trade: was the buyer the maker (Binance's ``isBuyerMaker``)."""
    _anchor_factor: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._keys = [_stable_hash(f"{self.seed}:{self.symbol}:{i}") for i in range(len(_OCTAVES))]
        self._p0 = start_price(self.symbol)
        self.tick = tick_size_for(self._p0)
        self._decimals = max(0, -round(np.log10(self.tick)))
        self._origin_log = float(self._base_log(np.array([self.origin_ms], dtype=np.int64))[0])

    def _base_log(self, t_ms: np.ndarray) -> np.ndarray:
        out = np.zeros(t_ms.shape, dtype=np.float64)
        for (step, amp), key in zip(_OCTAVES, self._keys, strict=True):
            i0 = np.floor_divide(t_ms, step)
            frac = (t_ms - i0 * step) / step
            lo = int(i0.min()) if i0.size else 0
            span = int(i0.max()) - lo + 2 if i0.size else 0
            if span <= i0.size:  # dense (e.g. every lattice point of many klines): each lattice value once
                g = _gauss(key, np.arange(lo, lo + span, dtype=np.int64))
                g0, g1 = g[i0 - lo], g[i0 - lo + 1]
            else:
                g0, g1 = _gauss(key, i0), _gauss(key, i0 + 1)
            out += amp * (g0 + (g1 - g0) * frac)
        return out

    def base(self, t_ms: np.ndarray) -> np.ndarray:
        """The untraded path: ``p0 · exp(noise(t) − noise(origin))``."""
        return self._p0 * np.exp(self._base_log(t_ms) - self._origin_log)

    def snap(self, prices: np.ndarray) -> np.ndarray:
        """Round to the nearest tick (at least one tick), exact to the tick's decimals."""
        ticks = np.maximum(np.round(np.asarray(prices, dtype=np.float64) / self.tick), 1.0)
        return np.round(ticks * self.tick, self._decimals)

    def price(self, t_ms: np.ndarray, *, before_trades_at_t: bool = False) -> np.ndarray:
        """The path including re-anchoring by posted trades, on the tick grid.

        ``before_trades_at_t`` ignores trades posted exactly at ``t`` (the price just before them).
        """
        t_ms = np.asarray(t_ms, dtype=np.int64)
        raw = self.base(t_ms)
        if not self.trades_t:
            return self.snap(raw)
        side = "left" if before_trades_at_t else "right"
        idx = np.searchsorted(np.asarray(self.trades_t, dtype=np.int64), t_ms, side=side) - 1
        factors = np.concatenate(([1.0], np.asarray(self._anchor_factor)))
        return self.snap(raw * factors[idx + 1])

    def price_at(self, t_ms: int) -> float:
        return float(self.price(np.array([t_ms], dtype=np.int64))[0])

    def add_trade(
        self, t_ms: int, price: float, qty: float, *, buyer_maker: bool | None = None, anchor: bool = True
    ) -> float:
        """Record a trade at ``t_ms`` (not before the last one); ``anchor`` re-anchors the path there.

        The price is rounded half-up (as written in decimal) to the tick grid and returned.
        ``buyer_maker`` defaults to "the price did not rise" (a taker sell): an up-tick is a taker buy.
        """
        if self.trades_t and t_ms < self.trades_t[-1]:
            raise ValueError("trades must be posted in time order")
        tick = Decimal(f"{self.tick:.8f}").normalize()
        price = float(max(tick, Decimal(repr(float(price))).quantize(tick, rounding=ROUND_HALF_UP)))
        if buyer_maker is None:
            buyer_maker = price <= self.price_at(t_ms)
        if anchor:
            base = float(self.base(np.array([t_ms], dtype=np.int64))[0])
            factor = price / base
        else:
            factor = self._anchor_factor[-1] if self._anchor_factor else 1.0
        self.trades_t.append(t_ms)
        self.trades_p.append(price)
        self.trades_q.append(qty)
        self.trades_m.append(buyer_maker)
        self._anchor_factor.append(factor)
        return price

    def trades_between(self, t0: int, t1: int) -> tuple[list[float], list[float]]:
        """Prices and quantities of trades with ``t0 ≤ t < t1``."""
        lo = bisect.bisect_left(self.trades_t, t0)
        hi = bisect.bisect_left(self.trades_t, t1)
        return self.trades_p[lo:hi], self.trades_q[lo:hi]
