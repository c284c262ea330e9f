"""Settle once: what becomes of an intent that may have been sent but has no answer, on a node and on a cluster.

An intent whose answer is not known — its sender died between recording it and the answer, or the
answer was lost (:func:`~brokers.orders.lifecycle.send_once` recorded it *unknown*) — is never sent
again blindly: it might be on the book.  :func:`settle` asks the exchange for it by its client id
(``clientOrderId`` for an order, ``listClientOrderId`` for a list):

- **found** → the exchange's answer is recorded (placed, with whatever it did since);
- **absent** and **due** → the journal's rule for an intent the exchange never got: rejected with the
  journal's text, or — a node's unattended ``cg-`` intent nobody is sending, a bracket's claimed exit
  on a node — sent now, once; or — a cluster's bracket exit — armed again for the release sweep;
- **absent**, not due yet → left for a later pass (a request of it may still be on its way);
- the lookup failed → logged with the journal's event name, left for a later pass.

*Due* is the journal's clock and rule (:class:`SettleJournal`): a node's grace after the intent was
recorded (brokers/orders/sqlite_settle.py, the process is the fence, so a send of its own is never in
doubt); a cluster's ``recvWindow`` + margin after the former leader's lease or the unknown answer, on
PostgreSQL's clock (cluster/pg_order_journal.py ``PgSettlement``): after that no request of the earlier
send can still be accepted, so absent means never.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

import structlog

from brokers.models import BrokerError, ExchangeList, ExchangeOrder

log = structlog.get_logger(__name__)

Kind = Literal["order", "list"]
R = TypeVar("R")

_ID_FIELD: Mapping[Kind, str] = {"order": "client_order_id", "list": "list_client_id"}


@dataclass(frozen=True, slots=True)
class Unresolved(Generic[R]):
    """One intent a journal lists for settling: its client id, whether it is an order or a list, its
    symbol (an order is looked up by symbol and id), whether the journal's rule for an absent intent
    applies now (``due``), and the journal's own record of it (``held``: a row)."""

    intent_id: str
    kind: Kind
    symbol: str
    due: bool
    held: R


class SettleJournal(Protocol[R]):
    """Where unresolved intents are listed and their settlement recorded (see the module docstring)."""

    @property
    def lookup_failed(self) -> Mapping[Kind, str]:
        """The log event of a failed lookup, by kind (the events the journal's owner always logged)."""
        ...

    async def unresolved(self) -> Sequence[Unresolved[R]]:
        """The intents to settle now, oldest first (none that this process is sending right now)."""
        ...

    async def found(self, intent: Unresolved[R], answer: ExchangeOrder | ExchangeList) -> str | None:
        """The exchange has it: record its answer; returns what it counts as (None: nothing recorded)."""
        ...

    async def absent(self, intent: Unresolved[R]) -> str | None:
        """A due intent the exchange never got: the journal's rule; returns what it counts as (None: nothing)."""
        ...


class ExchangeLookup(Protocol):
    """Looks an intent up by its client id (a node's broker, a cluster leader's signed broker)."""

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None: ...

    async def query_list(self, list_client_id: str) -> ExchangeList | None: ...


async def settle_intents(journal: SettleJournal[R], exchange: ExchangeLookup) -> Counter[str]:
    """Settle every intent ``journal`` lists (see the module docstring); returns how many of each outcome
    the journal named (its ``found`` / ``absent`` results)."""
    counts: Counter[str] = Counter()
    for intent in await journal.unresolved():
        try:
            answer: ExchangeOrder | ExchangeList | None = (
                await exchange.query(intent.symbol, intent.intent_id)
                if intent.kind == "order"
                else await exchange.query_list(intent.intent_id)
            )
        except BrokerError as exc:
            fields = {_ID_FIELD[intent.kind]: intent.intent_id, "error": str(exc)}
            log.warning(journal.lookup_failed[intent.kind], **fields)
            continue
        if answer is not None:
            outcome = await journal.found(intent, answer)
        elif intent.due:
            outcome = await journal.absent(intent)
        else:
            continue
        if outcome is not None:
            counts[outcome] += 1
    return counts
