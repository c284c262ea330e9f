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
import functools
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
    OrderRequest,
    state_name,
)
from brokers.orders.args import OrderInputError, parse_entry
from brokers.orders.args import plain_decimal as plain
from brokers.orders.brackets import Brackets, exit_request
from brokers.orders.exits import utc_second
from brokers.orders.guard import EnginePrice, OrderGuard, OrderRefused, SafetyLimits
from brokers.orders.lifecycle import send_once
from brokers.orders.lists import OrderLists, check_order_type, list_kinds
from brokers.orders.settle import settle_intents
from brokers.orders.sqlite_answers import SqliteOrderAnswers
from brokers.orders.sqlite_settle import UNATTENDED_PREFIX, SqliteOrderSettlement
from brokers.orders.store import OrderRow, OrderStore
from brokers.orders.views import order_details, order_listing, request_of
from brokers.positions import positions_from_fills
from brokers.protocol import Broker

log = structlog.get_logger(__name__)

__all__ = ["UNATTENDED_PREFIX", "Actor", "OrderInputError", "OrderRefused", "OrderService", "SafetyLimits"]

AuditWriter = Callable[[Sequence[str]], Awaitable[None]]
MarkPrice = Callable[[str], float | None]
UNRESOLVED_GRACE_S = 30.0
FILL_GAP_WINDOW_S = 7 * 86400.0
"""How far back reconciliation looks for orders whose fills were missed."""


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
        self.brackets = Brackets(
            self.lists, store, broker=broker.name, rules=broker.rules, lookup=broker, clock=clock,
            audit=self.audit_line,
        )  # fmt: skip

    @property
    def limits(self) -> SafetyLimits:
        return self.guard.limits

    async def write_audit(self, lines: Sequence[str]) -> None:
        """Append ``lines`` to the audit log (trades.log) when the service has one."""
        if self._audit is not None and lines:
            await self._audit(lines)

    async def audit_line(self, line: str) -> None:
        """Append one line to the audit log, stamped with the service's clock."""
        await self.write_audit([f"{self.stamp()} {line}"])

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
            return await self.place_bracket(entry, bracket)
        return await self.submit(entry)

    async def place_bracket(self, entry: OrderRequest, bracket: dict[str, Decimal | None]) -> dict[str, Any]:
        """place_order with a bracket: one OTOCO where the venue has it for this entry, else the entry
        and its waiting exit OCO admitted together, the entry sent, and the exit released when the
        entry ends (:mod:`brokers.orders.brackets`)."""
        kinds = list_kinds(self.broker)
        if "OTOCO" in kinds and entry.type in ("LIMIT", "LIMIT_MAKER"):
            req = exit_request(entry, bracket, working=True)
            await self.guard.admit_list(req)
            out = await self.lists.send(req)
            return {**(await self._entry_view(entry.client_order_id)), "bracket": out}
        self.lists.require("OCO")
        check_order_type(self.broker, entry.type)
        self.reserve(entry.client_order_id)  # reconciliation must not touch it before it is sent
        try:
            admitted, plan = await self.guard.admit_bracket(entry, exit_request(entry, bracket, working=False))
        except BaseException:
            self.release(entry.client_order_id)
            raise
        self.note_assets(entry.symbol, admitted.rules.base_asset, admitted.rules.quote_asset)
        out = await self.send_recorded(entry)
        row = await self.lists.store.get(plan.list_client_id)
        view: dict[str, Any] = {"list_id": plan.list_client_id, "kind": "OCO", "state": row and row.bracket_state}
        if row is not None and row.bracket_state in ("claimed", "placed"):
            view = {**(await self.lists.describe(plan.list_client_id)), "state": row.bracket_state}
        retry_at = self.brackets.journal.retry_at(plan.list_client_id)
        if row is not None and row.bracket_state == "waiting" and retry_at is not None:
            view["note"] = (
                "the exchange's order rate limit refused the exit OCO (nothing was placed); it is placed "
                f"after {utc_second(retry_at)}, at the next reconciliation"
            )
        return {**out, "bracket": view}

    async def _entry_view(self, client_order_id: str) -> dict[str, Any]:
        row = await self.store.get(client_order_id)
        if row is None:
            return {"order_id": client_order_id, "status": "Pending"}
        return {"order_id": row.client_order_id, "status": state_name(row.status), **order_details(row)}

    def reserve(self, client_order_id: str) -> None:
        """Mark an intent as being sent by this process (reconciliation leaves it alone)."""
        self._in_flight.add(client_order_id)

    def sends_in_flight(self) -> bool:
        """Whether an order admitted here is being sent right now (a halt's cancel-open waits for it)."""
        return bool(self._in_flight)

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
            answers = SqliteOrderAnswers(self.store, clock=self._clock, apply=self.on_update)
            sent = await send_once(
                req.client_order_id, functools.partial(self.broker.place, req), answers, contain_failures=False
            )
            if sent.outcome == "refused":
                assert sent.error is not None
                raise sent.error
            if sent.outcome == "unknown":
                update = await self._lookup_after_unknown(req)
                if update is None:
                    return {"order_id": req.client_order_id, "status": "Pending", "exchange_status": "UNKNOWN",
                            "note": "the exchange's answer was lost; the order will be reconciled"}  # fmt: skip
                await self.on_update(update)
            row = await self.store.get(req.client_order_id)
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

    async def _send_unattended(self, row: OrderRow) -> None:
        """Send an unattended intent found unsent at reconciliation (brokers/orders/sqlite_settle.py), once."""
        try:
            await self.send_recorded(request_of(row))
        except BrokerError as exc:
            log.warning("reconcile_send_failed", client_order_id=row.client_order_id, error=str(exc))

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
        learned = 0
        last_ids = await self.store.last_trade_ids(self.broker.name)  # before this pass stores any fill
        open_now = {o.client_order_id: o for o in await self.broker.open_orders()}
        for cid, order in open_now.items():
            if await self.store.get(cid) is None:
                learned += 1
            await self.on_update(order)
        settlement = SqliteOrderSettlement(
            self.store, self.broker.name, now=now, grace_s=self.unresolved_grace_s, skip=open_now.keys(),
            in_flight=self._in_flight.__contains__, apply=self.on_update, send_unattended=self._send_unattended,
        )  # fmt: skip
        outcomes = await settle_intents(settlement, self.broker)
        settled, rejected = outcomes["settled"], outcomes["rejected"]
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
