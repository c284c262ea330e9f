"""The order journal: the storage half of the order procedure, as a Protocol.

The order procedure (:mod:`brokers.orders.exits`: a bracket's exit sized, claimed, sent once,
re-armed after an order-rate refusal, voided) is written once, against this Protocol; each place
that keeps orders implements it over its own storage:

- a single node: :class:`brokers.orders.sqlite_journal.SqliteExitJournal`, over the ``orders`` and
  ``order_lists`` tables in SQLite — the fence is the process (one process owns the file);
- a cluster: :class:`cluster.pg_order_journal.PgOrderJournal`, over ``cluster_order_intents`` in PostgreSQL —
  the fence is the order leader's lease token, checked in the same transaction as every write.

What differs between the two is only what a journal does: where an intent is recorded, how a claim
is fenced, which clock dates a Retry-After, where an entry's trades are read.  What happens, in which
order, with which log events and audit lines, is the procedure's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, Protocol

from brokers.models import ListRequest, RateLimitedError


@dataclass(frozen=True, slots=True)
class EntryEnd:
    """What the exit procedure knows of a bracket's entry order.

    ``status`` is the exchange's order status (``FILLED``, ``CANCELED``, ``NEW`` …), None when the
    entry was never placed (refused before or by the exchange: ``refusal`` says why)."""

    client_order_id: str
    side: str
    status: str | None
    executed_qty: Decimal
    orig_qty: Decimal | None = None
    refusal: str | None = None


@dataclass(frozen=True, slots=True)
class WaitingExit:
    """A bracket's exit OCO waiting for its entry: the list as planned (the entry's quantity) and the entry."""

    planned: ListRequest
    entry: EntryEnd


@dataclass(frozen=True, slots=True)
class EntryFill:
    """One trade of an entry, as far as an exit's size needs it."""

    quantity: Decimal
    commission: Decimal
    commission_asset: str


@dataclass(frozen=True, slots=True)
class ExitSent:
    """What sending a claimed exit came to.

    ``placed``: the exchange took it; ``refused``: a definite refusal (balance, filters), recorded by
    the sender or to be recorded by :meth:`ExitJournal.exit_refused`; ``rate_limited``: refused for the
    order rate, nothing placed (``rate_limit`` is the refusal, with its Retry-After); ``pending``: the
    outcome is not known yet (a lost answer, a failed send) — the journal's settlement looks it up by its id."""

    outcome: Literal["placed", "refused", "rate_limited", "pending"]
    error: str | None = None
    rate_limit: RateLimitedError | None = None


class ExitSender(Protocol):
    """Sends a claimed exit OCO once (a node's :class:`~brokers.orders.lists.OrderLists`, a cluster's leader)."""

    async def send_exit(self, req: ListRequest) -> ExitSent: ...


class ExitJournal(Protocol):
    """The storage of bracket exits (see the module docstring for the two implementations)."""

    def may_send(self) -> bool:
        """Whether this process may still act for the account (a cluster: its lease holds)."""
        ...

    async def exits_due(self) -> Sequence[WaitingExit]:
        """Waiting exits whose entry has ended or been refused and whose Retry-After has passed;
        none while trading is halted (they are released after the resume)."""
        ...

    async def entry_fills(self, exit_: WaitingExit) -> Sequence[EntryFill]:
        """The entry's trades known so far (they may not add up to its executed quantity yet)."""
        ...

    async def claim_exit(self, req: ListRequest) -> bool:
        """``waiting`` → claimed for sending ``req`` (sized), fenced and with the halt switch read in
        the same transaction; False when halted or when it is no longer waiting (someone else won)."""
        ...

    async def rearm_exit(self, req: ListRequest, exc: RateLimitedError) -> float | None:
        """A claimed exit refused for the order rate goes back to ``waiting``, not before Retry-After;
        returns that time (unix seconds), or None when it could not be put back (the journal recorded
        what it could; a node: it is then a refusal)."""
        ...

    async def exit_refused(self, req: ListRequest, error: str) -> bool:
        """A claimed exit the exchange refused: recorded ``rejected``; True when it now is rejected."""
        ...

    async def exit_placed(self, req: ListRequest) -> None:
        """A claimed exit the exchange took: recorded ``placed`` (if the sender did not already)."""
        ...

    async def void_exit(self, list_client_id: str, why: str) -> bool:
        """A waiting exit that will never be sent becomes ``void``; False when it is no longer waiting."""
        ...
