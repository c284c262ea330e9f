"""The order path of alert actions: :class:`alerts.actions.ActionExecutor` over the order service.

Lives in ``daemon`` because it joins two packages that must not import each other (alerts and
brokers, design.md §1).  Every step is the order service's own: ``parse_order`` for the
arguments, :meth:`OrderGuard.check` for the allow-list, filters, reference price and the
per-order limit, :meth:`OrderGuard.admit_checked_in` for the halt switch, the daily limit and
the intent (inside the firing transaction), :meth:`OrderService.send_recorded` to send it once.
"""

from __future__ import annotations

import sqlite3
import time
from decimal import Decimal
from typing import Any

import structlog

from alerts import ActionRefused, action_client_id
from brokers import (
    Admitted,
    BrokerError,
    OrderInputError,
    OrderRejected,
    OrderRequest,
    OrderService,
    RateLimitedError,
    parse_order,
    state_name,
)
from brokers import plain_decimal as plain

log = structlog.get_logger(__name__)


def _outcome(client_order_id: str, status: str, **extra: Any) -> dict[str, Any]:
    return {"type": "place_order", "order_id": client_order_id, "status": status, **extra}


class OrderActionExecutor:
    """Alert actions through one :class:`OrderService`."""

    def __init__(self, orders: OrderService, *, balance_ttl_s: float = 10.0) -> None:
        self.orders = orders
        self._balance_ttl_s = balance_ttl_s
        self._balances: tuple[float, dict[str, Decimal]] | None = None

    async def _free(self) -> dict[str, Decimal]:
        """Free balances, reused for ``balance_ttl_s``: the account request weighs 20 on Binance, and
        the check is only a warning, so setting 300 action alerts must not cost 6,000 weight."""
        now = time.monotonic()
        if self._balances is None or now - self._balances[0] > self._balance_ttl_s:
            free = {b.asset: b.free for b in await self.orders.broker.balances()}
            self._balances = (now, free)
        return self._balances[1]

    def _request(self, principal: str, args: dict[str, Any], client_order_id: str) -> OrderRequest:
        fields = parse_order({**args, "client_order_id": client_order_id})
        return OrderRequest(**fields, owner=principal)

    async def validate(self, principal: str, args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        if "client_order_id" in args:
            raise OrderInputError("client_order_id is derived from the alert id; omit it")
        cleaned = {k: v for k, v in args.items() if v is not None}
        cleaned["symbol"] = str(cleaned.get("symbol", "")).strip().upper()
        req = self._request(principal, cleaned, action_client_id("00000000-0000-4000-8000-000000000000"))
        try:
            checked = await self.orders.guard.check(req)
        except RateLimitedError as exc:
            raise OrderInputError(f"cannot check the order now: {exc}") from None
        except BrokerError as exc:
            raise OrderInputError(f"cannot check the order against the exchange: {exc}") from None
        return cleaned, await self._balance_warnings(checked)

    async def _balance_warnings(self, checked: Admitted) -> list[str]:
        """A warning (not a refusal) when the account could not pay for the order right now."""
        req, rules = checked.request, checked.rules
        try:
            free = await self._free()
        except BrokerError as exc:
            return [f"the balance could not be checked ({exc}); it is checked again when the alert fires"]
        if req.side == "BUY":
            asset, need = rules.quote_asset, checked.notional
        else:
            asset, need = rules.base_asset, req.quantity if req.quantity is not None else Decimal(0)
        have = free.get(asset, Decimal(0))
        if have < need:
            return [
                f"balance short right now: the order needs about {plain(need)} {asset}, {plain(have)} is free; "
                "the alert is set, and the order is refused when it fires if the balance is still short"
            ]
        return []

    async def prepare(self, principal: str, alert_id: str, args: dict[str, Any]) -> Admitted:
        try:
            req = self._request(principal, args, action_client_id(alert_id))
            return await self.orders.guard.check(req)
        except (OrderInputError, BrokerError) as exc:
            raise ActionRefused(str(exc)) from None

    def reserve(self, token: Admitted) -> None:
        self.orders.reserve(token.request.client_order_id)

    def release(self, token: Admitted) -> None:
        self.orders.release(token.request.client_order_id)

    def commit_in(self, conn: sqlite3.Connection, token: Admitted) -> None:
        try:
            self.orders.guard.admit_checked_in(conn, token)
        except OrderInputError as exc:
            raise ActionRefused(str(exc)) from None

    async def send(self, token: Admitted) -> dict[str, Any]:
        req = token.request
        cid = req.client_order_id
        try:
            result = await self.orders.send_recorded(req)
        except (OrderRejected, RateLimitedError) as exc:
            return _outcome(cid, "Rejected", exchange_status="REJECTED", reason=str(exc))
        except BrokerError as exc:
            # Not placed (a refusal that is not an order rejection): record it, never resend blindly.
            await self.orders.store.set_status(cid, "REJECTED", self.orders.now(), str(exc))
            return _outcome(cid, "Rejected", exchange_status="REJECTED", reason=str(exc))
        finally:
            self.orders.release(cid)
        extra = {k: result[k] for k in ("exchange_status", "filled_quantity", "fill_price", "note") if k in result}
        return _outcome(cid, str(result["status"]), **extra)

    async def outcome(self, client_order_id: str) -> dict[str, Any] | None:
        row = await self.orders.store.get(client_order_id)
        if row is None:
            return {"type": "place_order", "order_id": None, "status": "Refused", "reason": "no order was recorded"}
        if row.status in ("PENDING_SUBMIT", "UNKNOWN"):
            return None
        extra: dict[str, Any] = {
            "exchange_status": row.status,
            "filled_quantity": float(row.executed_qty),
            "fill_price": None if row.avg_price is None else float(row.avg_price),
        }
        if row.reject_reason:
            extra["reason"] = row.reject_reason
        return _outcome(client_order_id, state_name(row.status), **extra)
