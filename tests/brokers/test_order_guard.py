"""The order guard fails closed: no price → refused, limits valued at the worse of limit and market
price, the daily limit and the intent insert serialized, the engine's price before the ticker."""

from __future__ import annotations

import asyncio
from decimal import Decimal as D
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokers.binance.broker import BinanceBroker
from brokers.models import Actor, BrokerError, ExchangeOrder, OrderRequest
from brokers.orders.args import OrderInputError
from brokers.orders.guard import OrderGuard, OrderRefused, SafetyLimits
from brokers.orders.service import OrderService
from brokers.orders.store import MIGRATIONS, OrderStore
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, RunningSimulator
from storage import Database
from tests.brokers.test_order_service import Clock, FakeBroker

ADMIN = Actor(None, admin=True)
MARKET = D(65000)


class PricedBroker(FakeBroker):
    """FakeBroker whose ticker can fail or give nothing, counting its ticker requests; limit orders rest
    and can be cancelled."""

    def __init__(self, ticker: D | Exception | None = MARKET) -> None:
        super().__init__()
        self.ticker = ticker
        self.ticker_requests = 0
        self.cancelled: list[str] = []

    async def last_price(self, symbol: str) -> D | None:
        self.ticker_requests += 1
        if isinstance(self.ticker, Exception):
            raise self.ticker
        return self.ticker

    async def place(self, req: OrderRequest) -> ExchangeOrder:
        if req.type == "MARKET":
            return await super().place(req)
        self.placed.append(req.client_order_id)
        qty = req.quantity or D(0)
        order = ExchangeOrder(req.symbol, req.client_order_id, "NEW", req.side, req.type, qty, D(0), D(0), req.price)
        self.orders[req.client_order_id] = order
        return order

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        o = self.orders[client_order_id]
        self.cancelled.append(client_order_id)
        cancelled = ExchangeOrder(o.symbol, o.client_order_id, "CANCELED", o.side, o.type, o.orig_qty, D(0), D(0))
        self.orders[client_order_id] = cancelled
        return cancelled


def make_service(
    db: Database, broker: FakeBroker, limits: SafetyLimits, engine: D | None = None, *, with_engine: bool = False
) -> OrderService:
    return OrderService(
        broker,
        OrderStore(db),
        limits=limits,
        engine_price=(lambda symbol: engine) if with_engine or engine is not None else None,
        clock=Clock(),
    )


# --- no price: refused, nothing recorded, nothing sent -------------------------------------------


async def _sim_post(url: str, body: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as r:
        assert r.status == 200, await r.text()


async def _sim_state(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/sim/v1/state") as r:
        state: dict[str, Any] = await r.json()
        return state


async def test_a_market_order_whose_price_cannot_be_had_is_refused_and_never_reaches_the_exchange(
    sim: RunningSimulator, order_db: Database
) -> None:
    """One failed ticker request and no engine price: refused naming reason and fix; no POST /api/v3/order.

    Before the guard: notional 0, limits skipped, and the order filled.
    """
    broker = BinanceBroker(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim.url)
    try:
        await broker.sync_time()
        svc = OrderService(broker, OrderStore(order_db), limits=SafetyLimits(), engine_price=lambda symbol: None)
        fault = {"http_error": {"status": 500, "count": 1, "path": "/api/v3/ticker/price"}}
        await _sim_post(f"{sim.url}/sim/v1/faults", fault)
        with pytest.raises(OrderRefused) as info:
            await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.01}, "tok_a")
        text = str(info.value)
        assert text.startswith("order refused: no price for BTCUSDT (the engine has no live trade for it yet")
        assert "the ticker request failed: " in text and text.endswith("retry when market data is back")
        requests = (await _sim_state(sim.url))["requests"]
        assert requests.get("GET /api/v3/ticker/price") == 1
        assert "POST /api/v3/order" not in requests
        assert await svc.get_orders("all", actor=ADMIN) == []  # no intent was recorded either
    finally:
        await broker.close()


