"""The one-pass klines body and its caches give exactly the plain path's bytes (issue 41, point 5).

- ``kline_rows.klines_body`` (columns → JSON in one pass) is ``orjson.dumps`` of each row formatted
  alone, for any columns: ties, huge, negative, zero and non-finite values take the plain path.
- ``Market.klines_body`` is the plain body of ``Market.kline_window`` whatever was asked before
  (cached closed klines, the held open kline, windows overlapping them).
- ``ClosedKlines`` gives back exactly what was kept, and nothing else.
- ``PricePath._base_log`` (a grid with a column per kline, or any instants) is the octave-by-octave
  integer arithmetic it was first written with, bit for bit.
- The weight meter still counts every klines request (2 each).
"""

from __future__ import annotations

import aiohttp
import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.app import RunningSimulator
from simulator.kline_cache import RECORD, ClosedKlines
from simulator.kline_rows import format_8f, kline_row, klines_body
from simulator.market import INTERVAL_MS, Kline, Market
from simulator.prices import _OCTAVES, PricePath, _gauss
from tests.simulator.kline_reference import reference_row

START = 1_767_225_600_000
DAY = 86_400_000


def reference_body(klines: list[Kline]) -> bytes:
    return orjson.dumps([reference_row(k) for k in klines])


def _body_of(klines: list[Kline]) -> bytes:
    cols = [np.array([k[i] for k in klines]) for i in range(8)]
    return klines_body(*cols)


_PRICE = st.floats(min_value=0.0, max_value=1e9) | st.sampled_from([0.0, 1e-9, 5e-9, 0.5, 0.999999995, 1 / 1024])
_ODD = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([-0.0, 2.0**53, 1e300, -1.5])
_TIME = st.integers(min_value=0, max_value=4 * 10**12)
_ODD_TIME = st.integers(min_value=-(10**13), max_value=10**17)


@st.composite
def _klines(draw: st.DrawFn, *, odd: bool) -> list[Kline]:
    """Klines of plain values (the one-pass path), or with odd ones too (some rows need the plain path)."""
    floats, times = (_PRICE | _ODD, _TIME | _ODD_TIME) if odd else (_PRICE, _TIME)
    out = []
    for _ in range(draw(st.integers(min_value=0, max_value=30))):
        t0, o, h, lo, c, v = draw(times), *(draw(floats) for _ in range(5))
        out.append(Kline(t0, draw(times), o, h, lo, c, v, draw(st.integers(0, 10**15)), draw(st.booleans())))
    return out


@settings(max_examples=300, deadline=None)
@given(_klines(odd=False))
def test_klines_body_is_each_row_dumped(klines: list[Kline]) -> None:
    assert _body_of(klines) == reference_body(klines)


@settings(max_examples=200, deadline=None)
@given(_klines(odd=True))
def test_klines_body_with_odd_values_is_each_row_dumped(klines: list[Kline]) -> None:
    assert _body_of(klines) == reference_body(klines)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=40), st.integers(-3, 3))
def test_values_next_to_half_a_hundred_millionth_format_as_python(ks: list[int], nudge: int) -> None:
    """(k + ½)·10⁻⁸ and its neighbours: the products the vectorised rounding must not decide alone."""
    halves = np.array([(k + 0.5) / 1e8 for k in ks])
    for _ in range(abs(nudge)):
        halves = np.nextafter(halves, np.inf if nudge > 0 else -np.inf)
    values = halves.tolist() + [k / 1e8 for k in ks] + [k + 0.999999995 for k in ks] + [k / 1e8 + 1e8 for k in ks]
    assert format_8f(np.array(values)) == [f"{x:.8f}" for x in values]
    klines = [Kline(1, 2, x, x, x, x, x, 3, True) for x in values]
    assert _body_of(klines) == reference_body(klines)


def _market(trades: list[tuple[int, float]], symbol: str = "BTCUSDT") -> Market:
    market = Market(symbol, 42, START)
    t = START
    for dt, move in trades:
        t += dt
        if dt % 3:
            market.trade(t, market.last_price(t) * (1 + move), 0.5)
        else:
            market.record_fill(t, market.last_price(t) * (1 + move), 0.25, buyer_maker=True)
    return market


