"""trade_simulate and trade_execute at a cluster front: the account as the order leader mirrors it,
the leader's guard rails, and legs sent as order intents.

A front holds no exchange keys and sends nothing itself (cluster/front_orders.py).  For the two
agent tools it provides what a single node's order service does:

- :class:`FrontSimulation` (:class:`brokers.trade_simulation.SimulatedAccount`): the balances of the
  leader's mirror (cluster/account_mirror.py; refused while it is missing or stale), the listing
  and ticker of Binance's public API (brokers/public_venue.py), the account's commission rates of
  its tier as the leader's mirror carries them (a front holds no keys to ask per symbol, as a single
  node's Binance broker does; Binance's default 0.1 % while the mirror has none), and the guard's
  dry run with **the order leader's** guard rails, which the leader publishes with each mirror
  refresh — not the front's own settings, which need not match the leader's: steps 1-6
  (brokers/orders/checks.py, the single node's messages) at the ticker price, then the halt switch
  and the daily limit counted as the leader counts them (cluster/leader_admission.py ``USED_SQL``).
  Anything that cannot be read refuses the leg (fail closed), as the leader would.
- :class:`FrontLegs` (:class:`brokers.orders.trade_legs.LegDesk`): each leg goes through
  :meth:`cluster.front_orders.FrontOrders.place_parsed` — recorded as an intent under its client
  order id, admitted and sent by the leader, once; a retried call with the same ``tool_call_id``
  finds its intents and reports them as they stand (``replayed``).  The leg's outcome is the
  leader's answer (the exchange's order), its fees those of the mirrored fills of the order
  (cluster/account_fills.py), else of the fills in the exchange's answer.  A refusal keeps the code
  the leader recorded with it (a guard rail: RISK_LIMIT_EXCEEDED, …).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

import structlog

from brokers import (
    DEFAULT_RATES,
    Admitted,
    Balance,
    BinanceBroker,
    BrokerError,
    Code,
    FeeRates,
    Fill,
    OrderChecks,
    OrderRefused,
    OrderRequest,
    Outcome,
    Placed,
    PublicVenue,
    SymbolRules,
    TradingHalted,
    check_order_type,
    daily_limit_refusal,
    quote_fees,
    standing,
)
from cluster.account_mirror import AccountView
from cluster.front_orders import FrontOrders
from cluster.halt import read_in
from cluster.leader_admission import USED_SQL
from storage import PostgresDatabase, StorageUnavailable, unreachable_as

log = structlog.get_logger(__name__)

PENDING = Outcome("pending", None, 0.0, 0.0, 0.0, None)


class FrontSimulation:
    """A cluster front's account for trade_simulate (nothing recorded, nothing sent)."""

    def __init__(self, db: PostgresDatabase, account: str, view: AccountView, venue: PublicVenue) -> None:
        self.db = db
        self.account = account
        self.view = view
        self.venue = venue
        self.name = venue.name

    async def balances(self) -> list[Balance]:
        return await self.view.balances()

    async def rules(self, symbol: str) -> SymbolRules | None:
        return await self.venue.rules(symbol)

    async def fee_rates(self, symbol: str) -> FeeRates:
        """The account's tier rates from the leader's mirror (a front holds no keys to ask per symbol);
        Binance's default when the mirror has none."""
        return await self.view.fee_rates() or DEFAULT_RATES

    async def evaluate(self, req: OrderRequest, *, pending: Decimal) -> Admitted:
        """The leader's admission as a dry run, counting ``pending`` on top of the last 24 hours."""
        check_order_type(BinanceBroker, req.type)  # a cluster leads Binance accounts
        limits = await self.view.guard_rails()
        checked = await OrderChecks(rules=self.venue.rules, ticker=self.venue.last_price, limits=limits).check(req)
        try:
            with unreachable_as("halt switch and daily limit not read", self.db.where):
                if (await read_in(self.db, self.account)).halted:
                    raise TradingHalted()
                used = Decimal(await self.db.fetchval(USED_SQL, self.account)) + pending
        except StorageUnavailable as exc:
            raise OrderRefused(f"order refused: {exc}; nothing can be judged while it is away") from None
        daily = limits.max_daily_notional
        if daily is not None and used + checked.notional > daily:
            raise daily_limit_refusal(checked.notional, used, daily)
        return checked


