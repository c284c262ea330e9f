"""A single node's settlement journals: the unresolved intents in SQLite that
:func:`~brokers.orders.settle.settle_intents` looks up at reconciliation, and a node's rule for one the
exchange never got.

The fence is the process: an intent this process is sending right now (``in_flight``) is not listed;
any other one is in doubt only until the exchange is asked.  Three journals, settled in this order by
the order service's reconciliation (brokers/orders/service.py, lists.py, and brackets.py's
``ClaimedExits``, which needs the exit procedure):

- :class:`SqliteOrderSettlement`, single orders (PENDING_SUBMIT, UNKNOWN, …) not open on the exchange
  and not legs of a list: absent after the grace (``unresolved_grace_s`` after the intent was recorded,
  the node's clock) → REJECTED; an unattended ``cg-`` intent (an alert action's, a schedule run's) still
  PENDING_SUBMIT → sent now, once, since its path committed to it and nobody else sends it;
- :class:`SqliteListSettlement`, order lists not known to be done: absent and still PENDING after the
  grace → the list and its legs REJECTED;
- ``ClaimedExits`` (brokers/orders/brackets.py), bracket exits claimed but not being sent (a crash between claim and
  send, a lost answer): absent → sized again and sent (it was claimed, so no one else sends it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import structlog

from brokers.models import ExchangeList, ExchangeOrder
from brokers.orders.list_store import ListRow, ListStore
from brokers.orders.settle import Kind, Unresolved
from brokers.orders.store import OrderRow, OrderStore

log = structlog.get_logger(__name__)

UNATTENDED_PREFIX = "cg-"
"""Client order ids of intents recorded by unattended paths (``cg-a-`` alert actions, ``cg-s-``
schedule runs): such an intent found unsent at reconciliation is sent, not rejected, because its
path committed to it in the same transaction as its own state (the alert fired, the run was due)."""

NEVER_REACHED_ORDER = "never reached the exchange (found on reconciliation)"
NEVER_REACHED_LEG = "never reached the exchange (reconciliation)"


def _unattended(row: OrderRow) -> bool:
    cid = row.client_order_id
    return row.status == "PENDING_SUBMIT" and cid.startswith(UNATTENDED_PREFIX) and not row.list_client_id


class SqliteOrderSettlement:
    """A node's single orders in doubt, for one reconciliation pass at ``now`` (see the module docstring)."""

    lookup_failed: Mapping[Kind, str] = {"order": "reconcile_query_failed", "list": "reconcile_query_failed"}

    def __init__(
        self,
        orders: OrderStore,
        broker: str,
        *,
        now: float,
        grace_s: float,
        skip: Collection[str],
        in_flight: Callable[[str], bool],
        apply: Callable[[ExchangeOrder], Awaitable[Any]],
        send_unattended: Callable[[OrderRow], Awaitable[Any]],
    ) -> None:
        self.orders = orders
        self.broker = broker
        self.now = now
        self.grace_s = grace_s
        self.skip = skip
        """Orders this pass already knows (open on the exchange, applied from ``openOrders``)."""
        self.in_flight = in_flight
        self.apply = apply
        self.send_unattended = send_unattended

    async def unresolved(self) -> Sequence[Unresolved[OrderRow]]:
        out = []
        for row in await self.orders.unresolved(self.broker):
            cid = row.client_order_id
            if self.in_flight(cid) or cid in self.skip or row.list_client_id:
                continue  # a list's legs are settled with their list (SqliteListSettlement, ClaimedExits)
            overdue = row.status in ("PENDING_SUBMIT", "UNKNOWN") and self.now - row.created_at > self.grace_s
            out.append(Unresolved(cid, "order", row.symbol, _unattended(row) or overdue, row))
        return out

    async def found(self, intent: Unresolved[OrderRow], answer: ExchangeOrder | ExchangeList) -> str | None:
        assert isinstance(answer, ExchangeOrder)
        await self.apply(answer)
        return "settled"

    async def absent(self, intent: Unresolved[OrderRow]) -> str | None:
        if _unattended(intent.held):
            # An alert action or a schedule run committed to this order and this process is not
            # sending it (a crash came between the commit and the send): send it now, once.
            log.info("reconcile_sending_unattended_intent", client_order_id=intent.intent_id)
            await self.send_unattended(intent.held)
            return "settled"
        await self.orders.set_status(intent.intent_id, "REJECTED", self.now, NEVER_REACHED_ORDER)
        return "rejected"


class SqliteListSettlement:
    """A node's order lists in doubt, for one reconciliation pass at ``now`` (see the module docstring)."""

    lookup_failed: Mapping[Kind, str] = {"order": "reconcile_list_failed", "list": "reconcile_list_failed"}

    def __init__(
        self,
        orders: OrderStore,
        lists: ListStore,
        broker: str,
        *,
        now: float,
        grace_s: float,
        in_flight: Callable[[str], bool],
        apply: Callable[[ExchangeList], Awaitable[Any]],
    ) -> None:
        self.orders = orders
        self.lists = lists
        self.broker = broker
        self.now = now
        self.grace_s = grace_s
        self.in_flight = in_flight
        self.apply = apply

    async def unresolved(self) -> Sequence[Unresolved[ListRow]]:
        out = []
        for row in await self.lists.unresolved(self.broker):
            if self.in_flight(row.list_client_id):
                continue  # open or not: its legs' states come from the lookup (an OTOCO's working order)
            due = row.status == "PENDING" and self.now - row.created_at > self.grace_s
            out.append(Unresolved(row.list_client_id, "list", row.symbol, due, row))
        return out

    async def found(self, intent: Unresolved[ListRow], answer: ExchangeOrder | ExchangeList) -> str | None:
        assert isinstance(answer, ExchangeList)
        await self.apply(answer)
        return "settled"

    async def absent(self, intent: Unresolved[ListRow]) -> str | None:
        await self.lists.set_state(intent.intent_id, self.now, status="REJECTED")
        for leg in await self.lists.leg_ids(intent.intent_id):
            await self.orders.set_status(leg, "REJECTED", self.now, NEVER_REACHED_LEG)
        return "settled"
