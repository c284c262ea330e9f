"""Brackets: place_order's ``bracket`` — an OCO exit (opposite side, same quantity) attached to an entry.

Owns the bracket lifecycle.  Where the venue has OTOCO and the entry is LIMIT/LIMIT_MAKER the
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

The daemon's OCO sells (buys back) what the entry acquired (:func:`exit_quantity`, also the
cluster's rule in cluster/bracket_exits.py): the entry's executed quantity, less a commission the
exchange took in the base asset (Binance without BNB), never more than the bracket's planned
quantity, rounded down to the LOT_SIZE step — else the exit would be refused for an insufficient
balance.  Nothing left after that: no exit (``void``).  An OTOCO's exit quantity is fixed when it
is placed (the entry's quantity): with base-asset fees it needs the fee paid in another asset.
"""

from __future__ import annotations

import hashlib
import math
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import structlog

from brokers.models import (
    TERMINAL,
    BrokerError,
    ListRequest,
    OrderRejected,
    OrderRequest,
    RateLimitedError,
    state_name,
)
from brokers.orders.args import OrderInputError
from brokers.orders.list_store import ListRow
from brokers.orders.lists import OrderLists, check_order_type, list_kinds, oco_request
from brokers.orders.views import order_details

if TYPE_CHECKING:
    from brokers.orders.service import OrderService
    from brokers.orders.store import OrderRow

log = structlog.get_logger(__name__)


def bracket_ids(entry_client_id: str) -> tuple[str, str, str]:
    """The exit OCO's list id and its take-profit and stop order ids, derived from the entry's id."""
    base = "bk-" + hashlib.sha256(entry_client_id.encode()).hexdigest()[:24]
    return f"{base}-L", f"{base}-tp", f"{base}-sl"


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


