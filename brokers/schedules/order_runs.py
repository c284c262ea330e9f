"""A single node's schedule runs: each scheduled time's order through the daemon's order service.

:class:`OrderServiceRuns` is the :class:`~brokers.schedules.service.ScheduleRuns` of a single
node (a cluster's records intents for its order leader instead: cluster/schedule_runs.py).  At
``schedule_order`` it checks what the guard can check without sending; at each run it admits the
order through the guard (which records the intent), settles the schedule's progress durably, then
sends the order once — the order and crash guarantees are in :mod:`brokers.schedules.service`.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import structlog

from brokers.filters import FilterError
from brokers.models import BrokerError, OrderRejected, OrderRequest, state_name
from brokers.orders.args import OrderInputError, parse_order
from brokers.orders.args import plain_decimal as plain
from brokers.orders.guard import OrderRefused, order_value
from brokers.orders.service import OrderService
from brokers.schedules.spec import ScheduleInputError, iso
from brokers.schedules.store import ScheduleRow, ScheduleStore

log = structlog.get_logger(__name__)


class OrderServiceRuns:
    """Schedule runs through one :class:`OrderService` (guard, intent, send)."""

    def __init__(self, orders: OrderService, store: ScheduleStore) -> None:
        self.orders = orders
        self.store = store

    async def check(self, fields: dict[str, Any]) -> list[str]:
        """What the guard can check without sending: allow-list, symbol listed and trading, price and
        lot filters, minimum notional and the per-order limit at today's reference price.

        Fails closed like ``set_alert`` with an action: when the per-order limit applies and no price
        can be read to value the order, ``schedule_order`` is refused, naming why and the fix (an order
        given in quote quantity is valued without a price; without a per-order limit there is nothing to
        hold it to, and the price filters wait for the runs)."""
        guard = self.orders.guard
        symbol = fields["symbol"]
        allowed = guard.limits.allowed_symbols
        if allowed and symbol not in allowed:
            raise ScheduleInputError(f"{symbol} is not in the allowed symbols ({', '.join(sorted(allowed))})")
        rules = await guard.rules(symbol)
        market = fields["type"] == "MARKET"
        try:
            if fields.get("price") is not None:
                rules.check_price(fields["price"])
            if fields.get("quantity") is not None:
                rules.check_quantity(fields["quantity"], market=market)
        except FilterError as exc:
            raise ScheduleInputError(str(exc)) from None
        req = OrderRequest(**{**fields, "owner": None})
        cap = guard.limits.max_order_notional
        try:
            ref = await guard.reference_price(symbol)
        except (OrderInputError, BrokerError) as exc:
            if cap is None:
                return []  # no per-order limit to hold it to: the filters are checked again at each run
            if req.quote_quantity is not None and req.quantity is None:
                return self._within_cap(order_value(req, Decimal(0)), cap)
            raise ScheduleInputError(
                f"cannot check each run's order against the per-order limit {plain(cap)}: no price for {symbol} "
                f"to value it ({exc}); retry when market data is back, or give quote_quantity (valued without "
                "a price)"
            ) from None
        if req.quantity is not None:
            try:
                rules.check_notional(req.quantity, req.price if req.price is not None else ref.price, market=market)
            except FilterError as exc:
                raise ScheduleInputError(str(exc)) from None
        return [] if cap is None else self._within_cap(order_value(req, ref.price), cap)

    @staticmethod
    def _within_cap(value: Decimal, cap: Decimal) -> list[str]:
        if value > cap:
            raise ScheduleInputError(
                f"each run's order value {plain(value)} exceeds the per-order limit {plain(cap)} at today's price"
            )
        return []

    async def run(self, row: ScheduleRow, due: datetime, cid: str, ends: bool, now: float) -> tuple[str, str]:
        """One run: ("run" | "refused", its trades.log line without the time stamp)."""
        head = f"id={row.id} due={iso(due)} order={cid}"
        if await self.orders.store.get(cid) is not None:  # admitted before a crash: never a second order
            await self._settle(row, due, ends, now)
            return "run", f"SCHEDULE-RUN {head} outcome=already placed (found after a restart; not re-sent)"
        try:
            req = OrderRequest(**{**parse_order(row.order_args), "client_order_id": cid, "owner": row.owner})
            await self.orders.guard.admit(req)
        except (OrderInputError, BrokerError) as exc:
            if isinstance(exc, OrderRefused) and "already used" in str(exc):
                await self._settle(row, due, ends, now)
                return "run", f"SCHEDULE-RUN {head} outcome=already placed (not re-sent)"
            await self._settle(row, due, ends, now)
            log.warning("schedule_run_refused", schedule_id=row.id, due=iso(due), reason=str(exc))
            return "refused", f"SCHEDULE-REFUSED {head} reason={exc}"
        await self._settle(row, due, ends, now)
        try:
            result = await self.orders.send_recorded(req)
        except OrderRejected as exc:
            if "duplicate" in str(exc).lower():
                return "run", f"SCHEDULE-RUN {head} outcome=already placed (the exchange has this client id)"
            return "refused", f"SCHEDULE-REFUSED {head} reason={exc}"
        except BrokerError as exc:
            return "run", f"SCHEDULE-RUN {head} outcome=error, left to reconciliation: {exc}"
        return "run", f"SCHEDULE-RUN {head} status={result.get('status', state_name('UNKNOWN'))}"

    async def _settle(self, row: ScheduleRow, due: datetime, ends: bool, now: float) -> None:
        await self.store.settle(row.id, due.timestamp(), ran=True, finished=ends, now=now)
