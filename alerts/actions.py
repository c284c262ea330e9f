"""Alert actions: what an alert does besides notifying — today, placing one order.

An alert may carry ``action: {"place_order": {...the place_order arguments...}}``.  The alerts
package owns *when* the action runs and that it runs once; the order path itself (filters,
the operator's limits, the halt switch, recording the intent, sending) belongs to the
brokers package, which this package must not import (design.md §1).  The daemon wires the
two through :class:`ActionExecutor`:

1. at ``set_alert``: :meth:`ActionExecutor.validate` checks the arguments, the symbol, the
   filters and the limits and returns them normalised (plus warnings, e.g. the balance is
   short right now — a warning, not a refusal: it may not be short when the alert fires);
2. when the alert fires: :meth:`ActionExecutor.prepare` runs the guard's checks that need
   I/O (rules, reference price) *before* the firing transaction; inside it,
   :meth:`ActionExecutor.commit_in` checks the daily limit and the halt flag and records the
   intent, whose client order id is derived from the alert id (:func:`action_client_id`), in
   the same SQLite transaction as the firing and the notification;
3. after the commit, :meth:`ActionExecutor.send` sends it once and reports the outcome, which
   replaces the notification's provisional ``action`` entry.  A crash between commit and send
   leaves a recorded intent that the order service's reconciliation finds by its client id on
   the exchange or, if the exchange never received it, sends — never a second order.

A refusal at fire time (limit reached, insufficient balance, trading halted) is recorded in
the notification and in trades.log and is not retried.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Awaitable
from typing import Any, Protocol

ACTION_PREFIX = "cg-a-"
"""Client order ids of alert actions start with this (place_order refuses ``cg-`` ids from callers)."""


class ActionRefused(Exception):
    """The action cannot be carried out now; the message is the reason shown to the client."""


def action_client_id(alert_id: str) -> str:
    """The action's client order id, derived from the alert id: ``cg-a-`` + the id's 16 bytes in base64url.

    27 characters of Binance's allowed set; the same alert always gives the same id, so the
    order can be found on the exchange after a crash and can never be placed twice.
    """
    try:
        raw = uuid.UUID(alert_id).bytes
    except ValueError:
        raw = uuid.uuid5(uuid.NAMESPACE_OID, alert_id).bytes
    return ACTION_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def pending_outcome(client_order_id: str) -> dict[str, Any]:
    """The notification's ``action`` entry between the firing commit and the exchange's answer."""
    return {"type": "place_order", "order_id": client_order_id, "status": "Pending"}


def refused_outcome(reason: str) -> dict[str, Any]:
    return {"type": "place_order", "order_id": None, "status": "Refused", "reason": reason}


class ActionExecutor(Protocol):
    """The order path an alert action runs through (implemented by the daemon over the order service)."""

    async def validate(self, principal: str, args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Check ``args`` (place_order arguments) for ``principal``; returns (normalised args, warnings).

        Raises ValueError with a message naming the field and the fix when they are wrong."""
        ...

    async def prepare(self, principal: str, alert_id: str, args: dict[str, Any]) -> Any:
        """The fire-time checks that need I/O; returns an opaque token for :meth:`commit_in`.

        Raises :class:`ActionRefused` when the order cannot be placed."""
        ...

    def reserve(self, token: Any) -> None:
        """Called before the firing transaction: the intent about to be recorded is being sent by
        this process (reconciliation must not send it too)."""
        ...

    def release(self, token: Any) -> None:
        """Undo :meth:`reserve` (the transaction failed or the alert had already fired)."""
        ...

    def commit_in(self, conn: Any, token: Any) -> Awaitable[None] | None:
        """Inside the firing transaction: daily limit, halt flag, record the intent; raises ActionRefused.

        SQLite's store calls it on its ``sqlite3.Connection`` (a plain function, returning None);
        PostgreSQL's awaits it on its ``asyncpg.Connection`` (a coroutine function)."""
        ...

    async def send(self, token: Any) -> dict[str, Any]:
        """Send the recorded intent once (releases the reservation); returns the outcome entry."""
        ...

    async def outcome(self, client_order_id: str) -> dict[str, Any] | None:
        """The outcome entry of an action's order as the order service knows it now (restart path);
        None while it is still unresolved."""
        ...