_TRADES = st.lists(st.tuples(st.integers(0, 6 * 3_600_000), st.floats(-0.05, 0.05)), max_size=6)
_ASK = st.tuples(
    st.sampled_from(list(INTERVAL_MS)),
    st.integers(1, 1000),
    st.none() | st.integers(-3 * DAY, 2 * DAY),
    st.none() | st.integers(-DAY, 2 * DAY),
)


@settings(max_examples=40, deadline=None)
@given(
    trades=_TRADES,
    asks=st.lists(st.tuples(_ASK, st.integers(0, 7_200_000)), min_size=1, max_size=6),
    symbol=st.sampled_from(["BTCUSDT", "S0001USDT", "PEPEUSDT"]),
)
def test_market_klines_body_is_the_plain_body_of_its_window(
    trades: list[tuple[int, float]], asks: list[tuple[tuple[str, int, int | None, int | None], int]], symbol: str
) -> None:
    """Windows asked one after another (caches filling, the clock moving) each equal a fresh market's plain rows."""
    warm = _market(trades, symbol)
    now = START + sum(dt for dt, _ in trades) + 1
    for (interval, limit, start, end), later in asks:
        now += later
        bounds = {"start": None if start is None else now + start, "end": None if end is None else now + end}
        got = warm.klines_body(interval, now, limit=limit, **bounds)
        fresh = _market(trades, symbol).kline_window(interval, now, limit=limit, **bounds)
        assert got == reference_body(fresh)
        assert got == reference_body(warm.kline_window(interval, now, limit=limit, **bounds))


def test_a_window_body_reuses_the_held_open_kline_and_cached_closed_ones() -> None:
    """A second ask builds nothing: the closed klines come from the cache, the open one is held."""
    market = _market([(60_000, 0.01)])
    now = START + 3 * DAY + 12_345
    first = market.klines_body("1m", now, start=None, end=None, limit=1000)
    kept = market._closed["1m"].run(now // 60_000 * 60_000 - 999 * 60_000, 1000)
    assert kept["x"][:-1].all() and not kept["x"][-1]  # every closed kline kept, the open one held apart
    assert market._held("1m", now) is not None
    assert market.klines_body("1m", now, start=None, end=None, limit=1000) == first
    assert first == reference_body(market.kline_window("1m", now, start=None, end=None, limit=1000))


@settings(max_examples=100, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(-400, 400), st.integers(1, 300)), max_size=6),
    singles=st.lists(st.integers(-400, 400), max_size=10),
    asks=st.lists(st.tuples(st.integers(-500, 500), st.integers(1, 400)), min_size=1, max_size=5),
    offset=st.sampled_from([0, 4 * DAY]),
)
def test_closed_klines_give_back_exactly_what_was_kept(
    runs: list[tuple[int, int]], singles: list[int], asks: list[tuple[int, int]], offset: int
) -> None:
    step = 60_000
    store, model = ClosedKlines(step, offset), {}
    base = offset + 1_000_000 * step

    def fields(k: int) -> tuple[int, int, float, float, float, float, float, int, bool]:
        t = base + k * step
        return (t, t + step - 1, k / 3, k / 2, k / 5, k / 7, k * 1.5, k + 1000, True)

    for k0, count in runs:
        records = np.array([fields(k) for k in range(k0, k0 + count)], dtype=RECORD)
        store.keep_run(base + k0 * step, records)
        model.update({base + k * step: fields(k) for k in range(k0, k0 + count)})
    for k in singles:
        store.keep(fields(k))
        model[base + k * step] = fields(k)
    store.keep((base + 7 * step + 1, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, True))  # off the grid: not kept
    assert store.get(base + 7 * step + 1) is None
    for k0, count in asks:
        got = store.run(base + k0 * step, count)
        for i in range(count):
            t = base + (k0 + i) * step
            assert (got[i].item() if got["x"][i] else None) == model.get(t)
            assert store.get(t) == model.get(t)
    assert not store.run(base + 1, 5)["x"].any()  # off the grid: nothing


