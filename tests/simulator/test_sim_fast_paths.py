"""The simulator's fast paths give exactly what the plain ones give (issue 41, point 5).

- ``format_8f`` formats like ``f"{x:.8f}"``, for any float (ties, huge, tiny, negative, not finite).
- ``PricePath.price_many`` prices many paths at once to the same floats as each path's ``price``.
- ``klines_of`` (a clock advance pricing every subscribed market together) gives each market's own
  ``klines``; the REST rows of a window (formatted together) are the rows of each kline alone.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.market import INTERVAL_MS, Kline, Market, format_8f, kline_row, klines_of
from simulator.prices import PricePath
from tests.simulator.kline_reference import reference_row

START = 1_767_225_600_000
SYMBOLS = ("BTCUSDT", "ETHUSDT", "S0001USDT", "S0123USDT", "PEPEUSDT", "S0777USDT")


EDGES = [0.0, -0.0, 1e-9, 5e-9, 4.9999999e-9, 0.5, 1 / 512, 1 / 1024, 2**-30, 0.999999995, 1.0, 0.123456785]
EDGES += [9999.99999999, 10_000.0, 12_345_678.9, 99_999_999.99999999, 1e8, 45_035_996.27370496, 1e15, 1e300]
EDGES += [float("inf"), float("-inf"), float("nan"), -1.5, 3e-8, 65_000.01, 0.00001234]


def test_format_8f_edges() -> None:
    assert format_8f(np.array(EDGES)) == [f"{x:.8f}" for x in EDGES]
    assert format_8f(np.array([])) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.floats(min_value=0, max_value=1e7), max_size=50))
def test_format_8f_is_percent_8f(values: list[float]) -> None:
    assert format_8f(np.array(values, dtype=np.float64)) == [f"{x:.8f}" for x in values]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**14), max_size=50), st.sampled_from([1, 2, 4, 8]))
def test_format_8f_on_tick_grids(ticks: list[int], decimals: int) -> None:
    """Prices are on a tick grid: exactly the doubles nearest to k / 10^decimals."""
    values = [round(t / 10**decimals, decimals) for t in ticks]
    assert format_8f(np.array(values, dtype=np.float64)) == [f"{x:.8f}" for x in values]


def _paths(trades: list[tuple[int, int, float]]) -> list[PricePath]:
    paths = [PricePath(s, 42, START) for s in SYMBOLS]
    for which, dt, move in sorted(trades, key=lambda x: x[1]):
        path = paths[which % len(paths)]
        t = START + dt
        if path.trades_t and t < path.trades_t[-1]:
            continue
        path.add_trade(t, path.price_at(t) * (1 + move), 1.0, anchor=which % 3 != 0)
    return paths


_TRADES = st.lists(
    st.tuples(st.integers(0, 11), st.integers(0, 86_400_000), st.floats(-0.05, 0.05)),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(
    trades=_TRADES,
    points=st.lists(
        st.tuples(st.integers(0, len(SYMBOLS) - 1), st.integers(-(10**10), 10**10), st.booleans()),
        min_size=1,
        max_size=80,
    ),
)
def test_price_many_is_each_paths_price(
    trades: list[tuple[int, int, float]], points: list[tuple[int, int, bool]]
) -> None:
    paths = _paths(trades)
    owner = np.array([p[0] for p in points])
    t = np.array([START + p[1] for p in points], dtype=np.int64)
    before = np.array([p[2] for p in points])
    got = PricePath.price_many(paths, owner, t, before)
    want = [paths[o].price(np.array([ti]), before_trades_at_t=b)[0] for o, ti, b in zip(owner, t, before, strict=True)]
    assert got.tolist() == [float(w) for w in want]
    # one path, many instants, before-flags per instant: the same as a call per flag
    mixed = paths[0].price(t, before_trades_at_t=before)
    one_by_one = [paths[0].price(np.array([x]), before_trades_at_t=bool(b))[0] for x, b in zip(t, before, strict=True)]
    assert mixed.tolist() == [float(x) for x in one_by_one]


def _markets(trades: list[tuple[int, int, float]]) -> list[Market]:
    markets = [Market(s, 42, START) for s in SYMBOLS]
    for which, dt, move in sorted(trades, key=lambda x: x[1]):
        m = markets[which % len(markets)]
        t = START + dt
        if m.path.trades_t and t < m.path.trades_t[-1]:
            continue
        if which % 3:
            m.trade(t, m.last_price(t) * (1 + move), 0.5)
        else:
            m.record_fill(t, m.last_price(t) * (1 + move), 0.25, buyer_maker=True)
    return markets


@settings(max_examples=40, deadline=None)
@given(
    trades=_TRADES,
    asks=st.lists(
        st.tuples(st.integers(0, len(SYMBOLS) - 1), st.sampled_from(list(INTERVAL_MS)), st.integers(1, 40)),
        min_size=1,
        max_size=8,
        unique_by=lambda a: (a[0], a[1]),
    ),
    now_after=st.integers(0, 2 * 86_400_000),
)
def test_klines_of_is_each_markets_klines(
    trades: list[tuple[int, int, float]], asks: list[tuple[int, str, int]], now_after: int
) -> None:
    now = START + now_after
    batched, alone = _markets(trades), _markets(trades)
    requests = []
    for which, interval, count in asks:
        step = INTERVAL_MS[interval]
        last = (now // step) * step
        requests.append((which, interval, [last - i * step for i in range(count)][::-1]))
    got = klines_of([(batched[w], iv, times) for w, iv, times in requests], now)
    for (w, iv, times), ks in zip(requests, got, strict=True):
        assert ks == alone[w].klines(iv, times, now)


@settings(max_examples=30, deadline=None)
@given(trades=_TRADES, interval=st.sampled_from(list(INTERVAL_MS)), limit=st.integers(1, 1000))
def test_window_rows_are_each_klines_row(trades: list[tuple[int, int, float]], interval: str, limit: int) -> None:
    market = _markets(trades)[1]
    now = START + 86_400_000 + 12_345
    window = market.kline_window(interval, now, start=None, end=None, limit=limit)
    assert [kline_row(k) for k in window] == [reference_row(k) for k in window]
    # out of order, and a kline of no window: still its own row
    assert kline_row(window[-1]) == reference_row(window[-1])
    assert kline_row(window[0]) == reference_row(window[0])
    other = Kline(1, 2, 0.5, 0.75, 0.25, 0.5, 1 / 3, 7, True)
    assert kline_row(other) == reference_row(other)
