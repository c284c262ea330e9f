"""The simulator's REST side speaks Binance: klines semantics, errors, weights and injected 429s."""

from __future__ import annotations

import itertools

import aiohttp

from simulator.app import RunningSimulator, start_simulator
from tests.simulator.conftest import get_json, post_json

H = 3_600_000


async def test_klines_rows_have_binance_shape_and_the_last_one_is_open(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """Twelve elements, strings for prices, oldest first, the newest still forming."""
    status, headers, rows = await get_json(http, f"{simx.url}/api/v3/klines", symbol="BTCUSDT", interval="1h")
    assert status == 200 and len(rows) == 500
    assert int(headers["X-MBX-USED-WEIGHT-1M"]) >= 2
    assert all(len(r) == 12 and isinstance(r[1], str) and isinstance(r[5], str) for r in rows)
    opens = [r[0] for r in rows]
    assert opens == sorted(opens) and all(b - a == H for a, b in itertools.pairwise(opens))
    now = simx.exchange.now_ms()
    assert rows[-1][0] <= now <= rows[-1][6]
    assert rows[-2][6] < now


async def test_start_time_returns_oldest_first_and_end_time_bounds_the_newest(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """startTime pages forward from its first whole kline; endTime alone gives the newest before it."""
    now = simx.exchange.now_ms()
    start = now - 10 * H + 5
    _, _, fwd = await get_json(
        http, f"{simx.url}/api/v3/klines", symbol="BTCUSDT", interval="1h", startTime=start, limit=3
    )
    assert [r[0] for r in fwd] == [now - 9 * H, now - 8 * H, now - 7 * H]
    _, _, back = await get_json(
        http, f"{simx.url}/api/v3/klines", symbol="BTCUSDT", interval="1h", endTime=now - 5 * H, limit=2
    )
    assert [r[0] for r in back] == [now - 6 * H, now - 5 * H]


async def test_history_is_deterministic_for_a_seed() -> None:
    """Two simulators with the same seed serve identical klines; another seed differs."""
    rows = []
    for seed in (7, 7, 8):
        async with await start_simulator(seed=seed) as sim, aiohttp.ClientSession() as http:
            rows.append((await get_json(http, f"{sim.url}/api/v3/klines", symbol="ETHUSDT", interval="15m"))[2])
    assert rows[0] == rows[1] and rows[0] != rows[2]


async def test_errors_use_binance_codes(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """Unknown symbol -1121, bad interval -1120, missing symbol -1102."""
    url = f"{simx.url}/api/v3/klines"
    assert (await get_json(http, url, symbol="NOPEUSDT", interval="1h"))[2]["code"] == -1121
    assert (await get_json(http, url, symbol="BTCUSDT", interval="7m"))[2]["code"] == -1120
    status, _, body = await get_json(http, url, interval="1h")
    assert status == 400 and body["code"] == -1102


async def test_exchange_info_has_real_filters(simx: RunningSimulator, http: aiohttp.ClientSession) -> None:
    """Each symbol carries PRICE_FILTER, LOT_SIZE and NOTIONAL; a single symbol can be asked for."""
    _, _, info = await get_json(http, f"{simx.url}/api/v3/exchangeInfo", symbol="BTCUSDT")
    (sym,) = info["symbols"]
    kinds = {f["filterType"]: f for f in sym["filters"]}
    assert {"PRICE_FILTER", "LOT_SIZE", "NOTIONAL", "MARKET_LOT_SIZE", "MAX_NUM_ORDERS"} <= set(kinds)
    assert kinds["PRICE_FILTER"]["tickSize"] == "0.01000000"
    assert sym["baseAsset"] == "BTC" and sym["quoteAsset"] == "USDT"


async def test_injected_429_answers_with_retry_after_then_recovers(
    simx: RunningSimulator, http: aiohttp.ClientSession
) -> None:
    """http_error count=2 fails exactly two requests with Retry-After, the third succeeds."""
    await post_json(http, f"{simx.url}/sim/v1/faults", {"http_error": {"status": 429, "retry_after": 3, "count": 2}})
    url = f"{simx.url}/api/v3/klines"
    for _ in range(2):
        async with http.get(url, params={"symbol": "BTCUSDT", "interval": "1m"}) as r:
            assert r.status == 429 and r.headers["Retry-After"] == "3"
            assert (await r.json())["code"] == -1003
    status, _, _ = await get_json(http, url, symbol="BTCUSDT", interval="1m")
    assert status == 200


async def test_weight_limit_is_enforced_with_429(http: aiohttp.ClientSession) -> None:
    """Past the per-minute weight limit the answer is 429 with Retry-After."""
    async with await start_simulator(weight_limit=10) as sim:
        statuses = []
        for _ in range(7):
            async with http.get(f"{sim.url}/api/v3/klines", params={"symbol": "BTCUSDT", "interval": "1m"}) as r:
                statuses.append(r.status)
                if r.status == 429:
                    assert int(r.headers["Retry-After"]) >= 1
        assert statuses[:5] == [200] * 5 and statuses[5:] == [429, 429]


async def test_third_party_clients_read_klines_and_exchange_info(simx: RunningSimulator) -> None:
    """python-binance's AsyncClient and ccxt's binance class, pointed at the simulator, work unchanged."""
    import ccxt.async_support as ccxt
    from binance import AsyncClient

    client = AsyncClient(api_key="k", api_secret="s")
    client.API_URL = f"{simx.url}/api"
    try:
        klines = await client.get_klines(symbol="BTCUSDT", interval="1h", limit=5)
        info = await client.get_exchange_info()
    finally:
        await client.close_connection()
    assert len(klines) == 5 and len(info["symbols"]) == 4

    ex = ccxt.binance({"options": {"fetchMarkets": {"types": ["spot"]}, "fetchCurrencies": False}})
    ex.urls["api"] = {**ex.urls["api"], "public": f"{simx.url}/api/v3", "private": f"{simx.url}/api/v3"}
    try:
        markets = await ex.load_markets()
        ohlcv = await ex.fetch_ohlcv("BTC/USDT", "1h", limit=5)
    finally:
        await ex.close()
    assert "BTC/USDT" in markets and len(ohlcv) == 5
    assert ohlcv[-1][0] == klines[-1][0]
