"""Alert actions on a cluster: :class:`alerts.actions.ActionExecutor` over the cluster's order intents.

A single node's executor (daemon/parts/alert_actions.py) runs the guard rails itself and sends the order;
on a cluster only the order leader of the account holds the keys and judges orders
(cluster/order_leader.py, cluster/leader_admission.py), so this executor, used by fronts (to check
an action at ``set_alert``) and by workers (to run it when the alert fires), only:

1. **validate** (front, ``set_alert``): the single node's argument checks and messages
   (brokers/orders/args.py), the order types a cluster's leader sends; the guard rails are applied
   when it fires (a warning says so);
2. **commit_in** (worker, inside the firing transaction on PostgreSQL): records the intent, keyed by
   the client order id derived from the alert id (:func:`alerts.actions.action_client_id`), for the
   leader — the intent exists exactly when the alert fired, so the order can be sent at most once;
3. **send** (worker, after the commit): waits for the leader's answer — the same bounds as a
   front's place_order: no leader took it within ``queue_wait_s`` → withdrawn and reported refused
   (an unattended order is not sent minutes late), taken but unanswered within ``answer_wait_s`` →
   it stays pending;
4. **outcome** (any worker's periodic settle, after a crash or a long wait): the leader's answer if
   there is one; an intent still queued after ``queue_wait_s`` is withdrawn and refused.

The leader's refusals (guard rails, the halt switch, fail-closed) come back as ``Refused`` with the
leader's words; the exchange's rejections as ``Rejected``.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from alerts import ActionRefused, action_client_id, refused_outcome
from brokers import (
    BinanceBroker,
    OrderInputError,
    OrderRefused,
    OrderRejected,
    OrderRequest,
    check_order_type,
    parse_order,
)
from cluster import Answer, OrderIntents, placed_result, record_intent_in

CHECKED_WHEN_FIRED = (
    "the cluster's order leader applies the guard rails and the halt switch when the alert fires;"
    " a refusal then is reported in the notification's action"
)


class ActionNotAnswered(Exception):
    """The leader took the order but has not answered yet: the outcome stays pending and is settled later."""


def outcome_of(answer: Answer) -> dict[str, Any]:
    """The notification's ``action`` entry for a leader's answer."""
    try:
        result = placed_result(answer)
    except OrderRefused as exc:
        return refused_outcome(str(exc))
    except OrderRejected as exc:
        return {
            "type": "place_order",
            "order_id": answer.client_order_id,
            "status": "Rejected",
            "exchange_status": "REJECTED",
            "reason": str(exc),
        }
    fields = ("exchange_status", "filled_quantity", "fill_price")
    return {"type": "place_order", "order_id": answer.client_order_id, "status": result["status"]} | {
        k: result[k] for k in fields
    }


class ClusterActionExecutor:
    """Alert actions for one exchange account's order leader (see the module docstring)."""

    def __init__(
        self, intents: OrderIntents, account: str, *, queue_wait_s: float = 10.0, answer_wait_s: float = 60.0
    ) -> None:
        self.intents = intents
        self.account = account
        self.queue_wait_s = queue_wait_s
        self.answer_wait_s = answer_wait_s

    def _request(self, principal: str, args: dict[str, Any], client_order_id: str) -> OrderRequest:
        fields = parse_order({**args, "client_order_id": client_order_id})
        req = OrderRequest(**fields, owner=principal)
        check_order_type(BinanceBroker, req.type)  # what a cluster's leader sends (FencedSender)
        return req

    async def validate(self, principal: str, args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        if "client_order_id" in args:
            raise OrderInputError("client_order_id is derived from the alert id; omit it")
        cleaned = {k: v for k, v in args.items() if v is not None}
        cleaned["symbol"] = str(cleaned.get("symbol", "")).strip().upper()
        self._request(principal, cleaned, action_client_id("00000000-0000-4000-8000-000000000000"))
        return cleaned, [CHECKED_WHEN_FIRED]

    async def prepare(self, principal: str, alert_id: str, args: dict[str, Any]) -> OrderRequest:
        try:
            return self._request(principal, args, action_client_id(alert_id))
        except OrderInputError as exc:
            raise ActionRefused(str(exc)) from None

    def reserve(self, token: OrderRequest) -> None:
        """Nothing to reserve: the leader is the only sender (its claim is the reservation)."""

    def release(self, token: OrderRequest) -> None:
        """See :meth:`reserve`."""

    async def commit_in(self, conn: asyncpg.Connection, token: OrderRequest) -> None:
        await record_intent_in(conn, self.account, token, if_absent=True)

    def _not_taken(self) -> str:
        return (
            f"not sent — no order leader of account {self.account!r} took it within {self.queue_wait_s:g} s"
            " (chartgen cluster status shows the leader)"
        )

    async def send(self, token: OrderRequest) -> dict[str, Any]:
        cid = token.client_order_id
        answer = await self.intents.wait_answer(cid, self.queue_wait_s)
        if answer is None:
            why = self._not_taken()
            if await self.intents.withdraw(cid, why):
                return refused_outcome(why)
            answer = await self.intents.wait_answer(cid, self.answer_wait_s)
        if answer is None:
            raise ActionNotAnswered(f"order {cid}: the leader took it and has not answered yet; settled later")
        return outcome_of(answer)

    async def outcome(self, client_order_id: str) -> dict[str, Any] | None:
        answer = await self.intents.answer(client_order_id)
        if answer is not None:
            return outcome_of(answer)
        why = self._not_taken()
        if await self.intents.withdraw(client_order_id, why, queued_for_s=self.queue_wait_s):
            return refused_outcome(why)
        if not await self.intents.recorded(client_order_id):
            return refused_outcome("no order was recorded")
        return None