def reference_base_log(path: PricePath, t_ms: np.ndarray) -> np.ndarray:
    """The path's noise as first written: octave by octave, integer cell arithmetic, instant by instant."""
    t = t_ms.ravel()
    out = np.zeros(t.shape, dtype=np.float64)
    for (step, amp), key in zip(_OCTAVES, path.octave_keys, strict=True):
        i0 = np.floor_divide(t, step)
        frac = (t - i0 * step) / step
        g0, g1 = _gauss(key, i0), _gauss(key, i0 + 1)
        out += amp * (g0 + (g1 - g0) * frac)
    return out.reshape(t_ms.shape)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool((a.view(np.uint64) == b.view(np.uint64)).all())


@settings(max_examples=60, deadline=None)
@given(
    interval=st.sampled_from(list(INTERVAL_MS)),
    count=st.integers(1, 400),
    first=st.integers(-2000, 2000),
    now_in=st.floats(0.0, 1.0),
    reverse=st.booleans(),
)
def test_base_log_of_kline_grids_is_the_reference(
    interval: str, count: int, first: int, now_in: float, reverse: bool
) -> None:
    """A window's samples, a column per kline (ascending, clipped at now, or not ascending at all)."""
    path = PricePath("S0123USDT", 7, START)
    step = INTERVAL_MS[interval]
    starts = START + (first + np.arange(count, dtype=np.int64)) * step
    offsets = np.arange(0, step, 15_000) if step <= 3_600_000 else np.linspace(0, step - 1, 17).astype(np.int64)
    grid = np.vstack([starts[None, :] + offsets[:, None], starts[None, :] + step - 1])
    grid = np.minimum(grid, int(starts[-1]) + int(now_in * step))
    if reverse:
        grid = grid[::-1].copy()  # not ascending: taken instant by instant
    assert _same_bits(path._base_log(grid), reference_base_log(path, grid))
    assert _same_bits(path._base_log(grid.ravel()), reference_base_log(path, grid.ravel()))


@settings(max_examples=150, deadline=None)
@given(
    st.integers(-(2**62), 2**62) | st.sampled_from([START, 2**52, -(2**52), 2**53, 2**53 + 1, 2**60 + 7]),
    st.lists(
        st.integers(-(2**62), 2**62) | st.integers(-(10**6), 10**6) | st.sampled_from([0, 1, -1, 15_000]),
        min_size=1,
        max_size=60,
    ),
    st.booleans(),
)
def test_base_log_of_any_instants_is_the_reference(around: int, offsets: list[int], sort: bool) -> None:
    """Instants near one another or scattered, negative, and past 2⁵² (where floats stop being exact)."""
    instants = [min(max(around + d if abs(d) <= 10**6 else d, -(2**62)), 2**62) for d in offsets]
    path = PricePath("BTCUSDT", 42, START)
    t = np.array(sorted(instants) if sort else instants, dtype=np.int64)
    assert _same_bits(path._base_log(t), reference_base_log(path, t))


async def test_every_klines_request_is_weighed(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    url = f"{simx.url}/api/v3/klines"
    used = []
    for limit in (1, 1000, 500):
        async with http.get(url, params={"symbol": "BTCUSDT", "interval": "1m", "limit": limit}) as r:
            assert r.status == 200 and r.content_type == "application/json"
            assert len(await r.json()) == limit
            used.append(int(r.headers["X-MBX-USED-WEIGHT-1M"]))
    assert used[1] - used[0] == 2 and used[2] - used[1] == 2
    assert simx.exchange.requests["GET /api/v3/klines"] == 3


def test_kline_row_is_the_reference_row() -> None:
    k = Kline(1, 2, 0.5, 0.75, 0.25, 0.5, 1 / 3, 7, True)
    assert kline_row(k) == reference_row(k)
