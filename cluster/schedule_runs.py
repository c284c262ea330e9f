"""A cluster's schedule runs: each scheduled time's order recorded as an intent for the account's
order leader, together with the schedule's progress, in one PostgreSQL transaction.

:class:`IntentRuns` is the :class:`~brokers.schedules.service.ScheduleRuns` of a cluster.  The
schedules live in PostgreSQL (brokers/schedules/pg_store.py): fronts create, list and cancel them;
the holder of the order lease fires them (daemon/leader/schedules.py) with the single node's
misfire policy.  A run records the order — client order id ``cg-<schedule id>-<scheduled time>``,
as on a single node — and moves the schedule's progress in the same transaction, and only if the
progress moved (:meth:`PgScheduleStore.settle_in`): a scheduled time is run once whichever leader
fires it, and its order recorded once (the id is also unique).  The leader then sends the intent
like any other (cluster/order_leader.py): the guard rails and the halt switch are applied there, at
each run; a refusal is the leader's answer on the intent (``chartgen cluster status`` counts them).

At ``schedule_order`` a front checks the arguments (the single node's checks and messages) and the
order type; the guard rails that need the exchange's rules and prices are applied at each run (a
warning says so), since fronts hold no exchange client.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog

from brokers import (
    BinanceBroker,
    OrderInputError,
    OrderRequest,
    PgScheduleStore,
    ScheduleInputError,
    ScheduleRow,
    check_order_type,
    iso,
    parse_order,
)
from cluster.orders import record_intent_in
from storage import unreachable_as

log = structlog.get_logger(__name__)

CHECKED_AT_EACH_RUN = (
    "the cluster's order leader applies the guard rails and the halt switch to each run's order when it"
    " is due; a refused run is not retried (the next scheduled time is the next attempt)"
)


class IntentRuns:
    """Schedule runs for ``account``'s order leader (see the module docstring)."""

    def __init__(self, store: PgScheduleStore, account: str) -> None:
        self.store = store
        self.account = account

    async def check(self, fields: dict[str, Any]) -> list[str]:
        try:
            check_order_type(BinanceBroker, fields["type"])  # what a cluster's leader sends (FencedSender)
        except OrderInputError as exc:
            raise ScheduleInputError(str(exc)) from None
        return [CHECKED_AT_EACH_RUN]

    async def run(self, row: ScheduleRow, due: datetime, cid: str, ends: bool, now: float) -> tuple[str, str]:
        head = f"id={row.id} due={iso(due)} order={cid}"
        try:
            req = OrderRequest(**{**parse_order(row.order_args), "client_order_id": cid, "owner": row.owner})
        except OrderInputError as exc:  # stored arguments this code no longer takes: the run is refused
            await self.store.settle(row.id, due.timestamp(), ran=True, finished=ends, now=now)
            return "refused", f"SCHEDULE-REFUSED {head} reason={exc}"
        with unreachable_as("schedule run not recorded: fired again by the misfire policy", self.store.db.where):
            async with self.store.db.transaction() as conn:
                moved = await self.store.settle_in(conn, row.id, due.timestamp(), ran=True, finished=ends, now=now)
                if moved:
                    await record_intent_in(conn, self.account, req, if_absent=True)
        if not moved:
            return "run", f"SCHEDULE-RUN {head} outcome=already run (not recorded again)"
        return "run", f"SCHEDULE-RUN {head} recorded for the order leader of {self.account}"
