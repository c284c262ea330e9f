"""A single node's answer journals: where :func:`~brokers.orders.lifecycle.send_once` records what the
exchange said to an order or an order list, in SQLite (``orders`` and ``order_lists``).

An answer is applied as any later view of the order is (``apply``: the order service's ``on_update``,
the list keeper's ``on_list_update``: fills stored once, audit lines, a bracket released); a refusal
marks the intent REJECTED with the exchange's reason; a lost answer marks it UNKNOWN, to be looked up
by its client id.  (The cluster's are in cluster/pg_order_journal.py.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from brokers.models import BrokerError, ExchangeList, ExchangeOrder, RateLimitedError
from brokers.orders.list_store import ListStore
from brokers.orders.store import OrderStore

log = structlog.get_logger(__name__)


class SqliteOrderAnswers:
    """The answers to single orders (:class:`~brokers.models.ExchangeOrder`)."""

    def __init__(
        self, orders: OrderStore, *, clock: Callable[[], float], apply: Callable[[ExchangeOrder], Awaitable[Any]]
    ) -> None:
        self.orders = orders
        self.clock = clock
        self.apply = apply

    async def placed(self, intent_id: str, answer: ExchangeOrder) -> None:
        await self.apply(answer)

    async def refused(self, intent_id: str, exc: BrokerError) -> None:
        await self.orders.set_status(intent_id, "REJECTED", self.clock(), str(exc))

    async def unknown(self, intent_id: str, error: str) -> None:
        await self.orders.set_status(intent_id, "UNKNOWN", self.clock(), None)
        log.warning("order_outcome_unknown", client_order_id=intent_id, error=error)


class SqliteListAnswers:
    """The answers to one order list (:class:`~brokers.models.ExchangeList`) whose legs are ``legs``.

    ``rearm_rate_limited`` (a bracket's claimed exit): an order-rate refusal puts the bracket back to
    ``waiting`` — its never-sent legs removed — instead of rejecting it (the exit procedure retries it
    after Retry-After, brokers/orders/exits.py)."""

    def __init__(
        self,
        orders: OrderStore,
        lists: ListStore,
        legs: Sequence[str],
        *,
        clock: Callable[[], float],
        apply: Callable[[ExchangeList], Awaitable[Any]],
        rearm_rate_limited: bool = False,
    ) -> None:
        self.orders = orders
        self.lists = lists
        self.legs = legs
        self.clock = clock
        self.apply = apply
        self.rearm_rate_limited = rearm_rate_limited

    async def placed(self, intent_id: str, answer: ExchangeList) -> None:
        await self.apply(answer)

    async def refused(self, intent_id: str, exc: BrokerError) -> None:
        now = self.clock()
        if (
            self.rearm_rate_limited
            and isinstance(exc, RateLimitedError)
            and await self.lists.rearm_bracket(intent_id, now)
        ):
            return
        for leg in self.legs:
            await self.orders.set_status(leg, "REJECTED", now, str(exc))
        await self.lists.set_state(intent_id, now, status="REJECTED")

    async def unknown(self, intent_id: str, error: str) -> None:
        now = self.clock()
        for leg in self.legs:
            await self.orders.set_status(leg, "UNKNOWN", now, None)
        log.warning("order_list_outcome_unknown", list_client_id=intent_id, error=error)
