"""The TTL cache shares concurrent fetches; the rate gate waits out bans or fails fast."""

from __future__ import annotations

import asyncio

import pytest

from engine.market_data.errors import RateLimited
from engine.market_data.rate_gate import RateGate
from engine.market_data.source import detect_source
from engine.market_data.ttl_cache import TtlCache


async def test_concurrent_identical_fetches_share_one_request() -> None:
    """Ten callers asking at once cause one fetch; a later caller within the TTL gets the cached value."""
    calls = 0
    release = asyncio.Event()

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return 42

    cache: TtlCache[int] = TtlCache(ttl_s=60)
    tasks = [asyncio.create_task(cache.get_or_fetch("k", fetch)) for _ in range(10)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*tasks) == [42] * 10
    assert await cache.get_or_fetch("k", fetch) == 42
    assert calls == 1


async def test_failures_are_not_cached() -> None:
    """A failed fetch raises to every waiter and the next call fetches again."""
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ValueError("boom")
        return "ok"

    cache: TtlCache[str] = TtlCache(ttl_s=60)
    with pytest.raises(ValueError):
        await cache.get_or_fetch("k", flaky)
    assert await cache.get_or_fetch("k", flaky) == "ok"


async def test_a_ban_longer_than_the_caller_can_wait_fails_fast_with_retry_after() -> None:
    """After a 429 with Retry-After 120, a caller allowed to wait 5 s gets RateLimited at once."""
    gate = RateGate()
    assert gate.observe(429, {"Retry-After": "120", "X-MBX-USED-WEIGHT-1M": "6001"}) == 120
    with pytest.raises(RateLimited) as info:
        await gate.acquire(2, max_wait_s=5)
    assert 100 < info.value.retry_after_s <= 120


def test_weight_header_is_tracked() -> None:
    """The used weight follows X-MBX-USED-WEIGHT-1M."""
    gate = RateGate()
    gate.observe(200, {"X-MBX-USED-WEIGHT-1M": "321"})
    assert gate.used_weight == 321


@pytest.mark.parametrize(
    ("symbol", "source"),
    [("BTCUSDT", "binance"), ("ethbtc", "binance"), ("USDT", "yahoo"), ("AAPL", "yahoo"), ("^GSPC", "yahoo")],
)
def test_source_detection_follows_the_crypto_quote_rule(symbol: str, source: str) -> None:
    """Crypto pairs go to Binance, everything else to Yahoo."""
    assert detect_source(symbol) == source


async def test_a_wall_clock_step_back_never_makes_the_weight_wait_longer_than_a_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The budget is per exchange minute (wall clock); an NTP step of an hour back between
    reading the minute and computing the wait must not turn into an hour's wait."""
    import engine.market_data.rate_gate as rate_gate

    now = [1_800_000_000.0]
    monkeypatch.setattr(rate_gate.time, "time", lambda: now[0])
    gate = RateGate(weight_limit=100, budget_fraction=1.0)
    await gate.acquire(100, max_wait_s=0)
    calls = iter([now[0], now[0] - 3600.0])  # the minute is read, then the clock steps back an hour
    monkeypatch.setattr(rate_gate.time, "time", lambda: next(calls, now[0] - 3600.0))
    with pytest.raises(RateLimited) as refused:
        await gate.acquire(1, max_wait_s=0)
    assert refused.value.retry_after_s <= 60.05
