"""The simulator's klines and kline frames stay byte for byte what they were (issue 41, point 5).

A fixed scenario — several symbols and seeds, every kline interval, windows by limit, startTime
and endTime, trades posted through the control path and fills recorded, clock advances that close
one kline or thousands — is played on a manual clock.  The ``GET /api/v3/klines`` answer bodies
(from the REST handler itself), the trade tape's rows and every stream frame queued by advances
and trades are hashed, and the digests are compared with those recorded in
``data/sim_golden.json`` from the code before the simulator was made fast.  Speed work must not
change one byte a client sees.  Regenerate (only for a deliberate change of what clients see):
``python -m tests.simulator.test_sim_golden --write``.

A property test checks what the caches rely on: a window asked of a market that answered many
other windows before (closed klines cached, the open one held) is the window a fresh market with
the same trades gives.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import rest
from simulator.exchange import SimConfig, SimExchange
from simulator.market import INTERVAL_MS
from simulator.streams import StreamConnection

GOLDEN = Path(__file__).parent / "data" / "sim_golden.json"
SYMBOLS = ("BTCUSDT", "ETHUSDT", "S0001USDT", "S0123USDT", "PEPEUSDT")
INTERVALS = tuple(INTERVAL_MS)
HOUR = 3_600_000


def _exchange(seed: int = 42, symbols: tuple[str, ...] = SYMBOLS) -> SimExchange:
    return SimExchange(SimConfig(seed=seed, symbols=symbols, clock="manual"))


async def _klines_body(ex: SimExchange, **params: Any) -> bytes:
    """The body the REST handler answers for ``GET /api/v3/klines?params``."""
    app = web.Application()
    app[rest.EXCHANGE_KEY] = ex
    request = make_mocked_request("GET", f"/api/v3/klines?{urlencode(params)}", app=app)
    response = await rest.klines(request)
    assert isinstance(response, web.Response) and isinstance(response.body, bytes)
    return response.body


def _windows(now: int) -> Iterator[dict[str, Any]]:
    """Window parameters of GET /api/v3/klines: newest by limit, from startTime, up to endTime, both."""
    yield {}
    yield {"limit": 1000}
    yield {"limit": 1}
    yield {"limit": 37, "endTime": now - 5 * HOUR - 1234}
    yield {"limit": 300, "startTime": now - 30 * HOUR + 17}
    yield {"limit": 1000, "startTime": now - 200 * 86_400_000}
    yield {"startTime": now - 2 * HOUR, "endTime": now - HOUR + 59_999}
    yield {"startTime": now - 1000, "endTime": now}


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return f"{len(parts)}:{h.hexdigest()}"


async def _all_windows(ex: SimExchange, symbols: tuple[str, ...], intervals: tuple[str, ...]) -> str:
    now = ex.now_ms()
    bodies = []
    for sym in symbols:
        for interval in intervals:
            for w in _windows(now):
                bodies.append(await _klines_body(ex, symbol=sym, interval=interval, **w))
    return _digest(bodies)


def _tape_rows(ex: SimExchange, sym: str) -> str:
    """The tape's rows (trades, aggTrades) around the posted trades and fills."""
    tape, now = ex.tapes[sym], ex.now_ms()
    rows = [t.rest_row() for t in tape.recent(now, 1000)]
    rows += [t.agg_row() for t in tape.between(now - 2 * HOUR, now, 500)]
    rows += [t.rest_row() for t in tape.from_id(rows[0]["id"] - 3000, now, 800)]  # type: ignore[operator]
    return _digest([orjson.dumps(rows)])


def _connection(ex: SimExchange, streams: list[str], *, combined: bool) -> StreamConnection:
    conn = StreamConnection(ws=None, transport=None, combined=combined)  # type: ignore[arg-type]
    for name in streams:
        ex.subscribe(conn, name)
    ex.hub.connections.add(conn)
    return conn


def _drain(conn: StreamConnection) -> list[bytes]:
    out = []
    while not conn.queue.empty():
        item = conn.queue.get_nowait()
        assert item is not None
        out.append(item)
    return out


def _by_stream(frames: list[bytes], combined: bool) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for f in frames:
        body = orjson.loads(f)
        name = body["stream"] if combined else f"{body['s'].lower()}@kline_{body['k']['i']}"
        out.setdefault(name, []).append(f)
    return out


def _trades(ex: SimExchange, rounds: int) -> None:
    """Trades through the control path (re-anchoring) and fills (not re-anchoring), at now."""
    for i, sym in enumerate(SYMBOLS[:3]):
        m = ex.markets[sym]
        last = m.last_price(ex.now_ms())
        ex.trade(sym, last * (1.0 + 0.003 * (i + 1) * (-1) ** rounds), 0.5 + i)
        ex.trade(sym, last * 1.0007, 0.25)  # a second trade at the same millisecond
        m.record_fill(ex.now_ms(), last * 0.9991, 0.125, buyer_maker=bool(rounds % 2))


