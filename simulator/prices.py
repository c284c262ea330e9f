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
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from simulator.exchange_info import tick_size_for

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
_STEPS = np.array([step for step, _ in _OCTAVES], dtype=np.int64)[:, None]
_STEPS_F = _STEPS.astype(np.float64)
_AMPS = np.array([amp for _, amp in _OCTAVES])[:, None]
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_OFFSETS = tuple(np.uint64(((k + 1) * 0x9E3779B97F4A7C15) % 2**64) for k in range(4))
_OFFSETS_COLUMN = np.array(_OFFSETS, dtype=np.uint64).reshape(4, 1)

KNOWN_START_PRICES = {"BTCUSDT": 65_000.0, "ETHUSDT": 3_200.0, "SOLUSDT": 150.0, "BNBUSDT": 600.0}


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))  # a new array: the steps after this one work in place
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def _gauss(key: int | np.ndarray, idx: np.ndarray) -> np.ndarray:
    """A standard-normal-ish value per lattice index (sum of four uniforms, rescaled).

    ``key`` is one octave key, or one per index (many paths evaluated at once).
    """
    keys = key if isinstance(key, np.ndarray) else np.uint64(key)
    base = (idx.astype(np.int64).view(np.uint64) * _GOLDEN) ^ keys
    # the four uniforms in one pass (a row each), added in the same order as one by one
    mixed = _mix(base[None, ...] + _OFFSETS_COLUMN)
    mixed >>= np.uint64(11)
    u = mixed.astype(np.float64)
    u /= float(1 << 53)
    acc = np.zeros(idx.shape, dtype=np.float64)
    for row in u:
        acc += row
    acc -= 2.0
    acc *= np.sqrt(3.0)
    return acc


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
    anchor_factors: list[float] = field(default_factory=list)
    """Per trade: the factor the path is scaled by from that trade on (1.0 before the first anchoring trade)."""

    def __post_init__(self) -> None:
        # derived once, read by price_many for many paths together: the noise octaves' hash keys, the
        # start price and its tick's decimals, the noise at the origin (the price there is p0)
        self.octave_keys = [_stable_hash(f"{self.seed}:{self.symbol}:{i}") for i in range(len(_OCTAVES))]
        self._key_array = np.array(self.octave_keys, dtype=np.uint64)
        self.p0 = start_price(self.symbol)
        self.tick = tick_size_for(self.p0)
        self.decimals = max(0, -round(np.log10(self.tick)))
        self.origin_log = float(self._base_log(np.array([self.origin_ms], dtype=np.int64))[0])

    def _base_log(self, t_ms: np.ndarray) -> np.ndarray:
        """The noise at each instant; a 2-D ``t_ms`` holds a column of ascending instants per kline.

        Every octave's lattice values come from one :func:`_gauss` call, and the octaves whose
        cells hold each column whole (a minute's samples inside an hour's cell) are interpolated
        together, their cell looked up once per column: numpy's cost is mostly per call.  The
        arithmetic per instant is the same either way, octave after octave.
        """
        grid = t_ms if t_ms.ndim == 2 else t_ms.reshape(1, -1)
        if grid.shape[0] > 1 and not (grid[1:] >= grid[:-1]).all():
            grid = t_ms.reshape(1, -1)  # not ascending: instant by instant
        out = np.zeros(grid.shape, dtype=np.float64)
        if not grid.size:
            return out.reshape(t_ms.shape)
        first, last = int(grid[0].min()), int(grid[-1].max())
        lo = [first // step for step, _ in _OCTAVES]
        span = [last // step - low + 2 for (step, _), low in zip(_OCTAVES, lo, strict=True)]
        if max(s - 2 * grid.size for s in span) > 0 or max(-first, last) >= 2**52:
            return self._base_log_sparse(grid).reshape(t_ms.shape)  # instants far apart: each one's cell alone
        # the cell arithmetic in floats, which numpy does several times quicker than in 64-bit integers:
        # whole numbers below 2⁵² are exact, and so is floor(t / step) (its error is below 1 / step)
        times = grid.astype(np.float64)
        cell = np.floor(times[:1] / _STEPS_F)  # (octave, column): each column's cell, from its first instant
        whole = (cell == np.floor(times[-1:] / _STEPS_F)).all(axis=1).tolist()  # octaves holding each column
        lattice = np.concatenate([np.arange(a, a + n) for a, n in zip(lo, span, strict=True)])
        g = _gauss(np.repeat(self._key_array, span), lattice)
        dg = g[1:] - g[:-1]  # g1 - g0 of each lattice cell: the same subtraction, once per cell
        shift = np.array(lo, dtype=np.float64) - np.cumsum([0, *span[:-1]])  # cell - shift: its index in g
        terms: dict[int, np.ndarray] = {}
        together = [o for o, w in enumerate(whole) if w]
        if together:
            rows = np.array(together)
            at = (cell[rows] - shift[rows, None]).astype(np.intp)
            frac = times[None, :, :] - (cell[rows] * _STEPS_F[rows])[:, None, :]  # rem = t - i0·step, exact
            frac /= _STEPS_F[rows][:, :, None]
            frac *= dg[at][:, None, :]
            frac += g[at][:, None, :]
            frac *= _AMPS[rows][:, :, None]
            terms = dict(zip(together, frac, strict=True))
        for o, (step, amp) in enumerate(_OCTAVES):
            if o not in terms:  # the columns straddle this octave's cells: instant by instant
                i0 = np.floor(times / step)
                at = (i0 - shift[o]).astype(np.intp)
                terms[o] = amp * (g[at] + dg[at] * ((times - i0 * step) / step))
            out += terms[o]
        return out.reshape(t_ms.shape)

    def _base_log_sparse(self, grid: np.ndarray) -> np.ndarray:
        """:meth:`_base_log` for instants too far apart to price every lattice point between them."""
        out = np.zeros(grid.shape, dtype=np.float64)
        for (step, amp), key in zip(_OCTAVES, self.octave_keys, strict=True):
            i0, rem = np.divmod(grid, step)
            g = _gauss(key, np.concatenate((i0.ravel(), i0.ravel() + 1)))
            g0, g1 = g[: i0.size].reshape(i0.shape), g[i0.size :].reshape(i0.shape)
            out += amp * (g0 + (g1 - g0) * (rem / step))
        return out

    def base(self, t_ms: np.ndarray) -> np.ndarray:
        """The untraded path: ``p0 · exp(noise(t) − noise(origin))``."""
        return self.p0 * np.exp(self._base_log(t_ms) - self.origin_log)

    def snap(self, prices: np.ndarray) -> np.ndarray:
        """Round to the nearest tick (at least one tick), exact to the tick's decimals."""
        ticks = np.maximum(np.round(np.asarray(prices, dtype=np.float64) / self.tick), 1.0)
        return np.round(ticks * self.tick, self.decimals)

    def price(
        self, t_ms: np.ndarray, *, before_trades_at_t: bool | np.ndarray = False, base: np.ndarray | None = None
    ) -> np.ndarray:
        """The path including re-anchoring by posted trades, on the tick grid.

        ``before_trades_at_t`` ignores trades posted exactly at ``t`` (the price just before them);
        an array of flags says it per instant.  ``base`` is :meth:`base` at ``t_ms`` when the
        caller has it already (a kline window asks for each open twice: as open and lattice point).
        """
        t_ms = np.asarray(t_ms, dtype=np.int64)
        raw = self.base(t_ms) if base is None else base
        if not self.trades_t:
            return self.snap(raw)
        trades_t = np.asarray(self.trades_t, dtype=np.int64)
        if isinstance(before_trades_at_t, np.ndarray):
            left = np.searchsorted(trades_t, t_ms, side="left")
            idx = np.where(before_trades_at_t, left, np.searchsorted(trades_t, t_ms, side="right")) - 1
        else:
            idx = np.searchsorted(trades_t, t_ms, side="left" if before_trades_at_t else "right") - 1
        factors = np.concatenate(([1.0], np.asarray(self.anchor_factors)))
        return self.snap(raw * factors[idx + 1])

    @staticmethod
    def price_many(paths: Sequence[PricePath], owner: np.ndarray, t_ms: np.ndarray, before: np.ndarray) -> np.ndarray:
        """``paths[owner[i]].price(t_ms[i], before_trades_at_t=before[i])`` for every ``i``, in one pass.

        The arithmetic is :meth:`price`'s, element by element and in the same order, so the
        results are the same floats; what it saves is the per-call cost of numpy on the small
        arrays of many markets (a clock advance prices a few instants of each subscribed market).
        """
        t_ms = np.asarray(t_ms, dtype=np.int64)
        keys = np.array([p.octave_keys for p in paths], dtype=np.uint64)[owner]
        out = np.zeros(t_ms.shape, dtype=np.float64)
        for o, (step, amp) in enumerate(_OCTAVES):
            i0 = np.floor_divide(t_ms, step)
            frac = (t_ms - i0 * step) / step
            g0, g1 = _gauss(keys[:, o], i0), _gauss(keys[:, o], i0 + 1)
            out += amp * (g0 + (g1 - g0) * frac)
        p0 = np.array([p.p0 for p in paths])[owner]
        origin_log = np.array([p.origin_log for p in paths])[owner]
        raw = p0 * np.exp(out - origin_log)
        for j, path in enumerate(paths):
            if path.trades_t:  # re-anchored by posted trades (price(): the factor of the last one up to t)
                mine = np.flatnonzero(owner == j)
                trades_t = np.asarray(path.trades_t, dtype=np.int64)
                factors = np.concatenate(([1.0], np.asarray(path.anchor_factors)))
                left = np.searchsorted(trades_t, t_ms[mine], side="left")
                idx = np.where(before[mine], left, np.searchsorted(trades_t, t_ms[mine], side="right"))
                raw[mine] = raw[mine] * factors[idx]
        tick = np.array([p.tick for p in paths])[owner]
        ticks = np.maximum(np.round(raw / tick), 1.0)  # snap(), with each element's own tick
        snapped = ticks * tick
        decimals = np.array([p.decimals for p in paths])[owner]
        for d in np.unique(decimals).tolist():
            mine = np.flatnonzero(decimals == d)
            snapped[mine] = np.round(snapped[mine], d)
        return snapped

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
            factor = self.anchor_factors[-1] if self.anchor_factors else 1.0
        self.trades_t.append(t_ms)
        self.trades_p.append(price)
        self.trades_q.append(qty)
        self.trades_m.append(buyer_maker)
        self.anchor_factors.append(factor)
        return price

    def trades_between(self, t0: int, t1: int) -> tuple[list[float], list[float]]:
        """Prices and quantities of trades with ``t0 ≤ t < t1``."""
        lo = bisect.bisect_left(self.trades_t, t0)
        hi = bisect.bisect_left(self.trades_t, t1)
        return self.trades_p[lo:hi], self.trades_q[lo:hi]
