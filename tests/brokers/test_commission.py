"""Commission rates (brokers/commission.py) and the Binance broker's reading of them, against the
documented example of reference/binance/commission_faq.md and against the simulator, which charges
the rates it answers; trade_simulate estimates a Binance leg at the account's rates and the
executed order pays exactly that."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal as D
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.binance.broker import BinanceBroker
from brokers.commission import DEFAULT_RATES, FeeRates, rates_from_account, rates_from_symbol, rates_json, rates_of
from brokers.orders.service import OrderService, SafetyLimits
from brokers.orders.store import MIGRATIONS, OrderStore
from brokers.portfolio_view import Pricer
from brokers.trade_simulation import Leg, ServiceAccount, Simulator, fee_rates
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET, HttpErrorFault, RunningSimulator
from storage import Database

FAQ = {  # reference/binance/commission_faq.md, "How is the commission calculated?"
    "symbol": "BTCUSDT",
    "standardCommission": {"maker": "0.00000010", "taker": "0.00000020", "buyer": "0.00000030", "seller": "0.00000040"},
    "specialCommission": {"maker": "0.01000000", "taker": "0.02000000", "buyer": "0.03000000", "seller": "0.04000000"},
    "taxCommission": {"maker": "0.00000112", "taker": "0.00000114", "buyer": "0.00000118", "seller": "0.00000116"},
    "discount": {"enabledForAccount": True, "enabledForSymbol": True, "discountAsset": "BNB", "discount": "0.25000000"},
}


def test_the_documented_example_costs_what_the_faq_computes() -> None:
    """A MARKET SELL of 0.49975 BTC at 35,000 (taker, seller): the FAQ's standard 0.01049475, tax
    0.04022988 and special 1049.475 USDT, paid without BNB (the discount is not applied)."""
    rates = rates_from_symbol(FAQ)
    notional = D("35000") * D("0.49975")
    faq = D("0.01049475") + D("0.04022988") + D("1049.475")  # each rounded to 8 places there
    assert abs(notional * rates.rate(maker=False, side="SELL") - faq) <= D("0.00000001")
    assert rates.rate(maker=True, side="BUY") == D("0.0000001") + D("0.00000112") + D("0.01") + D("0.0000003") + D(
        "0.00000118"
    ) + D("0.03")
    assert rates.source == "account commission (BNB discount not applied)"


def test_answers_that_are_not_rates_are_refused() -> None:
    for bad in (
        {},
        {"standardCommission": {"maker": "-0.001"}},
        {"standardCommission": {"taker": "NaN"}},
        {"standardCommission": {"maker": "1.5"}},
        {"standardCommission": {"maker": "x"}},
    ):
        with pytest.raises(ValueError):
            rates_from_symbol(bad)
    assert rates_from_account(None) is None
    with pytest.raises(ValueError, match=r"commissionRates\.taker"):
        rates_from_account({"maker": "0.001", "taker": "-1"})


rate = st.decimals(min_value=0, max_value=D("0.09"), places=8)


@given(rate, rate, rate, rate, st.text(min_size=1, max_size=60))
def test_rates_survive_the_mirror_exactly(maker: D, taker: D, buyer: D, seller: D, source: str) -> None:
    rates = FeeRates(maker, taker, source, buyer, seller)
    assert rates_of(rates_json(rates)) == rates


@pytest.fixture
async def broker(sim: RunningSimulator) -> AsyncIterator[BinanceBroker]:
    made = BinanceBroker(api_key=DEFAULT_API_KEY, api_secret=DEFAULT_API_SECRET, rest_url=sim.url)
    await made.sync_time()
    try:
        yield made
    finally:
        await made.close()


async def _set(sim: RunningSimulator, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(f"{sim.url}/sim/v1/commission", json=body) as r:
        return r.status, await r.json()


async def test_the_broker_reads_the_accounts_rates_once_an_hour(sim: RunningSimulator, broker: BinanceBroker) -> None:
    status, answer = await _set(sim, {"maker": "0.0002", "taker": "0.00075"})
    assert status == 200 and answer == {"ok": True, "maker": "0.0002", "taker": "0.00075"}
    assert (await _set(sim, {"maker": "0.2"}))[0] == 400
    assert (await _set(sim, {"fee": "0.001"}))[0] == 400

    rates = await broker.commission_rates("BTCUSDT")
    assert (rates.maker, rates.taker, rates.buyer, rates.seller) == (D("0.0002"), D("0.00075"), 0, 0)
    assert rates.source == "account commission"
    await broker.commission_rates("BTCUSDT")
    assert sim.exchange.requests["GET /api/v3/account/commission"] == 1  # cached
    await broker.balances()
    assert broker.account_rates == FeeRates(D("0.0002"), D("0.00075"), "account commission (account tier)")

    sim.exchange.faults.http_errors.append(
        HttpErrorFault(status=503, retry_after=None, count=5, path="/api/v3/account/commission")
    )
    fallback = await fee_rates(broker, "ETHUSDT")  # rates that cannot be read: the default, and it says why
    assert (fallback.maker, fallback.taker) == (DEFAULT_RATES.maker, DEFAULT_RATES.taker)
    assert fallback.source == "binance default 0.1% (account rates unreadable)"


async def test_a_simulated_leg_costs_what_the_executed_order_pays(sim: RunningSimulator, broker: BinanceBroker) -> None:
    """trade_simulate on a single node with the Binance broker estimates at the account's taker rate;
    the same order sent to the exchange is charged exactly that (the simulator's fill, an oracle
    independent of the estimate)."""
    await _set(sim, {"maker": "0.0001", "taker": "0.0006"})
    db = await Database.open(":memory:")
    try:
        await db.migrate([MIGRATIONS])
        service = OrderService(broker, OrderStore(db), limits=SafetyLimits(None, None))
        simulator = Simulator(ServiceAccount(service), Pricer(broker, None, None), None, rf_annual=0.0, days=30)
        out = await simulator.run([Leg("BTCUSDT", "BUY", D("0.01")), Leg("BTCUSDT", "BUY", D("0.01"), D("60000"))])
        market, resting = out.legs
        assert (market.liquidity, market.fee_rate, market.fee_source) == ("taker", 0.0006, "account commission")
        assert (resting.liquidity, resting.fee_rate) == ("maker", 0.0001)
        placed = await service.place_order({"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.01})
        order = next(o for o in sim.exchange.account.orders.values() if o.client_order_id == placed["order_id"])
        [fill] = order.fills
        assert fill["commissionAsset"] == "BTC" and D(fill["commission"]) == D("0.01") * D("0.0006")
        assert D(fill["commission"]) / D(fill["qty"]) == D(str(market.fee_rate))  # the rate estimated is charged
        assert market.fees == pytest.approx(0.01 * 0.0006 * market.price, rel=1e-12)
    finally:
        await db.close()
