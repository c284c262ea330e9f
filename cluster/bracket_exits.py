"""Brackets on entries that are not one OTOCO list (a market entry) in a cluster: a front's side — the
entry and its exit OCO recorded together, the exit voided by ``cancel_order``, and place_order's answer.
What becomes of the exit once its entry ended — sized, claimed, sent once, re-armed after an order-rate
refusal, voided — is the one exit procedure of a node and a cluster (brokers/orders/exits.py), which the
order leader drives over PostgreSQL (cluster/pg_order_journal.py).

1. **Recorded together** (:func:`submit_bracket`, a front): the entry's order intent (``queued``) and
   the exit's order-list intent (``waiting``, ``entry_client_order_id`` naming the entry) in one
   transaction.  The exit's list and leg ids derive from the entry's id (brokers/orders/exits.py
   ``bracket_ids``), so they cannot be taken by anything else.
2. **Admitted together**: the leader claims the entry as any order and checks it and both exit
   legs at one reference price (cluster/leader_admission.py ``check_bracket``), counting the entry
   plus the larger exit leg against the daily limit in the entry's fenced admission.  The exit is
   never counted again.
3. **Released** (every leader round, brokers/orders/exits.py ``ExitProcedure.release_due``): an exit
   whose entry is done with something filled — FILLED, or CANCELED / EXPIRED after a partial fill, from
   the order's answer, a settlement or the account mirror — is sized to what the entry acquired
   (brokers/orders/exits.py ``exit_quantity``, the single node's rule: its executed quantity less a
   commission taken in the base asset, from the answer's fills or the trades the account mirror
   stored, at most the planned quantity, rounded down to the LOT_SIZE step) and claimed in one
   transaction fenced by the lease that also reads the halt switch: ``waiting`` → ``sending`` under
   the leader's token (cluster/pg_order_journal.py).
   Halted: it stays ``waiting`` and goes out after the resume.  Only then is it signed and sent
   (cluster/order_leader.py ``send_exit``); the answer is recorded as any list's.
4. **Once**: a leader that dies after the claim leaves the exit ``sending`` under its token; the next
   leader settles it by ``listClientOrderId`` after the exchange's ``recvWindow`` — found →
   ``placed``; never received → ``waiting`` again, so it is released (and sent) once more: an exit
   protects a position already held, so it is not dropped like an order whose caller can retry.
5. **Rate-limited**: the exchange refusing the send for the account's order rate (HTTP 429, -1015:
   a definite "not placed", :class:`RateLimitedError`) does not end the exit either: in one fenced
   transaction it goes ``sending`` → ``waiting`` again (its legs' rows are the list's membership,
   recorded with the intent, and stay), its answer the refusal with a not-before time —
   PostgreSQL's clock plus ``Retry-After`` — that every leader's release honours, so it is claimed
   and sent again, with the same ids, once the wait is over.  A real refusal (balance, filters)
   is ``rejected``.
6. **Void**: an entry rejected, withdrawn, or cancelled or expired with nothing filled never gets its
   exit — ``void`` (as on a single node), nor does one whose fill is less than one LOT_SIZE step after
   fees; ``cancel_order`` on a waiting exit voids it too.

A front answers ``place_order`` with the entry's answer and the exit as ``bracket``, waiting up to
its answer time for the exit once the entry filled (``placed`` with its legs, ``rejected`` with the
exchange's reason, ``waiting`` while trading is halted or until a rate limit's wait is over).
"""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson
import structlog

from brokers import ListRequest, OrderRequest, utc_second
from cluster import list_intents
from cluster.halt import read_in
from cluster.orders import (
    LIST_REQUEST_JSON,
    OrderIntents,
    answer_of,
    record_intent_in,
)
from storage import unreachable_as

log = structlog.get_logger(__name__)


async def record_bracket_in(conn: asyncpg.Connection, account: str, entry: OrderRequest, exit_oco: ListRequest) -> None:
    """Inside the caller's transaction: the entry's queued intent and its exit waiting for the fill."""
    await record_intent_in(conn, account, entry)
    await list_intents.record_list_in(conn, account, exit_oco, entry_client_order_id=entry.client_order_id)


async def submit_bracket(intents: OrderIntents, account: str, entry: OrderRequest, exit_oco: ListRequest) -> None:
    """Record an entry and its bracket's exit for ``account``'s leader (one transaction)."""
    used = f"client_order_id {entry.client_order_id!r} (or its bracket's ids) was already used: choose a new one"
    await intents.record_with(lambda conn: record_bracket_in(conn, account, entry, exit_oco), used)


async def exit_view(intents: OrderIntents, account: str, exit_oco: ListRequest, *, wait_s: float) -> dict[str, Any]:
    """The bracket part of place_order's answer (the single node's states: waiting, claimed, placed,
    rejected, void), waiting up to ``wait_s`` for the exit to be sent — not while trading is halted."""
    db = intents.db
    list_id = exit_oco.list_client_id

    read = "SELECT client_order_id, state, answer, request FROM cluster_order_intents WHERE client_order_id = $1"

    async def settled() -> asyncpg.Record | None:
        row = await db.fetchrow(read, list_id)
        if row is None or row["state"] in ("placed", "rejected", "void"):
            return row
        if row["state"] == "waiting" and retry_at(row["answer"]) is not None:
            return row  # refused for the order rate: sent again after Retry-After, not within this answer
        return row if row["state"] == "waiting" and (await read_in(db, account)).halted else None

    with unreachable_as("bracket not read", db.where):
        row = await intents.wait_for(list_id, settled, wait_s) if wait_s > 0 else None
        if row is None:
            row = await db.fetchrow(read, list_id)
    state = "void" if row is None else row["state"]
    if row is not None and state == "placed":  # the legs as sent: sized to what the entry acquired
        sent = LIST_REQUEST_JSON.validate_json(row["request"])
        return {**list_intents.list_result(answer_of(row), sent), "state": "placed"}
    view: dict[str, Any] = {"list_id": list_id, "kind": exit_oco.kind, "state": state}
    if state in ("rejected", "void"):
        view["error"] = answer_of(row).error if row is not None else None
    elif state == "waiting":
        with unreachable_as("bracket not read", db.where):
            halted = (await read_in(db, account)).halted
        not_before = retry_at(row["answer"]) if row is not None else None
        if halted:
            view["note"] = "trading is halted: the order leader places the exit OCO when trading resumes"
        elif not_before is not None:
            view["error"] = answer_of(row).error
            view["note"] = (
                "the exchange's order rate limit refused the exit OCO (nothing was placed); the order leader "
                f"sends it again after {utc_second(not_before)}"
            )
        else:
            view["note"] = "the order leader places the exit OCO once the entry has filled"
    else:
        view["state"] = "claimed"
        view["note"] = "the order leader is sending the exit OCO; get_orders shows it (it is never sent twice)"
    return view


def retry_at(answer_text: str | None) -> float | None:
    """A waiting exit's not-before (epoch seconds) after an order-rate refusal; None when it has none."""
    if not answer_text:
        return None
    value = orjson.loads(answer_text).get("not_before")
    return None if value is None else float(value)
