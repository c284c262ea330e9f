"""A single node's exit journal: bracket exits in SQLite (``order_lists`` and ``orders``).

Implements :class:`~brokers.orders.journal.ExitJournal` for :class:`~brokers.orders.exits.ExitProcedure`.
The fence is the process: one daemon owns the database file, and an exit it is sending right now
(``in_flight``) is left alone by reconciliation.  States: ``waiting`` → ``claimed`` (the claim also
inserts the legs' intents, :meth:`~brokers.orders.list_store.ListStore.claim_bracket`, and reads the
halt switch) → ``placed`` / ``rejected``; ``void``.  An order-rate refusal's not-before time is kept
in memory, on the service's clock: after a restart reconciliation simply tries at once, and the broker
holds the request back while its own wait lasts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from brokers.models import TERMINAL, ListRequest, RateLimitedError, side_of
from brokers.orders.args import OrderInputError
from brokers.orders.exits import bracket_ids
from brokers.orders.journal import EntryEnd, EntryFill, WaitingExit
from brokers.orders.list_store import ListRow, ListStore
from brokers.orders.lists import oco_request
from brokers.orders.store import OrderRow, OrderStore

log = structlog.get_logger(__name__)


def planned_exit(row: ListRow) -> ListRequest:
    """A bracket row's exit OCO as planned: the entry's quantity, the ids derived from the entry's."""
    assert row.side is not None and row.quantity is not None
    assert row.take_profit_price is not None and row.stop_price is not None and row.entry_client_id is not None
    _list, tp_id, sl_id = bracket_ids(row.entry_client_id)
    return oco_request(
        symbol=row.symbol, side=side_of(row.side), quantity=row.quantity, take_profit=row.take_profit_price,
        stop=row.stop_price, stop_limit=row.stop_limit_price, list_client_id=row.list_client_id,
        ids=(tp_id, sl_id), owner=row.owner,
    )  # fmt: skip


def entry_end(entry: OrderRow) -> EntryEnd:
    """The procedure's view of an entry order row."""
    return EntryEnd(entry.client_order_id, entry.side, entry.status, entry.executed_qty, entry.quantity)


class SqliteExitJournal:
    """The bracket exits of one broker's orders in SQLite (see the module docstring)."""

    def __init__(
        self,
        orders: OrderStore,
        lists: ListStore,
        broker: str,
        *,
        clock: Callable[[], float],
        in_flight: Callable[[str], bool],
    ) -> None:
        self.orders = orders
        self.lists = lists
        self.broker = broker
        self.clock = clock
        self.in_flight = in_flight
        """Whether a list is being sent by this process right now (reconciliation leaves it alone)."""
        self._not_before: dict[str, float] = {}
        """Exits an order-rate refusal sent back to waiting: list id → the clock time (unix s) before
        which they are not claimed again."""

    def may_send(self) -> bool:
        return True  # the process is the fence

    def retry_at(self, list_client_id: str) -> float | None:
        """The not-before time of an exit refused for the order rate (None when it has none)."""
        return self._not_before.get(list_client_id)

    def due(self, list_client_id: str) -> bool:
        """Whether an exit may be claimed now (no order-rate wait pending)."""
        return self.clock() >= self._not_before.get(list_client_id, 0.0)

    async def waiting_exit(self, entry: OrderRow) -> WaitingExit | None:
        """The waiting exit of ``entry`` when it is due (None: no bracket, not waiting, or not due)."""
        row = await self.lists.bracket_of(entry.client_order_id)
        if row is None or row.bracket_state != "waiting" or not self.due(row.list_client_id):
            return None
        return WaitingExit(planned_exit(row), entry_end(entry))

    async def exits_due(self) -> Sequence[WaitingExit]:
        out = []
        for row in await self.lists.with_state(self.broker, "waiting"):
            if self.in_flight(row.list_client_id) or not self.due(row.list_client_id):
                continue
            entry = await self.orders.get(row.entry_client_id or "")
            if entry is not None and entry.status in TERMINAL:
                out.append(WaitingExit(planned_exit(row), entry_end(entry)))
        return out

    async def claimed_exits(self) -> Sequence[tuple[ListRequest, OrderRow | None]]:
        """Claimed exits not being sent now: their send's outcome is not known (a crash between claim
        and send, a lost answer) — each with its entry's row (None when it is gone)."""
        out = []
        for row in await self.lists.with_state(self.broker, "claimed"):
            if not self.in_flight(row.list_client_id):
                out.append((planned_exit(row), await self.orders.get(row.entry_client_id or "")))
        return out

    async def entry_fills(self, exit_: WaitingExit) -> Sequence[EntryFill]:
        fills = await self.orders.fills(self.broker, exit_.planned.symbol)
        cid = exit_.entry.client_order_id
        return [EntryFill(f.quantity, f.commission, f.commission_asset) for f in fills if f.client_order_id == cid]

    async def claim_exit(self, req: ListRequest) -> bool:
        try:
            claimed = await self.lists.claim_bracket(self.broker, req, self.clock())
        except OrderInputError as exc:  # trading halted: it stays waiting, reconciliation places it later
            log.warning("bracket_not_claimed", list_client_id=req.list_client_id, error=str(exc))
            return False
        if claimed:
            self._not_before.pop(req.list_client_id, None)
        return claimed

    async def rearm_exit(self, req: ListRequest, exc: RateLimitedError) -> float | None:
        # A node's sender puts it back itself, while the list is still in flight (OrderLists.send with
        # rearm_rate_limited), so reconciliation never sees it claimed and unsent; otherwise it is done here.
        row = await self.lists.get(req.list_client_id)
        if row is None or row.bracket_state not in ("waiting", "claimed"):
            return None
        if row.bracket_state == "claimed" and not await self.lists.rearm_bracket(req.list_client_id, self.clock()):
            return None
        retry_at = self.clock() + exc.retry_after_s
        self._not_before[req.list_client_id] = retry_at
        return retry_at

    async def exit_refused(self, req: ListRequest, error: str) -> bool:
        await self.lists.set_state(req.list_client_id, self.clock(), bracket_state="rejected")
        return True

    async def exit_placed(self, req: ListRequest) -> None:
        await self.lists.set_state(req.list_client_id, self.clock(), bracket_state="placed")

    async def void_exit(self, list_client_id: str, why: str) -> bool:
        row = await self.lists.get(list_client_id)
        if row is None or row.bracket_state != "waiting":
            return False
        await self.lists.set_state(list_client_id, self.clock(), status="VOID", bracket_state="void")
        return True