class FrontLegs:
    """A cluster front's trade_execute legs: order intents the account's order leader sends once."""

    def __init__(self, orders: FrontOrders, public: PublicVenue) -> None:
        self.orders = orders
        self.intents = orders.intents
        self.public = public
        self.venue = public.name

    async def owner_of(self, client_order_id: str) -> tuple[str | None] | None:
        found = await self.intents.owned(client_order_id)
        return None if found is None else (found[0],)

    async def rules(self, symbol: str) -> SymbolRules | None:
        return await self.public.rules(symbol)

    async def send(self, req: OrderRequest, owner: str) -> None:
        await self.orders.place_parsed(req, None, owner=owner)

    async def placed(
        self, client_order_id: str, *, code: Code | None = None, message: str | None = None, replayed: bool = False
    ) -> Placed:
        cid = client_order_id
        try:
            found = await self.intents.owned(cid)
        except StorageUnavailable as exc:  # it may have been recorded, even sent: never reported as not sent
            why = f"{message + '; ' if message else ''}{exc}; get_orders (or this call again) shows how it stands"
            return Placed(cid, None, PENDING, code=code or "NETWORK_ERROR", message=why, replayed=replayed)
        if found is None:
            return Placed(None, code=code, message=message, replayed=replayed)
        answer = found[1]
        if answer.state == "rejected":
            code = cast(Code, answer.code or code or "INVALID_ARGUMENT")  # the leader's classification first
            message = message or answer.error
            if answer.refused:  # our guard rails: never sent (nor placed by an earlier call), as on a single node
                if replayed:  # its client order id is used up: a new one is needed to try again
                    message = f"{message} (an earlier call's; to place this leg now, call with a new tool_call_id)"
                return Placed(None, code=code, message=message)
            outcome = Outcome("rejected", None, 0.0, 0.0, 0.0, answer.error)
            return Placed(cid, "REJECTED", outcome, code=code, message=message, replayed=replayed)
        order = answer.order
        if order is None:  # queued, being sent, or its outcome being settled by a leader
            return Placed(cid, None, PENDING, code=code, message=message, replayed=replayed)
        fees = 0.0
        if order.executed_qty > 0:
            fees = await self._fees(order.symbol, cid, order.fills)
        outcome = standing(
            status=order.status, side=order.side, executed=order.executed_qty, cumulative_quote=order.cumulative_quote,
            price=order.price or order.stop_price, fees=fees, reject_reason=order.reject_reason,
        )  # fmt: skip
        return Placed(cid, order.status, outcome, code=code, message=message, replayed=replayed)

    async def _fees(self, symbol: str, cid: str, answered: tuple[Fill, ...]) -> float:
        """The order's commissions in the quote asset: of its mirrored fills, or of the fills in the
        exchange's answer when those cover more of the order (the mirror is up to a refresh behind)."""
        try:
            rules = await self.public.rules(symbol)
        except BrokerError:
            rules = None
        base, quote = (rules.base_asset, rules.quote_asset) if rules else ("", "")
        try:
            with unreachable_as("fills not read", self.intents.db.where):
                mirrored = await self.intents.db.fetch(
                    "SELECT price, quantity, commission, commission_asset FROM cluster_account_fills"
                    " WHERE account = $1 AND symbol = $2 AND client_order_id = $3",
                    self.orders.account,
                    symbol,
                    cid,
                )
        except StorageUnavailable:
            mirrored = []
        fills: list[Any] = [
            Commission(r["price"], r["quantity"], r["commission"], r["commission_asset"]) for r in mirrored
        ]
        if sum((f.quantity for f in answered), Decimal(0)) > sum((f.quantity for f in fills), Decimal(0)):
            fills = list(answered)
        return await quote_fees(fills, base, quote, self.public.last_price)


@dataclass(frozen=True, slots=True)
class Commission:
    """A mirrored fill's commission (cluster_account_fills)."""

    price: Decimal
    quantity: Decimal
    commission: Decimal
    commission_asset: str