def exit_quantity(planned: Decimal, *, entry_side: str, executed: Decimal, base_fee: Decimal, step: Decimal) -> Decimal:
    """What a bracket's exit OCO trades for an entry that is done: what the entry acquired — its
    ``executed`` quantity, less ``base_fee`` (commission taken in the base asset) for a BUY entry —
    never more than ``planned``, rounded down to the LOT_SIZE ``step``; 0 when nothing is left to exit.

    >>> exit_quantity(Decimal("1"), entry_side="BUY", executed=Decimal("0.4"), base_fee=Decimal("0.0004"),
    ...               step=Decimal("0.001"))
    Decimal('0.399')
    """
    held = executed - base_fee if entry_side == "BUY" else executed
    qty = min(planned, held)
    if step > 0:
        qty = (qty // step) * step
    return qty if qty > 0 else Decimal(0)


def _from_row(row: ListRow, quantity: Decimal | None = None) -> ListRequest:
    assert row.side is not None and row.quantity is not None
    assert row.take_profit_price is not None and row.stop_price is not None and row.entry_client_id is not None
    _list, tp_id, sl_id = bracket_ids(row.entry_client_id)
    return oco_request(
        symbol=row.symbol, side=row.side, quantity=quantity or row.quantity, take_profit=row.take_profit_price,
        stop=row.stop_price, stop_limit=row.stop_limit_price, list_client_id=row.list_client_id,
        ids=(tp_id, sl_id), owner=row.owner,
    )  # fmt: skip


class NotSizedYet(Exception):
    """A bracket's exit cannot be sized now (its entry's trades or the symbol's rules are missing)."""


class Brackets:
    """The bracket keeper of one order service."""

    def __init__(self, service: OrderService, lists: OrderLists) -> None:
        self.svc = service
        self.lists = lists
        self._not_before: dict[str, float] = {}
        """Brackets an order-rate refusal sent back to waiting: list id → the service-clock time (unix s)
        before which they are not claimed again (in memory: a restart retries at the next reconciliation)."""

    async def place(self, entry: OrderRequest, bracket: dict[str, Decimal | None]) -> dict[str, Any]:
        """place_order with a bracket: OTOCO where the venue has it for this entry, else entry + daemon OCO."""
        kinds = list_kinds(self.svc.broker)
        if "OTOCO" in kinds and entry.type in ("LIMIT", "LIMIT_MAKER"):
            req = exit_request(entry, bracket, working=True)
            await self.svc.guard.admit_list(req)
            out = await self.lists.send(req)
            return {**(await self._entry_view(entry.client_order_id)), "bracket": out}
        self.lists.require("OCO")
        check_order_type(self.svc.broker, entry.type)
        self.svc.reserve(entry.client_order_id)  # reconciliation must not touch it before it is sent
        try:
            admitted, plan = await self.svc.guard.admit_bracket(entry, exit_request(entry, bracket, working=False))
        except BaseException:
            self.svc.release(entry.client_order_id)
            raise
        self.svc.note_assets(entry.symbol, admitted.rules.base_asset, admitted.rules.quote_asset)
        out = await self.svc.send_recorded(entry)
        row = await self.lists.store.get(plan.list_client_id)
        view: dict[str, Any] = {"list_id": plan.list_client_id, "kind": "OCO", "state": row and row.bracket_state}
        if row is not None and row.bracket_state in ("claimed", "placed"):
            view = {**(await self.lists.describe(plan.list_client_id)), "state": row.bracket_state}
        retry_at = self._not_before.get(plan.list_client_id)
        if row is not None and row.bracket_state == "waiting" and retry_at is not None:
            view["note"] = (
                "the exchange's order rate limit refused the exit OCO (nothing was placed); it is placed "
                f"after {_iso(retry_at)}, at the next reconciliation"
            )
        return {**out, "bracket": view}

    async def _entry_view(self, client_order_id: str) -> dict[str, Any]:
        row = await self.svc.store.get(client_order_id)
        if row is None:
            return {"order_id": client_order_id, "status": "Pending"}
        return {"order_id": row.client_order_id, "status": state_name(row.status), **order_details(row)}

    async def after_update(self, row: OrderRow, before: str | None) -> None:
        """An order moved: if it is the entry of a waiting bracket, place the OCO (filled) or void it."""
        if row.status not in TERMINAL or before == row.status:
            return
        bracket = await self.lists.store.bracket_of(row.client_order_id)
        if bracket is None or bracket.bracket_state != "waiting":
            return
        if row.executed_qty > 0:  # FILLED, or done after a partial fill: exit what filled
            await self._place(bracket)
        else:
            await self._void(bracket, f"its entry ended {row.status} with nothing filled")

    async def _void(self, bracket: ListRow, why: str) -> None:
        await self.lists.store.set_state(bracket.list_client_id, self.svc.now(), status="VOID", bracket_state="void")
        log.info("bracket_void", entry=bracket.entry_client_id, why=why)

    async def _request(self, bracket: ListRow) -> ListRequest | None:
        """The exit OCO for what the entry acquired (:func:`exit_quantity`); None when nothing is left.

        Raises NotSizedYet when the symbol's rules cannot be read or the entry's stored fills do not
        add up to its executed quantity yet (reconciliation fetches the missing trades, then retries)."""
        assert bracket.quantity is not None and bracket.entry_client_id is not None
        entry = await self.svc.store.get(bracket.entry_client_id)
        if entry is None:
            return _from_row(bracket)
        try:
            rules = await self.svc.broker.rules(bracket.symbol)
        except BrokerError as exc:
            raise NotSizedYet(f"the rules of {bracket.symbol} cannot be read: {exc}") from exc
        fills = [f for f in await self.svc.store.fills(self.svc.broker.name, bracket.symbol)
                 if f.client_order_id == entry.client_order_id]  # fmt: skip
        if rules is None or sum((f.quantity for f in fills), Decimal(0)) < entry.executed_qty:
            raise NotSizedYet(f"the trades of {entry.client_order_id} are not all known yet")
        fee = sum((f.commission for f in fills if f.commission_asset == rules.base_asset), Decimal(0))
        net = exit_quantity(
            bracket.quantity, entry_side=entry.side, executed=entry.executed_qty, base_fee=fee, step=rules.step_size
        )
        return _from_row(bracket, net) if net > 0 else None

    async def _place(self, bracket: ListRow) -> None:
        retry_at = self._not_before.get(bracket.list_client_id)
        if retry_at is not None and self.svc.now() < retry_at:
            return  # refused for the order rate: it stays waiting until Retry-After has passed
        try:
            req = await self._request(bracket)
        except NotSizedYet as exc:  # it stays waiting: reconciliation sizes it once the trades are in
            log.warning("bracket_not_sized", list_client_id=bracket.list_client_id, why=str(exc))
            return
        if req is None:
            await self._void(bracket, "its entry filled less than one LOT_SIZE step after fees")
            return
        try:
            claimed = await self.lists.store.claim_bracket(self.svc.broker.name, req, self.svc.now())
        except OrderInputError as exc:  # trading halted: it stays waiting, reconciliation places it later
            log.warning("bracket_not_claimed", list_client_id=req.list_client_id, error=str(exc))
            return
        if not claimed:
            return  # another caller claimed it, or the entry is not filled
        self._not_before.pop(req.list_client_id, None)
        await self._send(req)

    async def _send(self, req: ListRequest) -> None:
        try:
            await self.lists.send(req, rearm_rate_limited=True)
        except (OrderRejected, RateLimitedError) as exc:
            row = await self.lists.store.get(req.list_client_id)
            if isinstance(exc, RateLimitedError) and row is not None and row.bracket_state == "waiting":
                await self._rate_limited(req, exc)
                return
            log.error("bracket_refused", list_client_id=req.list_client_id, error=str(exc))
            await self.lists.store.set_state(req.list_client_id, self.svc.now(), bracket_state="rejected")
            await self.svc.write_audit([f"{self.svc.stamp()} BRACKET REFUSED list={req.list_client_id}: {exc}"])
            return
        except (BrokerError, OrderInputError) as exc:
            log.warning("bracket_send_failed", list_client_id=req.list_client_id, error=str(exc))
            return  # stays claimed: reconciliation looks it up by client id
        row = await self.lists.store.get(req.list_client_id)
        if row is not None and row.status != "PENDING":
            await self.lists.store.set_state(req.list_client_id, self.svc.now(), bracket_state="placed")

    async def _rate_limited(self, req: ListRequest, exc: RateLimitedError) -> None:
        """The send was refused for the order rate and the bracket is waiting again: not before Retry-After."""
        retry_at = self.svc.now() + exc.retry_after_s
        self._not_before[req.list_client_id] = retry_at
        log.warning(
            "bracket_exit_rate_limited", list_client_id=req.list_client_id, retry_at=_iso(retry_at),
            retry_after_s=exc.retry_after_s, error=str(exc),
        )  # fmt: skip
        await self.svc.write_audit(
            [f"{self.svc.stamp()} BRACKET REFUSED list={req.list_client_id}: {exc}; retried after {_iso(retry_at)}"]
        )

    async def reconcile(self) -> int:
        """Waiting brackets whose entry has finished; claimed ones whose send's outcome is not known."""
        done = 0
        name = self.svc.broker.name
        for bracket in await self.lists.store.with_state(name, "waiting", "claimed"):
            if bracket.list_client_id in self.lists._in_flight:
                continue
            if bracket.bracket_state == "waiting":
                if self.svc.now() < self._not_before.get(bracket.list_client_id, 0.0):
                    continue  # refused for the order rate: not before Retry-After
                entry = await self.svc.store.get(bracket.entry_client_id or "")
                if entry is not None and entry.status in TERMINAL:
                    await self.after_update(entry, None)
                    done += 1
                continue
            try:
                found = await self.svc.broker.query_list(bracket.list_client_id)  # type: ignore[attr-defined]
            except BrokerError as exc:
                log.warning("bracket_lookup_failed", list_client_id=bracket.list_client_id, error=str(exc))
                continue
            if found is not None:
                await self.lists.on_list_update(found)
                await self.lists.store.set_state(bracket.list_client_id, self.svc.now(), bracket_state="placed")
            else:
                try:
                    req = await self._request(bracket)  # claimed: it was sized, so it sizes again
                except NotSizedYet as exc:
                    log.warning("bracket_not_sized", list_client_id=bracket.list_client_id, why=str(exc))
                    continue
                if req is not None:
                    await self._send(req)
            done += 1
        return done


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.ceil(t)))
