"""brokers.trade_simulation in process: legs checked by the guard's dry run (nothing recorded, nothing sent),
fills and fees on a copy of the account, refusals with the seed's codes, risk from daily closes."""

from __future__ import annotations

from decimal import Decimal as D
from typing import Any

import numpy as np
import pytest

from brokers.commission import BINANCE_DEFAULT_FEE
from brokers.halt import HaltStore
from brokers.halt_authority import HaltAuthority
from brokers.models import Actor, Balance
from brokers.orders.guard import SafetyLimits
from brokers.orders.service import OrderService
from brokers.orders.store import OrderStore
from brokers.portfolio_view import Pricer
from brokers.risk_metrics import risk_metrics, value_series
from brokers.trade_simulation import Leg, ServiceAccount, Simulator
from engine import Bars
from storage import Database
from tests.brokers.test_order_service import Clock, FakeBroker

PRICE = D(65000)


class Account(FakeBroker):
    """FakeBroker with balances (10,000 USDT and 0.1 BTC)."""

    def __init__(self, fee_rate: D | None = None) -> None:
        super().__init__()
        if fee_rate is not None:
            self.fee_rate = fee_rate
        self.held = [Balance("USDT", D(10000), D(0)), Balance("BTC", D("0.1"), D(0))]

    async def balances(self) -> list[Balance]:
        return list(self.held)


