"""The guard rails and the halt switch on the cluster's order path, applied by the order leader.

A cluster front records an order intent without judging it; the account's order leader — the one
process that sends for the account — admits each intent it claimed, immediately before signing it:

1. steps 1-6 of the single node's guard (:class:`brokers.orders.checks.OrderChecks`: allow-list,
   listing, filters, a reference price from the venue's ticker, the per-order limit), with the
   single node's messages;
2. then, in one transaction fenced by the leader's lease: the halt switch (cluster/halt.py, read
   ``FOR SHARE``), the intent's principal — refused while suspended by the operator or revoked
   (brokers/pg_suspensions.py, also ``FOR SHARE``) — and the daily limit — the values of the
   account's intents admitted in the last 24 hours and not rejected, plus this one — and the
   intent's value recorded.

Because one leader sends at a time and each admission is fenced, concurrent orders from any number
of fronts are admitted one after the other and cannot all pass a limit only one fits under.  Every
step fails closed: a price, a rule or a row that cannot be read refuses the order (nothing sent).

The daily limit counts an order's value at admission for 24 hours, whatever becomes of it after
(a single node counts a cancelled order's executed part only: the cluster does not follow fills
yet), so the cluster's count is never below the single node's for the same orders.

:func:`cancel_open_orders` carries out a cancel-open request of the halt switch with the leader's
broker (brokers/halt_switch.py's procedure; the orders are the exchange's, nothing local records them),
scoped to the requesting principals' orders when a ``trade`` token asked (cluster/cancels.py's
:class:`~cluster.cancels.IntentOwnership`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import asyncpg

from brokers import (
    EVERYONE,
    Broker,
    BrokerError,
    CancelOutcome,
    Code,
    ExchangeOrder,
    ListRequest,
    OrderChecks,
    OrderInputError,
    OrderRequest,
    PrincipalStopped,
    RateLimitedError,
    Scope,
    cancel_open,
    check_principal_in,
    daily_limit_refusal,
    legs_of,
    refusal_code,
)
from cluster.halt import ClusterHalted, check_not_halted_in
from cluster.lease import Lease

USED_SQL = (
    "SELECT COALESCE(SUM(notional), 0) FROM cluster_order_intents WHERE account = $1 AND notional IS NOT NULL"
    " AND state <> 'rejected' AND claimed_at > clock_timestamp() - interval '1 day'"
)


class Refused(Exception):
    """The intent is refused by a guard rail or the halt switch (the message is the answer; ``code``
    the agent tools' refusal code, :func:`brokers.trade_simulation.refusal_code`)."""

    def __init__(self, message: str, code: Code) -> None:
        super().__init__(message)
        self.code: Code = code


async def check(checks: OrderChecks, req: OrderRequest) -> Decimal:
    """Steps 1-6; the order's value, or :class:`Refused` with the single node's message."""
    with _refusals():
        return (await checks.check(req)).notional


async def check_list(checks: OrderChecks, req: ListRequest) -> Decimal:
    """Steps 1-6 on every leg of an order list (one reference price); the value the daily limit
    counts — the larger exit leg, plus the working order of an OTOCO — as a single node's guard
    counts it (brokers/orders/guard.py ``admit_list``); or :class:`Refused`."""
    legs = legs_of(req)
    with _refusals():
        _, _, values = await checks.check_legs(req.symbol, [leg for leg, _ in legs])
    value = dict(zip((role for _, role in legs), values, strict=True))
    return max(value["take_profit"], value["stop"]) + value.get("working", Decimal(0))


async def check_bracket(checks: OrderChecks, entry: OrderRequest, exit_oco: ListRequest) -> Decimal:
    """Steps 1-6 on an entry and both legs of the exit OCO placed once it fills (one reference
    price); the value counted — the entry plus the larger exit leg, as a single node's guard counts
    a bracket (brokers/orders/guard.py ``admit_bracket``) — or :class:`Refused`."""
    with _refusals():
        _, _, values = await checks.check_legs(entry.symbol, [entry, exit_oco.take_profit, exit_oco.stop])
    return values[0] + max(values[1], values[2])


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The guard's exceptions as :class:`Refused` with the single node's messages."""
    try:
        yield
    except OrderInputError as exc:
        raise Refused(str(exc), refusal_code(exc)) from None
    except RateLimitedError as exc:
        why = f"order refused: the exchange rate-limits the order leader ({exc}); retry later"
        raise Refused(why, "RATE_LIMITED") from None
    except BrokerError as exc:
        why = f"order refused: the exchange's rules or price could not be read ({exc}); retry"
        raise Refused(why, "NETWORK_ERROR") from None


async def admit(
    db_conn: asyncpg.Connection,
    lease: Lease,
    account: str,
    client_order_id: str,
    notional: Decimal,
    daily: Decimal | None,
) -> None:
    """Inside the caller's transaction: fence, halt switch, the intent's principal (suspended or
    revoked: brokers/pg_suspensions.py), daily limit, record the value — or :class:`Refused`
    (nothing recorded); :class:`cluster.lease.LeaseLost` when fenced out."""
    await lease.fence(db_conn)
    try:
        await check_not_halted_in(db_conn, account)
        owner = await db_conn.fetchval(
            "SELECT owner FROM cluster_order_intents WHERE client_order_id = $1", client_order_id
        )
        await check_principal_in(db_conn, owner)
    except (ClusterHalted, PrincipalStopped) as exc:
        raise Refused(str(exc), "RISK_LIMIT_EXCEEDED") from None
    if daily is not None:
        used = Decimal(await db_conn.fetchval(USED_SQL, account))
        if used + notional > daily:
            raise Refused(str(daily_limit_refusal(notional, used, daily)), "RISK_LIMIT_EXCEEDED")
    await db_conn.execute(
        "UPDATE cluster_order_intents SET notional = $2 WHERE client_order_id = $1 AND sender_token = $3"
        " AND state = 'sending'",
        client_order_id,
        notional,
        lease.token,
    )


class _ExchangeOnly:
    """cancel_open's target when no local store records the cancelled orders."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def on_update(self, update: ExchangeOrder) -> Any:
        return None

    def sends_in_flight(self) -> bool:
        return False  # the order leader sends in its own round, never while it cancels


async def cancel_open_orders(broker: Broker, scope: Scope = EVERYONE) -> CancelOutcome:
    """Cancel the open order lists and orders of the account that ``scope`` covers (every one, or
    those its principals own: brokers/halt_switch.py)."""
    return await cancel_open(_ExchangeOnly(broker), scope=scope)
