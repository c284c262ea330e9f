"""Test support for the simulator's matching tests: an exchange with a deep account, orders and a report log.

The tests drive :class:`~simulator.exchange.SimExchange` in process (manual clock, no
server), so every example is deterministic and fast.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from simulator.accounts import SimOrder
from simulator.exchange import SimConfig, SimExchange

SYMBOL = "BTCUSDT"
TICK = Decimal("0.01")
STEP = Decimal("0.00001")


@dataclass
class Reports:
    """Every ``executionReport`` the account sent, in order, and per order."""

    all: list[dict[str, Any]] = field(default_factory=list)
    lists: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, event: dict[str, Any]) -> None:
        if event["e"] == "executionReport":
            self.all.append(event)
        elif event["e"] == "listStatus":
            self.lists.append(event)

    def of(self, order: SimOrder) -> list[dict[str, Any]]:
        return [r for r in self.all if r["i"] == order.order_id]

    def kinds(self, order: SimOrder) -> list[str]:
        return [r["x"] for r in self.of(order)]

    def traded_by_order(self) -> dict[int, Decimal]:
        out: dict[int, Decimal] = defaultdict(Decimal)
        for r in self.all:
            if r["x"] == "TRADE":
                out[r["i"]] += Decimal(r["l"])
        return out


def exchange(usdt: str = "1000000000", btc: str = "10000", seed: int = 42) -> tuple[SimExchange, Reports]:
    ex = SimExchange(SimConfig(seed=seed, balances={"USDT": Decimal(usdt), "BTC": Decimal(btc)}))
    reports = Reports()
    ex.account.listeners.append(reports)
    return ex, reports


def last(ex: SimExchange, symbol: str = SYMBOL) -> Decimal:
    return Decimal(f"{ex.markets[symbol].last_price(ex.now_ms()):.8f}").quantize(TICK)


def place(
    ex: SimExchange,
    side: str,
    otype: str = "MARKET",
    qty: str | Decimal | None = None,
    *,
    price: str | Decimal | None = None,
    quote: str | Decimal | None = None,
    tif: str | None = None,
    client_id: str | None = None,
    stp: str | None = None,
) -> SimOrder:
    """``POST /api/v3/order`` on the account, as order_rest.py calls it."""
    return ex.account.place(
        symbol=SYMBOL,
        side=side,
        otype=otype,
        qty=None if qty is None else Decimal(qty),
        quote_qty=None if quote is None else Decimal(quote),
        price=None if price is None else Decimal(price),
        tif=tif,
        client_id=client_id or f"t-{len(ex.account.orders) + 1}",
        last=last(ex),
        tick=TICK,
        step=STEP,
        now=ex.now_ms(),
        stp=stp,
    )


def book_total(levels: list[tuple[Decimal, Decimal]]) -> Decimal:
    return sum((q for _, q in levels), Decimal(0))