class Daily:
    """MarketData.fetch for daily bars: BTCUSDT closes from 60000 up by 100 a day, with a dip."""

    def __init__(self, n: int = 31) -> None:
        closes = 60000.0 + 100.0 * np.arange(n)
        closes[n // 2] -= 3000.0
        self.closes = closes
        self.calls: list[tuple[str, str, int]] = []

    async def fetch(self, symbol: str, interval: str, bars: int) -> Bars:
        self.calls.append((symbol, interval, bars))
        c = self.closes[-bars:]
        return Bars(c, c, c, c, np.zeros(len(c)), np.arange(len(c), dtype=np.int64) * 86400)


def _sim(db: Database, broker: Account, limits: SafetyLimits | None = None, market: Any = None) -> Simulator:
    service = OrderService(broker, OrderStore(db), limits=limits or SafetyLimits(), clock=Clock())
    return Simulator(ServiceAccount(service), Pricer(service.broker, None, None), market, rf_annual=0.0, days=30)


async def _nothing_recorded(db: Database) -> None:
    assert await OrderStore(db).orders("fake", actor=Actor(None, admin=True)) == []


async def test_a_market_buy_fills_at_the_reference_price_with_binances_default_fee(order_db: Database) -> None:
    broker = Account()
    out = await _sim(order_db, broker).run([Leg("BTCUSDT", "BUY", D("0.01"))])
    leg = out.legs[0]
    assert leg.status == "filled" and leg.price == 65000.0 and leg.liquidity == "taker"
    assert leg.fee_rate == float(BINANCE_DEFAULT_FEE) and leg.fee_source == "binance default 0.1%"
    assert leg.fees == pytest.approx(0.65) and leg.total_cost == pytest.approx(650.65)
    after = out.after
    assert after.cash == pytest.approx(10000 - 650)
    assert after.positions[0].quantity == pytest.approx(0.1 + 0.01 * 0.999)
    assert after.total_value == pytest.approx(9350 + (0.1 + 0.00999) * 65000)
    assert broker.placed == [] and out.before.total_value == pytest.approx(10000 + 6500)
    await _nothing_recorded(order_db)


async def test_a_sell_pays_its_fee_in_the_quote_asset_and_the_paper_rate_applies(order_db: Database) -> None:
    out = await _sim(order_db, Account(fee_rate=D("0.002"))).run([Leg("BTCUSDT", "SELL", D("0.05"))])
    leg = out.legs[0]
    assert leg.fee_source == "paper_fee_rate" and leg.fees == pytest.approx(3250 * 0.002)
    assert leg.total_cost == pytest.approx(-(3250 - 6.5))
    assert out.after.cash == pytest.approx(10000 + 3250 - 6.5)
    assert out.after.positions[0].quantity == pytest.approx(0.05)


async def test_a_resting_limit_fills_at_its_price_as_maker(order_db: Database) -> None:
    out = await _sim(order_db, Account()).run([Leg("BTCUSDT", "BUY", D("0.01"), D("60000"))])
    assert out.legs[0].price == 60000.0 and out.legs[0].liquidity == "maker"
    assert out.after.cash == pytest.approx(10000 - 600)


async def test_operator_limits_refuse_a_leg_with_risk_limit_exceeded(order_db: Database) -> None:
    limits = SafetyLimits(max_order_notional=D(1000), max_daily_notional=D(1500))
    legs = [Leg("BTCUSDT", "BUY", D("0.02")), Leg("BTCUSDT", "BUY", D("0.01")), Leg("BTCUSDT", "BUY", D("0.01"))]
    out = await _sim(order_db, Account(), limits).run(legs)
    first, second, third = out.legs
    assert first.status == "refused" and first.code == "RISK_LIMIT_EXCEEDED"
    assert "per-order limit 1000" in (first.message or "")
    assert second.status == "filled"  # 650: fits both limits
    # the earlier accepted leg of this simulation counts: 650 + 650 = 1300 fits under 1500; a third would not
    assert third.status == "filled"
    out = await _sim(order_db, Account(), limits).run([*legs[1:], Leg("BTCUSDT", "BUY", D("0.01"))])
    assert [r.status for r in out.legs] == ["filled", "filled", "refused"]
    assert out.legs[2].code == "RISK_LIMIT_EXCEEDED" and "daily limit 1500" in (out.legs[2].message or "")
    assert out.after.cash == pytest.approx(10000 - 1300)  # the refused leg changed nothing
    await _nothing_recorded(order_db)


async def test_allowed_symbols_are_an_operator_limit(order_db: Database) -> None:
    limits = SafetyLimits(allowed_symbols=frozenset({"ETHUSDT"}))
    out = await _sim(order_db, Account(), limits).run([Leg("BTCUSDT", "BUY", D("0.01"))])
    assert out.legs[0].code == "RISK_LIMIT_EXCEEDED"


async def test_filters_funds_and_unknown_pairs_are_refused_with_their_codes(order_db: Database) -> None:
    legs = [
        Leg("BTCUSDT", "BUY", D("0.000015")),  # LOT_SIZE step 0.00001
        Leg("BTCUSDT", "BUY", D("0.00001")),  # 0.65 USDT < MIN_NOTIONAL 5
        Leg("BTCUSDT", "SELL", D("0.2")),  # holds 0.1
        Leg("BTCUSDT", "BUY", D("0.2")),  # 13,000 USDT > 10,000
        Leg("NOPEUSDT", "BUY", D("1")),
    ]
    no_limits = SafetyLimits(max_order_notional=None, max_daily_notional=None)
    out = await _sim(order_db, Account(), no_limits).run(legs)
    codes = [r.code for r in out.legs]
    assert codes == [
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
        "INSUFFICIENT_FUNDS",
        "INSUFFICIENT_FUNDS",
        "INVALID_SYMBOL",
    ]
    assert "insufficient BTC" in (out.legs[2].message or "") and "insufficient USDT" in (out.legs[3].message or "")
    assert "LOT_SIZE" in (out.legs[0].message or "") and "minimum notional" in (out.legs[1].message or "")
    assert out.after.total_value == out.before.total_value


async def test_a_leg_without_a_price_is_refused_fail_closed(order_db: Database) -> None:
    broker = Account()

    async def no_price(symbol: str) -> D | None:
        return None

    broker.last_price = no_price  # type: ignore[method-assign]
    out = await _sim(order_db, broker).run([Leg("BTCUSDT", "BUY", D("0.01"))])
    assert out.legs[0].status == "refused" and out.legs[0].code == "NETWORK_ERROR"
    assert "no price for BTCUSDT" in (out.legs[0].message or "")


async def test_risk_metrics_come_from_the_daily_closes_of_the_portfolio_after(order_db: Database) -> None:
    market = Daily()
    out = await _sim(order_db, Account(), market=market).run([Leg("BTCUSDT", "BUY", D("0.01"))])
    assert market.calls == [("BTCUSDT", "1d", 31)]
    qty = 0.1 + 0.01 * 0.999
    expected = risk_metrics(value_series(np.array([qty]), market.closes[None, :], 10000 - 650.0), 0.0)
    assert out.risk == expected and out.risk.var_95_1d is not None and out.risk.max_drawdown > 0
    assert any(r.startswith("binance:GET /api/v3/klines?symbol=BTCUSDT&interval=1d&limit=31@") for r in out.refs)


async def test_a_halt_refuses_every_leg_as_a_risk_limit(db: Database) -> None:
    await HaltStore(db).halt(reason="test", by=HaltAuthority.operator("cli"), now=1.0)
    out = await _sim(db, Account()).run([Leg("BTCUSDT", "BUY", D("0.01"))])
    assert out.legs[0].code == "RISK_LIMIT_EXCEEDED" and "halted" in (out.legs[0].message or "")
