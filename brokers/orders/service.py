"""The order tracker and the trading tools' operations, above whichever broker runs.

Placing an order: validate the arguments (chartgen's order of checks and texts), then the
guard (:mod:`brokers.orders.guard`) applies the exchange filters and the operator's safety limits
and records the order (PENDING_SUBMIT, with its owner) in SQLite — or refuses it; then
``SUBMITTED`` goes to trades.log and the order is sent.  Every order path enters through
:meth:`OrderService.submit`.  Orders belong to the principal that placed them:
``get_orders`` and ``cancel_order`` act on the caller's own unless it is an admin, and
another's order answers exactly like an unknown one.  Positions and balances are the
exchange account's.  The answer — or any later execution
event, or reconciliation — moves the order forward and stores its fills once each.  A
lost answer (timeout, 5xx) leaves the order UNKNOWN and it is looked up by clientOrderId,
never re-sent.  Reconciliation (at start and periodically) settles every unresolved
order, learns orders placed elsewhere and trades missed while disconnected.  Order lists
(place_oco, OTOCO) live in :mod:`brokers.orders.lists`, brackets in :mod:`brokers.orders.brackets`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any

import structlog

from brokers.models import (
    OPEN,
    Actor,
    Balance,
    BrokerError,
    ExchangeOrder,
    OrderRejected,
    OrderRequest,
    OutcomeUnknown,
    RateLimitedError,
    state_name,
)
from brokers.orders.args import OrderInputError, parse_entry
from brokers.orders.args import plain_decimal as plain
from brokers.orders.brackets import Brackets
from brokers.orders.guard import EnginePrice, OrderGuard, OrderRefused, SafetyLimits
from brokers.orders.lists import OrderLists, check_order_type
from brokers.orders.store import OrderRow, OrderStore
from brokers.orders.views import order_details, order_listing, request_of
from brokers.positions import positions_from_fills
from brokers.protocol import Broker

log = structlog.get_logger(__name__)

__all__ = ["Actor", "OrderInputError", "OrderRefused", "OrderService", "SafetyLimits"]

AuditWriter = Callable[[Sequence[str]], Awaitable[None]]
MarkPrice = Callable[[str], float | None]
UNRESOLVED_GRACE_S = 30.0
FILL_GAP_WINDOW_S = 7 * 86400.0
"""How far back reconciliation looks for orders whose fills were missed."""
UNATTENDED_PREFIX = "cg-"
"""Client order ids of intents recorded by unattended paths (``cg-a-`` alert actions, ``cg-s-``
schedule runs): such an intent found unsent at reconciliation is sent, not rejected, because its
path committed to it in the same transaction as its own state (the alert fired, the run was due)."""


class OrderService:
    """Orders, positions and balances through one broker, tracked in SQLite."""

    def __init__(
        self,
        broker: Broker,
        store: OrderStore,
        *,
        audit: AuditWriter | None = None,
        mark_price: MarkPrice | None = None,
        limits: SafetyLimits | None = None,
        engine_price: EnginePrice | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.broker = broker
        self.store = store
        self._audit = audit
        self._mark = mark_price
        self._clock = clock
        self.guard = OrderGuard(
            store,
            broker.name,
            rules=broker.rules,
            ticker=broker.last_price,
            engine_price=engine_price,
            limits=limits,
            clock=clock,
        )
        """The guard rails every order passes (:meth:`submit`); ``engine_price`` is its first price source."""
        self._in_flight: set[str] = set()
        self._assets: dict[str, tuple[str, str]] = {}
        self.latencies_ms: list[float] = []
        self.unknown_lookup_delays_s: tuple[float, ...] = (0.2, 1.0, 3.0)
        """Waits before each lookup of an order whose answer was lost."""
        self.unresolved_grace_s = UNRESOLVED_GRACE_S
        self.reconcile_error: str | None = None
        """The last reconciliation's broker failure (None once a pass succeeds): a degraded state."""
        self.listeners: list[Callable[[], None]] = []
        """Called after an order, fill or list changed (the dashboard refreshes its orders panel)."""
        broker.set_event_handler(self.on_update)
        self.lists = OrderLists(self)
        self.brackets = Brackets(self, self.lists)

    @property
    def limits(self) -> SafetyLimits:
        return self.guard.limits

    async def write_audit(self, lines: Sequence[str]) -> None:
        """Append ``lines`` to the audit log (trades.log) when the service has one."""
        if self._audit is not None and lines:
            await self._audit(lines)

    def now(self) -> float:
        """The service's clock (unix seconds)."""
        return self._clock()

    def note_assets(self, symbol: str, base: str, quote: str) -> None:
        """Remember ``symbol``'s base and quote assets (positions read them; a bracket admits outside submit)."""
        self._assets[symbol] = (base, quote)

    def stamp(self) -> str:
        """The service's clock as the audit log's UTC time stamp."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock()))

    # --- tools ----------------------------------------------------------------------------
    async def place_order(self, args: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
        """The place_order tool: parse the arguments, then :meth:`submit` the order for ``owner``.

        ``owner`` is the calling principal; None records an order only an admin sees.
        """
        order, bracket = parse_entry(args)
        return await self.place_parsed(order, bracket, owner=owner)

    async def place_parsed(
        self, order: OrderRequest, bracket: dict[str, Decimal | None] | None, *, owner: str | None
    ) -> dict[str, Any]:
        """An order parsed by :func:`brokers.orders.args.parse_entry` (the tool edge parses once), for ``owner``."""
        if order.client_order_id.startswith(UNATTENDED_PREFIX):
            raise OrderInputError(
                f"client_order_id may not start with {UNATTENDED_PREFIX!r} (reserved for alert actions and "
                "schedules); choose another or omit it"
            )
        entry = dataclasses.replace(order, owner=owner)
        if bracket is not None:
            return await self.brackets.place(entry, bracket)
        return await self.submit(entry)

    def reserve(self, client_order_id: str) -> None:
        """Mark an intent as being sent by this process (reconciliation leaves it alone)."""
        self._in_flight.add(client_order_id)

    def release(self, client_order_id: str) -> None:
        self._in_flight.discard(client_order_id)

    async def submit(self, req: OrderRequest) -> dict[str, Any]:
        """Every order path's way in: the guard admits (records) it, then it is sent once."""
        started = time.perf_counter()
        check_order_type(self.broker, req.type)
        self._in_flight.add(req.client_order_id)  # before the intent exists: reconciliation must not send it
        try:
            admitted = await self.guard.admit(req)
        except BaseException:
            self._in_flight.discard(req.client_order_id)
            raise
        self._assets[req.symbol] = (admitted.rules.base_asset, admitted.rules.quote_asset)
        return await self.send_recorded(req, started=started)

    async def send_recorded(self, req: OrderRequest, *, started: float | None = None) -> dict[str, Any]:
        """Send an order already recorded as an intent (PENDING_SUBMIT) by the guard — here, or in
        another path's own transaction (an alert firing commits its action's intent with the firing
        and calls this after the commit).  Sent once: a lost answer is looked up, never re-sent."""
        started = time.perf_counter() if started is None else started
        kind = "MARKET" if req.type == "MARKET" else f"{req.type}@{plain(req.price or req.stop_price or 0)}"
        qty_text = plain(req.quantity) if req.quantity is not None else f"quote:{plain(req.quote_quantity or 0)}"
        await self.write_audit(
            [f"{self.stamp()} SUBMITTED {req.side} {req.symbol} {qty_text} {kind} id={req.client_order_id}"]
        )
        self._in_flight.add(req.client_order_id)
        try:
            self.latencies_ms.append((time.perf_counter() - started) * 1000)
            try:
                update = await self.broker.place(req)
            except (OrderRejected, RateLimitedError) as exc:
                await self.store.set_status(req.client_order_id, "REJECTED", self._clock(), str(exc))
                raise
            except OutcomeUnknown as exc:
                await self.store.set_status(req.client_order_id, "UNKNOWN", self._clock(), None)
                log.warning("order_outcome_unknown", client_order_id=req.client_order_id, error=str(exc))
                update = await self._lookup_after_unknown(req)
                if update is None:
                    return {"order_id": req.client_order_id, "status": "Pending", "exchange_status": "UNKNOWN",
                            "note": "the exchange's answer was lost; the order will be reconciled"}  # fmt: skip
            row = await self.on_update(update)
        finally:
            self._in_flight.discard(req.client_order_id)
        assert row is not None
        return {"order_id": row.client_order_id, "status": state_name(row.status), **order_details(row)}

    async def _lookup_after_unknown(self, req: OrderRequest) -> ExchangeOrder | None:
        for delay in self.unknown_lookup_delays_s:
            await asyncio.sleep(delay)  # give the exchange time to settle before asking; bounded retries
            try:
                found = await self.broker.query(req.symbol, req.client_order_id)
            except BrokerError:
                continue
            if found is not None:
                return found
        return None

    async def cancel_order(self, order_id: Any, *, actor: Actor) -> dict[str, Any]:
        """Cancel one of ``actor``'s orders (any order for an admin); another's answers as an unknown one."""
        if order_id is None or order_id == "":
            raise OrderInputError("order_id is required")
        if not isinstance(order_id, str) or len(order_id) > 64:
            raise OrderInputError("order_id must be the id place_order returned")
        row = await self.store.get(order_id)
        if (listed := await self.lists.cancel_if_list(order_id, row, actor)) is not None:
            return listed  # a list id, or a leg of a list: the whole list, as on Binance
        if row is None or row.broker != self.broker.name or not actor.may_act_on(row.owner):
            raise OrderInputError(f"order not found: {order_id}")
        if row.status not in OPEN:
            raise OrderInputError(f"invalid transition: {state_name(row.status)} \u2192 Cancelled")
        update = await self.broker.cancel(row.symbol, row.client_order_id)
        await self.on_update(update)
        return {"ok": True}

    async def get_orders(self, filter_: Any, *, actor: Actor) -> list[dict[str, Any]]:
        """``actor``'s orders (everyone's for an admin), newest first; ``filter_`` "open" or "all"."""
        open_only = filter_ == "open"
        rows = await self.store.orders(self.broker.name, actor=actor, open_only=open_only)
        extra = await self.lists.annotate(rows)
        return [{**order_listing(r), **extra.get(r.client_order_id, {})} for r in rows]

    async def get_positions(self) -> list[dict[str, Any]]:
        fills = await self.store.fills(self.broker.name)
        for symbol in {f.symbol for f in fills} - set(self._assets):
            rules = await self.broker.rules(symbol)
            if rules is not None:
                self._assets[symbol] = (rules.base_asset, rules.quote_asset)
        out = []
        for symbol, pos in sorted(positions_from_fills(fills, self._assets).items()):
            if not pos.listed:
                continue
            mark = self._mark(symbol) if self._mark is not None else None
            out.append(pos.listing(Decimal(str(mark)) if mark is not None else await self._ticker_or_none(symbol)))
        return out

    async def _ticker_or_none(self, symbol: str) -> Decimal | None:
        try:
            return await self.broker.last_price(symbol)
        except BrokerError:
            return None

    async def balances(self) -> list[Balance]:
        return await self.broker.balances()

    async def get_balance(self) -> dict[str, Any]:
        balances = await self.broker.balances()
        return {
            "broker": self.broker.name,
            "balances": [
                {"asset": b.asset, "free": float(b.free), "locked": float(b.locked), "total": float(b.total)}
                for b in balances
            ],
        }

    # --- tracking -------------------------------------------------------------------------
    async def on_update(self, update: ExchangeOrder) -> OrderRow | None:
        """An order update from any source: store it, its new fills, and audit transitions."""
        row, before, _new = await self.store.apply(self.broker.name, update, self._clock())
        if row is None:
            return None
        lines = []
        if row.status == "FILLED" and before != "FILLED":
            avg = row.avg_price
            lines.append(
                f"{self.stamp()} FILLED {row.side} {row.symbol} {plain(row.executed_qty)} @ "
                f"{plain(avg) if avg is not None else '?'} id={row.client_order_id}"
            )
        elif row.status in ("CANCELED", "EXPIRED", "EXPIRED_IN_MATCH") and before != row.status:
            lines.append(f"{self.stamp()} CANCELLED id={row.client_order_id}")
        await self.write_audit(lines)
        await self.brackets.after_update(row, before)
        for listener in self.listeners:
            listener()
        return row

    async def reconcile(self) -> dict[str, int]:
        """One reconciliation pass; a broker failure is kept in :attr:`reconcile_error` until a pass succeeds."""
        try:
            counts = await self._reconcile_once()
        except BrokerError as exc:
            self.reconcile_error = str(exc)
            raise
        self.reconcile_error = None
        return counts

    async def _reconcile_once(self) -> dict[str, int]:
        """Settle unresolved orders, learn open orders placed elsewhere, fetch missed trades.

        One ``openOrders`` call settles every order still open; only the unresolved orders
        that are not open any more (filled or cancelled meanwhile, or never received) are
        queried one by one.
        """
        now = self._clock()
        settled = rejected = learned = 0
        last_ids = await self.store.last_trade_ids(self.broker.name)  # before this pass stores any fill
        open_now = {o.client_order_id: o for o in await self.broker.open_orders()}
        for cid, order in open_now.items():
            if await self.store.get(cid) is None:
                learned += 1
            await self.on_update(order)
        for row in await self.store.unresolved(self.broker.name):
            if row.client_order_id in self._in_flight or row.client_order_id in open_now or row.list_client_id:
                continue  # a list's legs are settled with their list (brokers.orders.lists, brokers.orders.brackets)
            try:
                found = await self.broker.query(row.symbol, row.client_order_id)
            except BrokerError as exc:
                log.warning("reconcile_query_failed", client_order_id=row.client_order_id, error=str(exc))
                continue
            if found is not None:
                await self.on_update(found)
                settled += 1
            elif (
                row.status == "PENDING_SUBMIT"
                and row.client_order_id.startswith(UNATTENDED_PREFIX)
                and getattr(row, "list_client_id", None) is None
            ):
                # An alert action or a schedule run committed to this order and this process is not
                # sending it (a crash came between the commit and the send): send it now, once.
                log.info("reconcile_sending_unattended_intent", client_order_id=row.client_order_id)
                try:
                    await self.send_recorded(request_of(row))
                except BrokerError as exc:
                    log.warning("reconcile_send_failed", client_order_id=row.client_order_id, error=str(exc))
                settled += 1
            elif row.status in ("PENDING_SUBMIT", "UNKNOWN") and now - row.created_at > self.unresolved_grace_s:
                await self.store.set_status(
                    row.client_order_id, "REJECTED", now, "never reached the exchange (found on reconciliation)"
                )
                rejected += 1
        fills = 0
        for symbol in set(await self.store.symbols(self.broker.name)):
            start = last_ids.get(symbol)
            new = await self.store.add_fills(self.broker.name, await self.broker.trades(symbol, start))
            fills += len(new)
        for symbol in await self.store.fill_gap_symbols(self.broker.name, now - FILL_GAP_WINDOW_S):
            # An order executed more than its stored fills (its trades are older than the newest stored
            # one, so the pass above started after them): fetch the symbol's recent trades; fills are
            # keyed by trade id, so the ones already stored are not stored twice.
            new = await self.store.add_fills(self.broker.name, await self.broker.trades(symbol, None))
            fills += len(new)
        result = {"settled": settled, "rejected": rejected, "learned": learned, "fills": fills, "open": len(open_now)}
        result |= await self.lists.reconcile()
        result["brackets"] = await self.brackets.reconcile()
        if any(v for k, v in result.items() if k != "open"):
            log.info("reconciled", **result)
        return result
