"""Orders in the cluster: any process records an order intent in PostgreSQL; the one order leader
of the exchange account sends it — once, whoever dies when.

An intent (``cluster_order_intents``, keyed by our client order id) moves
``queued`` → ``sending`` → ``placed`` | ``rejected`` (| ``unknown`` → ``placed`` | ``rejected``).
A bracket's exit OCO starts ``waiting`` for its entry's fill and is claimed from there (``sending``),
or ends ``void`` when its entry did not fill (cluster/bracket_exits.py).

- :meth:`OrderIntents.submit` (a front, on ``place_order``) inserts a ``queued`` intent and
  notifies the leader; :meth:`OrderIntents.wait_answer` waits for its answer (``LISTEN`` on
  ``cluster_order_answers``, checked again after listening so no answer is missed).
- :class:`OrderLeader` holds the lease ``orders/<account>`` (cluster/lease.py).  It claims a queued
  intent with ``FOR UPDATE SKIP LOCKED`` in a transaction fenced by its lease, marking it
  ``sending`` with its fencing token; commits; checks its local lease deadline
  (:meth:`Lease.may_act`) and in the same instant reads the exchange's time, and sends the order
  *signed at that time* (:class:`FencedSender`; brokers/binance/signing.py): a leader paused
  between the check and the request leaving sends a request the exchange refuses as stale.  It
  records the exchange's answer.  A leader that lost its lease stops before the next request.
  One intent per claim: a leader that dies leaves at most the one it was sending unanswered.
- **Hand-over.**  A new leader never sends an intent it finds ``sending`` under an older token:
  the dead or paused leader may have sent it.  It waits until no request of the old leader can
  still be accepted by the exchange — the exchange refuses a signed request older than its
  ``recvWindow`` (Binance's rule; the simulator enforces it too), and the old leader sent
  nothing after its local deadline, which ends before the lease's server-side expiry, which
  came before this leader's acquisition — so the sender's ``recvWindow`` plus a margin (clock
  offset error) after taking over, then asks the exchange for the order by client order id: found → ``placed`` with the
  exchange's view; absent → ``rejected`` ("not sent: …, not retried").  An intent whose answer
  was lost (``OutcomeUnknown``) is settled the same way.  So every intent either reached the
  exchange exactly once or is answered with an error; none is sent twice.  Not resending is
  deliberate: an order that waited out a leader's death is seconds old, and the caller decides
  whether it still wants it.

Intents still ``queued`` when a leader dies are simply claimed by the next one.

This module is the intents' table and the front's side; the leader is cluster/order_leader.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import asyncpg
import orjson
import structlog
from pydantic import TypeAdapter

from brokers import ExchangeList, ExchangeOrder, ListRequest, OrderRequest
from storage import Migrations, PostgresDatabase, unreachable_as

log = structlog.get_logger(__name__)

ORDER_MIGRATIONS = Migrations(
    "cluster_orders",
    (
        (
            1,
            """
            CREATE TABLE cluster_order_intents (
                client_order_id TEXT PRIMARY KEY,
                account TEXT NOT NULL,
                owner TEXT,
                request TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('queued', 'sending', 'unknown', 'placed', 'rejected')),
                sender_token BIGINT,
                answer TEXT,
                created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
                claimed_at TIMESTAMPTZ,
                answered_at TIMESTAMPTZ
            );
            CREATE INDEX cluster_order_intents_queued ON cluster_order_intents (account, created_at)
                WHERE state = 'queued';
            CREATE INDEX cluster_order_intents_unsettled ON cluster_order_intents (account)
                WHERE state IN ('sending', 'unknown')
            """,
        ),
        (
            2,
            """
            ALTER TABLE cluster_order_intents ADD COLUMN notional NUMERIC;
            CREATE INDEX cluster_order_intents_counted ON cluster_order_intents (account, claimed_at)
                WHERE notional IS NOT NULL
            """,
        ),
        (
            3,
            """
            CREATE TABLE cluster_order_cancels (
                client_order_id TEXT PRIMARY KEY REFERENCES cluster_order_intents (client_order_id),
                account TEXT NOT NULL,
                requested_by TEXT,
                state TEXT NOT NULL CHECK (state IN ('queued', 'done', 'failed')),
                answer TEXT,
                requested_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
                answered_at TIMESTAMPTZ
            );
            CREATE INDEX cluster_order_cancels_queued ON cluster_order_cancels (account, requested_at)
                WHERE state = 'queued'
            """,
        ),
        (
            4,
            """
            ALTER TABLE cluster_order_intents ADD COLUMN kind TEXT NOT NULL DEFAULT 'order'
                CHECK (kind IN ('order', 'list'));
            CREATE TABLE cluster_list_legs (
                client_order_id TEXT PRIMARY KEY,
                list_client_order_id TEXT NOT NULL REFERENCES cluster_order_intents (client_order_id),
                leg TEXT NOT NULL
            )
            """,
        ),
        (
            5,
            """
            ALTER TABLE cluster_order_intents DROP CONSTRAINT cluster_order_intents_state_check;
            ALTER TABLE cluster_order_intents ADD CONSTRAINT cluster_order_intents_state_check
                CHECK (state IN ('queued', 'sending', 'unknown', 'placed', 'rejected', 'waiting', 'void'));
            ALTER TABLE cluster_order_intents ADD COLUMN entry_client_order_id TEXT
                REFERENCES cluster_order_intents (client_order_id);
            CREATE INDEX cluster_order_intents_waiting ON cluster_order_intents (account, created_at)
                WHERE state = 'waiting';
            CREATE UNIQUE INDEX cluster_order_intents_exit ON cluster_order_intents (entry_client_order_id)
                WHERE entry_client_order_id IS NOT NULL
            """,
        ),
    ),
)

INTENTS_CHANNEL = "cluster_order_intents"
ANSWERS_CHANNEL = "cluster_order_answers"
REQUEST_JSON = TypeAdapter(OrderRequest)
ORDER_JSON = TypeAdapter(ExchangeOrder)
LIST_REQUEST_JSON = TypeAdapter(ListRequest)
LIST_JSON = TypeAdapter(ExchangeList)

T = TypeVar("T")

State = Literal["queued", "sending", "unknown", "placed", "rejected", "waiting", "void"]
"""``waiting`` / ``void``: a bracket's exit before its entry filled / never to be sent (cluster/bracket_exits.py)."""