@pytest.mark.parametrize("otype", ["limit", "limit_maker"])
async def test_a_limit_order_is_refused_when_the_market_price_is_unknown(order_db: Database, otype: str) -> None:
    """Limit orders are valued against the market too, so without a market price they fail closed."""
    broker = PricedBroker(ticker=BrokerError("cannot reach Binance: timeout"))
    svc = make_service(order_db, broker, SafetyLimits(), with_engine=True)
    order = {"symbol": "BTCUSDT", "side": "buy", "type": otype, "quantity": 0.01, "price": 60000}
    with pytest.raises(OrderRefused, match=r"no price for BTCUSDT .*ticker request failed: cannot reach Binance"):
        await svc.place_order(order, "tok_a")
    for nothing in (None, D("NaN"), D(0)):  # a ticker that answers without a usable price refuses as well
        broker.ticker = nothing
        with pytest.raises(OrderRefused, match=r"the ticker gave no price"):
            await svc.place_order(order, "tok_a")
    assert broker.placed == []


# --- limit orders valued at the worse of limit and market ----------------------------------------


async def test_a_limit_buy_far_above_the_market_is_valued_at_its_limit_price(order_db: Database) -> None:
    """0.02 BTC @ 600,000 with the market at 65,000: 12,000 (not 1,300) > the 10,000 per-order limit."""
    broker = PricedBroker()
    svc = make_service(order_db, broker, SafetyLimits(max_order_notional=D(10000), max_daily_notional=None))
    order = {"symbol": "BTCUSDT", "side": "buy", "type": "limit", "quantity": 0.02, "price": 600_000}
    with pytest.raises(OrderRefused, match=r"order value 12000 exceeds the per-order limit 10000") as info:
        await svc.place_order(order, "tok_a")
    assert "valued at its limit price 600000" in str(info.value)
    assert "trading_max_order_notional" in str(info.value)
    assert broker.placed == []


@pytest.mark.parametrize("otype", ["limit", "limit_maker"])
async def test_a_limit_sell_far_below_the_market_is_valued_at_the_market_price(order_db: Database, otype: str) -> None:
    """Selling 0.5 BTC at 100 would fill near 65,000: valued 32,500, not 50 — refused by the per-order limit.

    Before the guard it was valued at its limit price (50) and sent.
    """
    broker = PricedBroker()
    svc = make_service(order_db, broker, SafetyLimits(max_order_notional=D(10000), max_daily_notional=None))
    with pytest.raises(OrderRefused, match=r"order value 32500 exceeds the per-order limit 10000") as info:
        await svc.place_order(
            {"symbol": "BTCUSDT", "side": "sell", "type": otype, "quantity": 0.5, "price": 100}, "tok_a"
        )
    assert "valued at the market price 65000 (ticker)" in str(info.value)
    assert broker.placed == []


prices = st.decimals(min_value=D(1), max_value=D(200000), places=2)
quantities = st.integers(min_value=1, max_value=100_000).map(lambda n: D(n) / D(100000))  # LOT_SIZE step 0.00001


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    side=st.sampled_from(["BUY", "SELL"]),
    otype=st.sampled_from(["MARKET", "LIMIT", "LIMIT_MAKER"]),
    qty=quantities,
    limit=prices,
    market=prices,
    cap=st.integers(min_value=10, max_value=50_000).map(D),
)
async def test_an_order_passes_the_per_order_limit_exactly_when_its_worst_value_fits(
    side: str, otype: str, qty: D, limit: D, market: D, cap: D
) -> None:
    """Admitted iff quantity × (market price, or the larger of limit and market for a limit order) ≤ the cap."""
    db = await Database.open(":memory:")
    try:
        await db.migrate([MIGRATIONS])
        guard = OrderGuard(
            OrderStore(db),
            "fake",
            rules=FakeBroker().rules,
            ticker=PricedBroker(ticker=market).last_price,
            limits=SafetyLimits(max_order_notional=cap, max_daily_notional=None),
        )
        price = None if otype == "MARKET" else limit
        req = OrderRequest("BTCUSDT", side, otype, "p-1", quantity=qty, price=price, owner="tok_a")  # type: ignore[arg-type]
        worst = qty * (market if price is None else max(price, market))
        below_minimum = qty * (price if price is not None else market) < 5  # the exchange's own NOTIONAL filter
        try:
            admitted = await guard.admit(req)
        except OrderRefused as exc:
            assert not below_minimum and worst > cap and "per-order limit" in str(exc), exc
        except OrderInputError as exc:  # the exchange filters come first
            assert below_minimum and "minimum notional" in str(exc), exc
        else:
            assert worst <= cap and admitted.notional == worst
    finally:
        await db.close()