async def scenario() -> dict[str, str]:
    """Every digest of the golden scenario, by case name."""
    out: dict[str, str] = {}
    # --- REST klines: fresh markets, then after trades and fills, cold and warm -----------------
    ex = _exchange()
    out["klines_fresh"] = await _all_windows(ex, SYMBOLS, INTERVALS)
    ex.advance(37.5)
    _trades(ex, 0)
    ex.advance(61)
    _trades(ex, 1)
    ex.advance(5 * 3600 + 17.25)
    _trades(ex, 2)
    ex.advance(1.5)
    out["klines_traded_warm"] = await _all_windows(ex, SYMBOLS, INTERVALS)
    out["klines_traded_warm_again"] = await _all_windows(ex, SYMBOLS[:2], INTERVALS)
    for sym in SYMBOLS[:3]:
        out[f"tape_{sym}"] = _tape_rows(ex, sym)
    other = _exchange(seed=7, symbols=SYMBOLS[1:4])
    other.advance(86_400 * 3 + 0.25)
    out["klines_seed7"] = await _all_windows(other, SYMBOLS[1:4], ("1s", "1m", "15m", "4h", "1w", "1M"))

    # --- frames: one connection (its whole order), then several sharing streams (per stream) ----
    ex = _exchange()
    solo_streams = [f"{s.lower()}@kline_{i}" for s in SYMBOLS for i in ("1m", "5m", "1h")] + ["btcusdt@kline_1s"]
    solo = _connection(ex, solo_streams, combined=True)
    steps: list[tuple[str, float]] = [("advance", 30), ("trade", 0), ("advance", 61), ("advance", 0)]
    steps += [("advance", 3 * 3600 + 0.5), ("trade", 1), ("advance", 59.999), ("advance", 0.001)]
    for i, (what, amount) in enumerate(steps):
        if what == "advance":
            ex.advance(amount)
        else:
            _trades(ex, int(amount))
        out[f"frames_solo_{i}_{what}"] = _digest(_drain(solo))

    ex = _exchange()
    a = _connection(ex, ["btcusdt@kline_1m", "ethusdt@kline_1m", "btcusdt@kline_15m"], combined=True)
    ex.advance(125)
    b = _connection(ex, ["ethusdt@kline_1m", "btcusdt@kline_1m", "s0001usdt@kline_1m"], combined=False)
    c = _connection(ex, ["btcusdt@kline_1m"], combined=True)
    conns = {"a": (a, True), "b": (b, False), "c": (c, True)}
    for i, (what, amount) in enumerate([("advance", 20), ("trade", 0), ("advance", 3600), ("advance", 45)]):
        if what == "advance":
            ex.advance(amount)
        else:
            _trades(ex, int(amount))
        for label, (conn, combined) in conns.items():
            for name, frames in sorted(_by_stream(_drain(conn), combined).items()):
                out[f"frames_shared_{i}_{what}_{label}_{name}"] = _digest(frames)
    return out


async def test_klines_and_frames_are_unchanged() -> None:
    expected = json.loads(GOLDEN.read_text())
    got = await scenario()
    assert sorted(got) == sorted(expected)
    changed = {k: (expected[k], got[k]) for k in expected if got[k] != expected[k]}
    assert not changed, f"{len(changed)} of {len(expected)} cases changed: {sorted(changed)[:10]}"


async def _replay(ops: list[tuple[str, int]], asks: bool) -> tuple[SimExchange, list[bytes]]:
    """Play clock moves and trades; with ``asks`` also ask windows between them (filling the caches)."""
    ex = _exchange(symbols=("BTCUSDT", "S0001USDT"))
    bodies = []
    for what, amount in ops:
        if what == "advance":
            ex.advance(amount / 1000)
        elif what == "trade":
            m = ex.markets["BTCUSDT"]
            ex.trade("BTCUSDT", m.last_price(ex.now_ms()) * (1 + (amount % 41 - 20) / 2000), 0.1 + amount % 7)
        elif what == "fill":
            m = ex.markets["S0001USDT"]
            m.record_fill(
                ex.now_ms(), m.last_price(ex.now_ms()) * (1 + (amount % 13 - 6) / 1000), 1.5, buyer_maker=True
            )
        elif asks:
            interval = INTERVALS[amount % len(INTERVALS)]
            for sym in ("BTCUSDT", "S0001USDT"):
                bodies.append(await _klines_body(ex, symbol=sym, interval=interval, limit=1 + amount % 1000))
    return ex, bodies


_OPS = st.lists(
    st.tuples(st.sampled_from(["advance", "trade", "fill", "ask"]), st.integers(min_value=0, max_value=7_200_000)),
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, interval=st.sampled_from(INTERVALS), limit=st.integers(min_value=1, max_value=1000))
async def test_a_window_does_not_depend_on_what_was_asked_before(
    ops: list[tuple[str, int]], interval: str, limit: int
) -> None:
    warm, _ = await _replay(ops, asks=True)
    cold, _ = await _replay(ops, asks=False)
    for sym in ("BTCUSDT", "S0001USDT"):
        got = await _klines_body(warm, symbol=sym, interval=interval, limit=limit)
        want = await _klines_body(cold, symbol=sym, interval=interval, limit=limit)
        assert got == want
        assert len(orjson.loads(want)) == limit


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.simulator.test_sim_golden --write")
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(asyncio.run(scenario()), indent=0, sort_keys=True) + "\n")
    print(f"written: {GOLDEN}")