@dataclass(frozen=True)
class Answer:
    """The outcome of an intent: ``placed`` with the exchange's order, or ``rejected`` with why —
    ``refused`` when our guard rails refused it (the exchange never saw it)."""

    client_order_id: str
    state: State
    order: ExchangeOrder | None
    error: str | None
    refused: bool = False
    code: str | None = None
    """A rejection's refusal code (brokers.trade_simulation.refusal_code), when the leader recorded one."""
    order_list: ExchangeList | None = None
    """A placed order list's view (a list intent: cluster/list_intents.py)."""


def lease_name(account: str) -> str:
    return f"orders/{account}"


def answer_of(row: asyncpg.Record) -> Answer:
    body: dict[str, Any] = orjson.loads(row["answer"]) if row["answer"] else {}
    order = ORDER_JSON.validate_python(body["order"]) if body.get("order") is not None else None
    order_list = LIST_JSON.validate_python(body["list"]) if body.get("list") is not None else None
    return Answer(
        row["client_order_id"],
        row["state"],
        order,
        body.get("error"),
        bool(body.get("refused")),
        body.get("code"),
        order_list,
    )


async def record_intent_in(
    conn: asyncpg.Connection, account: str, req: OrderRequest, *, if_absent: bool = False
) -> None:
    """Inside the caller's transaction: a ``queued`` intent for ``account``'s leader, woken at commit.

    A client order id already recorded raises ``UniqueViolationError``, or with ``if_absent`` is
    left as it is (an alert action's id is derived from its alert: recorded at most once)."""
    conflict = " ON CONFLICT (client_order_id) DO NOTHING" if if_absent else ""
    if not if_absent and await conn.fetchval(
        "SELECT 1 FROM cluster_list_legs WHERE client_order_id = $1", req.client_order_id
    ):  # a leg of an order list (a bracket's entry, say)
        raise ValueError(f"client_order_id {req.client_order_id!r} was already used: choose a new one")
    await conn.execute(
        "INSERT INTO cluster_order_intents (client_order_id, account, owner, request, state)"
        " VALUES ($1, $2, $3, $4, 'queued')" + conflict,
        req.client_order_id,
        account,
        req.owner,
        REQUEST_JSON.dump_json(req).decode(),
    )
    await conn.execute("SELECT pg_notify($1, $2)", INTENTS_CHANNEL, account)