# --- the daily limit and the intent insert are one step ------------------------------------------


@pytest.mark.parametrize("otype", ["market", "limit"])
async def test_six_concurrent_orders_cannot_all_pass_a_daily_limit_only_one_fits_under(
    order_db: Database, otype: str
) -> None:
    """6 × 6,500 against a 10,000 daily limit, all at once: exactly one is accepted and sent.

    Market orders fill at once; limit orders rest, and their admitted value counts while they are open.
    """
    broker = PricedBroker()
    svc = make_service(order_db, broker, SafetyLimits(max_order_notional=None, max_daily_notional=D(10000)))
    order: dict[str, Any] = {"symbol": "BTCUSDT", "side": "buy", "type": otype, "quantity": 0.1}
    if otype == "limit":
        order["price"] = 64000  # valued at the market price 65,000 (the larger)
    results = await asyncio.gather(
        *(svc.place_order({**order, "client_order_id": f"c-{i}"}, "tok_a") for i in range(6)), return_exceptions=True
    )
    accepted = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, OrderRefused)]
    assert len(accepted) == 1 and len(refused) == 5, results
    assert all("over the daily limit 10000" in str(r) for r in refused)
    assert len(broker.placed) == 1
    assert len(await svc.get_orders("all", actor=ADMIN)) == 1


async def test_an_order_that_has_not_filled_yet_counts_against_the_daily_limit(order_db: Database) -> None:
    """A recorded market intent (no fills, no price of its own) holds its admitted value until it is settled."""
    broker = PricedBroker()
    svc = make_service(order_db, broker, SafetyLimits(max_order_notional=None, max_daily_notional=D(10000)))
    req = OrderRequest("BTCUSDT", "BUY", "MARKET", "pending-1", quantity=D("0.1"), owner="tok_a")
    await svc.store.record_intent("fake", req, Clock()(), notional=D(6500))
    with pytest.raises(OrderRefused, match="would take today's traded value to 13000"):
        await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.1}, "tok_b")
    assert broker.placed == []


# --- reference price: the engine first -----------------------------------------------------------


async def test_the_engine_price_comes_first_and_the_ticker_is_not_asked(order_db: Database) -> None:
    """With the engine's live trade, orders make no ticker request; without it, one each."""
    broker = PricedBroker(ticker=D(1))  # a ticker this far off would refuse nothing here; it must not be used
    engine: dict[str, D] = {"BTCUSDT": MARKET}
    svc = OrderService(
        broker, OrderStore(order_db), limits=SafetyLimits(max_order_notional=D(1000)), engine_price=engine.get
    )
    for i in range(3):
        await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.01, "client_order_id": f"e-{i}"})
    assert broker.ticker_requests == 0
    with pytest.raises(OrderRefused, match=r"valued at the market price 65000 \(engine\)"):
        await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.1})
    engine["BTCUSDT"] = D("NaN")  # not a usable price: the ticker is asked instead
    broker.ticker = MARKET
    await svc.place_order({"symbol": "BTCUSDT", "side": "buy", "quantity": 0.01})
    assert broker.ticker_requests == 1


def test_the_engine_offers_a_price_only_while_a_stream_of_the_symbol_is_live() -> None:
    """A price kept from a dropped stream is not offered (the guard asks the ticker instead); other symbols: None."""
    from types import SimpleNamespace

    from daemon import EngineQuotes

    window = SimpleNamespace(live_since=100.0)
    engine = SimpleNamespace(
        sync=SimpleNamespace(windows={("BTCUSDT", "1m"): window}),
        last_price={"BTCUSDT": 65000.5, "ETHUSDT": 3000.0}.get,
    )
    quotes = EngineQuotes(engine, directory=None, interval="1m")  # type: ignore[arg-type]
    assert quotes.live_price("btcusdt") == D("65000.5")
    assert quotes.live_price("ETHUSDT") is None  # a price, but no followed stream of it
    window.live_since = None  # the stream dropped
    assert quotes.live_price("BTCUSDT") is None
