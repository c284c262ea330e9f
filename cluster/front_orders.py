"""``place_order`` at a cluster front: record the intent, wait for the order leader's answer.

A front holds no exchange keys and judges no order: it parses the arguments at the tool edge
(brokers/orders/args.py, the single node's checks and messages), records the intent in PostgreSQL
(cluster/orders.py; a used client order id is refused there), and waits for the answer of the
account's order leader, which applies the guard rails and the halt switch and sends it
(cluster/order_leader.py, cluster/leader_admission.py).  The answer has the single node's shape.

Waiting is bounded twice:

- **No leader took it** within ``queue_wait_s``: the front withdraws the intent — one statement
  that cannot cross the leader's claim — and answers that nothing was sent.  A client never has an
  order that sits queued and goes out minutes later.
- **A leader took it** but has not answered within ``answer_wait_s`` (it died mid-send and its
  successor settles the intent after the exchange's ``recvWindow``): the answer is ``Pending`` with
  the client order id; the outcome is recorded when settled (never sent twice).

``place_oco`` records an order-list intent the same way (cluster/list_intents.py).  ``cancel_order``
records a cancel request the leader carries out (cluster/cancels.py).  A bracket on a limit entry goes
out as one Binance OTOCO list intent (the exit works once the entry fills), as on a single node; on a
market entry the entry's intent and its exit OCO's are recorded together and the leader places the
exit once the entry filled (cluster/bracket_exits.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

from brokers import (
    UNATTENDED_PREFIX,
    Actor,
    BinanceBroker,
    OrderInputError,
    OrderRefused,
    OrderRejected,
    OrderRequest,
    check_order_type,
    exit_request,
    new_oco,
    state_name,
)
from cluster import bracket_exits, list_intents
from cluster.cancels import request_cancel
from cluster.orders import Answer, OrderIntents
from storage import StorageUnavailable


class FrontOrders:
    """The front's order placer (``place_order``) for one exchange account's leader."""

    def __init__(
        self,
        intents: OrderIntents,
        account: str,
        *,
        queue_wait_s: float = 10.0,
        answer_wait_s: float = 30.0,
        last_price: Callable[[str], Awaitable[Decimal | None]] | None = None,
    ) -> None:
        self.intents = intents
        self.account = account
        self.queue_wait_s = queue_wait_s
        self.answer_wait_s = answer_wait_s
        self.last_price = last_price
        """The market price place_oco's prices are checked against (the venue's public ticker)."""

    async def place_parsed(
        self, order: OrderRequest, bracket: dict[str, Decimal | None] | None, *, owner: str | None
    ) -> dict[str, Any]:
        """The place_order tool's operation: raises OrderInputError (refused, nothing sent) or
        OrderRejected (the exchange refused it); otherwise the single node's answer."""
        if order.client_order_id.startswith(UNATTENDED_PREFIX):
            raise OrderInputError(
                f"client_order_id may not start with {UNATTENDED_PREFIX!r} (reserved for alert actions and "
                "schedules); choose another or omit it"
            )
        check_order_type(BinanceBroker, order.type)  # a cluster leads Binance accounts (FencedSender)
        req = dataclasses.replace(order, owner=owner)
        if bracket is not None and order.type in ("LIMIT", "LIMIT_MAKER"):
            return await self._bracketed(req, bracket)
        cid = req.client_order_id
        exit_oco = None if bracket is None else exit_request(req, bracket, working=False)
        if exit_oco is None:
            submit = self.intents.submit(self.account, req)
        else:  # the exit OCO waits for the entry's fill (cluster/bracket_exits.py)
            submit = bracket_exits.submit_bracket(self.intents, self.account, req, exit_oco)
        answer = await self._answered(cid, submit)
        if answer is None:
            out: dict[str, Any] = {
                "order_id": cid,
                "status": "Pending",
                "exchange_status": "UNKNOWN",
                "note": "the order leader took the order but has not answered yet (a leader change is settling it);"
                " it is never sent twice",
            }
        else:
            out = placed_result(answer)
        if exit_oco is not None:
            filled = answer is not None and answer.order is not None and answer.order.status == "FILLED"
            wait_s = self.answer_wait_s if filled else 0.0
            try:
                out["bracket"] = await bracket_exits.exit_view(self.intents, self.account, exit_oco, wait_s=wait_s)
            except StorageUnavailable as exc:  # the entry's answer stands: never report a sent order as failed
                out["bracket"] = {
                    "list_id": exit_oco.list_client_id,
                    "kind": exit_oco.kind,
                    "state": "unknown",
                    "note": f"the exit's state could not be read ({exc}); get_orders shows it",
                }
        return out

    async def place_parsed_oco(self, p: dict[str, Any], *, owner: str | None) -> dict[str, Any]:
        """The place_oco tool's operation (cluster/list_intents.py): the single node's checks and answer;
        raises OrderInputError (refused, nothing sent) or OrderRejected (the exchange refused it)."""
        last = None if self.last_price is None else await self.last_price(p["symbol"])
        if last is None:
            raise OrderRefused(f"order refused: no market price of {p['symbol']} to check the OCO's prices against")
        req = new_oco(p, last, owner)
        answer = await self._answered(req.list_client_id, list_intents.submit_list(self.intents, self.account, req))
        if answer is None:
            return {
                "list_id": req.list_client_id,
                "kind": req.kind,
                "list_status": "PENDING",
                "legs": [],
                "note": "the order leader took the order list but has not answered yet (a leader change is settling"
                " it); it is never sent twice",
            }
        if answer.state == "rejected":
            raise OrderRefused(answer.error or "rejected") if answer.refused else OrderRejected(answer.error or "")
        return list_intents.list_result(answer, req)

    async def _bracketed(self, entry: OrderRequest, bracket: dict[str, Decimal | None]) -> dict[str, Any]:
        """A limit entry with its bracket: one OTOCO list intent (the entry working, the exit OCO pending
        until the entry fills), the single node's answer: the entry's view with the list as ``bracket``."""
        req = exit_request(entry, bracket, working=True)
        cid = entry.client_order_id
        answer = await self._answered(req.list_client_id, list_intents.submit_list(self.intents, self.account, req))
        if answer is None:
            return {
                "order_id": cid,
                "status": "Pending",
                "exchange_status": "UNKNOWN",
                "bracket": {"list_id": req.list_client_id, "kind": req.kind, "list_status": "PENDING", "legs": []},
                "note": "the order leader took the order but has not answered yet (a leader change is settling it);"
                " it is never sent twice",
            }
        if answer.state == "rejected":
            raise OrderRefused(answer.error or "rejected") if answer.refused else OrderRejected(answer.error or "")
        out = list_intents.list_result(answer, req)
        seen = next(
            (o for o in (answer.order_list.orders if answer.order_list else ()) if o.client_order_id == cid), None
        )
        status = seen.status if seen is not None and seen.status else "NEW"
        avg = seen.cumulative_quote / seen.executed_qty if seen is not None and seen.executed_qty > 0 else None
        entry_view = {
            "order_id": cid,
            "status": state_name(status),
            "client_order_id": cid,
            "exchange_status": status,
            "filled_quantity": float(seen.executed_qty) if seen is not None else 0.0,
            "fill_price": None if avg is None else float(avg),
        }
        return {**entry_view, "bracket": out}

    async def _answered(self, cid: str, submit: Awaitable[None]) -> Answer | None:
        """Record the intent (``submit``) and wait for the leader's answer: withdrawn (refused) when no
        leader took it within ``queue_wait_s``; None when a leader took it but has not answered."""
        try:
            await submit
        except ValueError as exc:
            raise OrderRefused(str(exc)) from None
        answer = await self.intents.wait_answer(cid, self.queue_wait_s)
        if answer is None:
            why = (
                f"order refused: not sent — no order leader of account {self.account!r} took it within"
                f" {self.queue_wait_s:g} s (chartgen cluster status shows the leader); place it again once one runs"
            )
            if await self.intents.withdraw(cid, why):
                raise OrderRefused(why)
            answer = await self.intents.wait_answer(cid, self.answer_wait_s)
        return answer

    async def cancel_order(self, order_id: Any, *, actor: Actor) -> dict[str, Any]:
        """The cancel_order tool's operation (cluster/cancels.py)."""
        return await request_cancel(self.intents, self.account, order_id, actor=actor, answer_wait_s=self.answer_wait_s)


def placed_result(answer: Answer) -> dict[str, Any]:
    """place_order's answer for a leader's answer: the single node's shape; a rejection raises
    OrderRefused (our guard rails, nothing sent) or OrderRejected (the exchange refused it)."""
    if answer.state == "rejected":
        text = answer.error or "rejected"
        if answer.refused:
            raise OrderRefused(text)
        raise OrderRejected(text)
    order = answer.order
    assert order is not None
    avg = order.cumulative_quote / order.executed_qty if order.executed_qty > 0 else None
    return {
        "order_id": answer.client_order_id,
        "status": state_name(order.status),
        "client_order_id": answer.client_order_id,
        "exchange_status": order.status,
        "filled_quantity": float(order.executed_qty),
        "fill_price": None if avg is None else float(avg),
    }