class OrderIntents:
    """The front's side: record intents and wait for their answers.

    One connection listens on ``cluster_order_answers`` for every waiting call (opened at the first
    wait, closed by :meth:`close`; re-opened after PostgreSQL was away): a pooled connection per
    waiting call would let many concurrent ``place_order`` calls take the whole pool and starve
    their own answer checks."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._listener = db.listener(ANSWERS_CHANNEL, self._on_answer)

    async def submit(self, account: str, req: OrderRequest) -> None:
        """Record ``req`` as queued for ``account``'s leader (one transaction, which also wakes it).

        A client order id already recorded is refused (ValueError naming it): one id, one order.
        PostgreSQL unreachable: :class:`StorageUnavailable` — the intent was not recorded and nothing
        will be sent for it."""
        used = f"client_order_id {req.client_order_id!r} was already used: choose a new one"
        await self.record_with(lambda conn: record_intent_in(conn, account, req), used)

    async def record_with(self, record: Callable[[asyncpg.Connection], Awaitable[None]], used: str) -> None:
        """Run ``record`` (an intent's inserts) in one transaction: an id already recorded raises
        ValueError(``used``); PostgreSQL unreachable: :class:`StorageUnavailable`, nothing recorded."""
        try:
            with unreachable_as("order not recorded, nothing sent", self.db.where):
                async with self.db.transaction() as conn:
                    await record(conn)
        except asyncpg.UniqueViolationError as exc:
            raise ValueError(used) from exc

    async def withdraw(self, client_order_id: str, why: str, *, queued_for_s: float = 0.0) -> bool:
        """Answer a still-queued intent ``rejected`` with ``why`` so no leader sends it (True); False
        once a leader claimed it (its answer will come), or when it has been queued for less than
        ``queued_for_s`` seconds.  One statement: claim and withdrawal cannot both win."""
        with unreachable_as("order not withdrawn", self.db.where):
            async with self.db.transaction() as conn:
                tag = await conn.execute(
                    "UPDATE cluster_order_intents SET state = 'rejected', answer = $2, answered_at = clock_timestamp()"
                    " WHERE client_order_id = $1 AND state = 'queued'"
                    " AND created_at <= clock_timestamp() - make_interval(secs => $3)",
                    client_order_id,
                    orjson.dumps({"error": why, "refused": True}).decode(),
                    queued_for_s,
                )
                if tag.endswith(" 0"):
                    return False
                await conn.execute(  # a bracket's exit waiting for this entry is never sent either
                    "UPDATE cluster_order_intents SET state = 'void', answer = $2, answered_at = clock_timestamp()"
                    " WHERE entry_client_order_id = $1 AND state = 'waiting'",
                    client_order_id,
                    orjson.dumps({"error": f"bracket void: its entry was not sent ({why})"}).decode(),
                )
                await conn.execute("SELECT pg_notify($1, $2)", ANSWERS_CHANNEL, client_order_id)
        return True

    async def recorded(self, client_order_id: str) -> bool:
        """Whether an intent with this id was ever recorded."""
        found = await self.db.fetchval(
            "SELECT 1 FROM cluster_order_intents WHERE client_order_id = $1", client_order_id
        )
        return found is not None

    async def answer(self, client_order_id: str) -> Answer | None:
        """The answer if there is one yet (None: unknown id, or still queued / being sent)."""
        row = await self.db.fetchrow(
            "SELECT client_order_id, state, answer FROM cluster_order_intents WHERE client_order_id = $1",
            client_order_id,
        )
        if row is None or row["state"] not in ("placed", "rejected"):
            return None
        return answer_of(row)

    async def owned(self, client_order_id: str) -> tuple[str | None, Answer] | None:
        """The intent's owner and where it stands (an :class:`Answer` whose ``order`` is None until it
        is placed), or None when no intent has this id; StorageUnavailable when PostgreSQL is away."""
        with unreachable_as("order not read", self.db.where):
            row = await self.db.fetchrow(
                "SELECT client_order_id, owner, state, answer FROM cluster_order_intents WHERE client_order_id = $1",
                client_order_id,
            )
        return None if row is None else (row["owner"], answer_of(row))

    def _on_answer(self, payload: str) -> None:
        for event in self._waiters.get(payload, ()):
            event.set()

    async def wait_answer(self, client_order_id: str, timeout_s: float) -> Answer | None:
        """The answer, waiting up to ``timeout_s`` for it (None when it has not come by then)."""
        return await self.wait_for(client_order_id, lambda: self.answer(client_order_id), timeout_s)

    async def wait_for(self, key: str, read: Callable[[], Awaitable[T | None]], timeout_s: float) -> T | None:
        """What ``read`` returns once it is not None, read again on each ``cluster_order_answers``
        notification whose payload is ``key``; None when ``timeout_s`` passed first."""
        arrived = asyncio.Event()
        self._waiters.setdefault(key, set()).add(arrived)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                arrived.clear()
                listening = await self._listener.ensure()
                found = await read()  # after LISTEN: an answer cannot slip by
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                with contextlib.suppress(TimeoutError):  # not listening (PostgreSQL away): look again soon
                    await asyncio.wait_for(arrived.wait(), left if listening else min(left, 0.5))
        finally:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(arrived)
                if not waiting:
                    del self._waiters[key]

    async def close(self) -> None:
        """Close the listening connection."""
        await self._listener.close()

    async def counts(self, account: str) -> dict[str, int]:
        rows = await self.db.fetch(
            "SELECT state, COUNT(*) AS n FROM cluster_order_intents WHERE account = $1 GROUP BY state", account
        )
        return {r["state"]: int(r["n"]) for r in rows}
