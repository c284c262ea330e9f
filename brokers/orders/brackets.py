"""Brackets on a single node: place_order's ``bracket`` — an OCO exit (opposite side, same quantity)
attached to an entry.

Owns the bracket's shape (:func:`exit_request`) and drives the exit procedure
(:class:`~brokers.orders.exits.ExitProcedure`, the one a cluster's leader drives too) over the node's
SQLite journal (:class:`~brokers.orders.sqlite_journal.SqliteExitJournal`) from order updates and
reconciliation; admission and the entry's send are the order service's (``place_bracket``).

Where the venue has OTOCO and the entry is LIMIT/LIMIT_MAKER the
entry and its exit go as one OTOCO list (the exchange places the OCO when the entry fills).
Otherwise the daemon places the OCO itself, exactly once:

1. admission: the guard checks the entry and both exit legs and records the entry intent and
   the *waiting* bracket in one transaction, counting the exit (its larger leg) with the entry;
2. ids: the exit's list and leg client ids are derived from the entry's client id
   (:func:`bracket_ids`), so every attempt names the same list;
3. the entry FILLS (from its answer, the user stream or reconciliation): the bracket is claimed
   in a transaction that also records its legs' intents (``waiting`` → ``claimed``) — only one
   caller can win it — and only then sent; the answer moves it to ``placed``;
4. a crash between claim and send: reconciliation looks the list up by its client id and
   applies what the exchange has, or sends it when the exchange never received it;
5. the exchange refuses the send for its order rate (:class:`RateLimitedError`, HTTP 429 -1015:
   a definite "not placed"): the exit protects a position already held, so it is not dropped —
   the bracket goes back to ``waiting`` in the transaction that removes its legs' never-sent
   intents (:meth:`OrderLists.send` with ``rearm_rate_limited``), and is claimed again, with the
   same client ids, by the first reconciliation after ``Retry-After`` (a not-before time kept in
   memory: after a restart reconciliation simply tries at once, and the broker holds it back while
   its own wait lasts).  A real refusal (:class:`OrderRejected`: balance, filters) is ``rejected``;
6. an entry that ends with nothing filled (cancelled, rejected, expired) never gets its OCO: the
   bracket becomes ``void``; an entry that ends partly filled (cancelled or expired after a
   partial fill) is done too, and gets its OCO for what it filled.  A PARTIALLY_FILLED entry
   still working places nothing yet: the exit goes out once, when the entry is done.

The daemon's OCO sells (buys back) what the entry acquired (:func:`~brokers.orders.exits.exit_quantity`,
the one rule of a node and a cluster): the entry's executed quantity, less a commission the
exchange took in the base asset (Binance without BNB), never more than the bracket's planned
quantity, rounded down to the LOT_SIZE step — else the exit would be refused for an insufficient
balance.  Nothing left after that: no exit (``void``).  An OTOCO's exit quantity is fixed when it
is placed (the entry's quantity): with base-asset fees it needs the fee paid in another asset.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from brokers.models import TERMINAL, ExchangeList, ExchangeOrder, ListRequest, OrderRequest
from brokers.orders.exits import AuditLine, ExitProcedure, RulesReader, bracket_ids, exit_quantity
from brokers.orders.journal import WaitingExit
from brokers.orders.lists import OrderLists, oco_request
from brokers.orders.settle import ExchangeLookup, Kind, Unresolved, settle_intents
from brokers.orders.sqlite_journal import SqliteExitJournal, entry_end
from brokers.orders.store import OrderRow, OrderStore

__all__ = ["Brackets", "bracket_ids", "exit_quantity", "exit_request"]


def exit_request(entry: OrderRequest, bracket: dict[str, Decimal | None], working: bool) -> ListRequest:
    """The bracket's list: an OTOCO with ``entry`` working (``working``), else the exit OCO alone."""
    list_id, tp_id, sl_id = bracket_ids(entry.client_order_id)
    assert entry.quantity is not None
    tp, sl = bracket["take_profit"], bracket["stop_loss"]
    assert tp is not None and sl is not None
    return oco_request(
        symbol=entry.symbol, side="SELL" if entry.side == "BUY" else "BUY", quantity=entry.quantity,
        take_profit=tp, stop=sl, stop_limit=bracket.get("stop_limit"), list_client_id=list_id,
        ids=(tp_id, sl_id), owner=entry.owner,
        working=OrderRequest(
            entry.symbol, entry.side, entry.type, entry.client_order_id, quantity=entry.quantity,
            price=entry.price, time_in_force=entry.time_in_force, owner=entry.owner, list_client_id=list_id,
        ) if working else None,
    )  # fmt: skip


class Brackets:
    """The bracket exits of one order service's broker: released when their entry ends, settled by
    reconciliation."""

    def __init__(
        self,
        lists: OrderLists,
        orders: OrderStore,
        *,
        broker: str,
        rules: RulesReader,
        lookup: ExchangeLookup,
        clock: Callable[[], float],
        audit: AuditLine | None = None,
    ) -> None:
        self.lists = lists
        self.journal = SqliteExitJournal(orders, lists.store, broker, clock=clock, in_flight=lists.in_flight)
        self.exits = ExitProcedure(self.journal, lists, rules, audit=audit)
        self._lookup = lookup

    async def after_update(self, row: OrderRow, before: str | None) -> None:
        """An order moved: if it is the entry of a waiting bracket, place the OCO (filled) or void it."""
        if row.status not in TERMINAL or before == row.status:
            return
        exit_ = await self.journal.waiting_exit(row)
        if exit_ is not None:
            await self.exits.release(exit_)

    async def reconcile(self) -> int:
        """Waiting brackets whose entry has finished; claimed ones whose send's outcome is not known
        (looked up by the list's client id: found → placed, absent → sized again and sent)."""
        done = await self.exits.release_due()
        claimed = ClaimedExits(self.journal, self.exits, apply=self.lists.on_list_update)
        return done + (await settle_intents(claimed, self._lookup))["settled"]


class ClaimedExits:
    """A node's claimed bracket exits whose send's outcome is not known, settled by
    :func:`~brokers.orders.settle.settle_intents` (brokers/orders/sqlite_settle.py has the node's other
    settlement journals): found → placed; absent → sized again and sent (it was claimed, so no one else
    sends it)."""

    lookup_failed: Mapping[Kind, str] = {"order": "bracket_lookup_failed", "list": "bracket_lookup_failed"}

    def __init__(
        self, journal: SqliteExitJournal, exits: ExitProcedure, *, apply: Callable[[ExchangeList], Awaitable[Any]]
    ) -> None:
        self.journal = journal
        self.exits = exits
        self.apply = apply

    async def unresolved(self) -> Sequence[Unresolved[tuple[ListRequest, OrderRow | None]]]:
        return [
            Unresolved(req.list_client_id, "list", req.symbol, True, (req, entry))
            for req, entry in await self.journal.claimed_exits()
        ]

    async def found(
        self, intent: Unresolved[tuple[ListRequest, OrderRow | None]], answer: ExchangeOrder | ExchangeList
    ) -> str | None:
        assert isinstance(answer, ExchangeList)
        await self.apply(answer)
        await self.journal.exit_placed(intent.held[0])
        return "settled"

    async def absent(self, intent: Unresolved[tuple[ListRequest, OrderRow | None]]) -> str | None:
        req, entry = intent.held
        sized = req if entry is None else await self.exits.sized(WaitingExit(req, entry_end(entry)))
        if isinstance(sized, ListRequest):  # claimed: it was sized, so it sizes again
            await self.exits.send_claimed(sized, None if entry is None else entry.client_order_id)
        return "settled"
