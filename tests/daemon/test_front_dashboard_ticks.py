"""A cluster front's dashboard prices (daemon/front/dashboard.py ``FrontPages.on_tick``): a worker's
tick on NATS reaches each open page once per followed interval of its symbol, with that interval's
bar time; an older tick (a hand-over's late one) reaches nobody (cluster/bus_prices.py)."""

from __future__ import annotations

from typing import Any

from cluster import BusPrices, TickMessage
from daemon.front.dashboard import FrontPages
from engine import Tick


def test_a_tick_goes_to_each_open_page_on_every_followed_interval_of_its_symbol() -> None:
    prices = BusPrices(bus=None)  # type: ignore[arg-type]  # fed by hand below, never subscribed
    pages = FrontPages(None, None, None, configured=["BTCUSDT 1m", "BTCUSDT 5m", "ETHUSDT 1m"], prices=prices)  # type: ignore[arg-type]
    seen: list[Tick] = []
    prices._deliver("chartgen.market.tick.BTCUSDT", b'{"symbol":"BTCUSDT","price":65000.5,"time_ms":1000000}')
    assert seen == []  # no page open: nothing to tell
    pages.ticks.append(seen.append)
    at_ms = 1_795_774_493_043  # 2026-11-27, 10:14:53 UTC
    tick = TickMessage(symbol="BTCUSDT", price=65001.25, time_ms=at_ms, worker="w1")
    prices._deliver("chartgen.market.tick.BTCUSDT", tick.model_dump_json().encode())
    assert seen == [
        Tick("BTCUSDT", "1m", 65001.25, at_ms, at_ms // 60_000 * 60),
        Tick("BTCUSDT", "5m", 65001.25, at_ms, at_ms // 300_000 * 300),
    ]
    older: dict[str, Any] = {"symbol": "BTCUSDT", "price": 1.0, "time_ms": at_ms - 1}
    prices._deliver("chartgen.market.tick.BTCUSDT", TickMessage(**older).model_dump_json().encode())
    assert len(seen) == 2 and prices.last_price("BTCUSDT") == 65001.25
    pages.ticks.remove(seen.append)
