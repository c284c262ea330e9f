"""A bracket's exit OCO, from its entry's end to the exchange: the one procedure of a node and a cluster.

A bracket on an entry the venue cannot carry as one OTOCO (a market entry) is recorded with its
entry as a *waiting* exit OCO (the opposite side, the entry's quantity, ids derived from the entry's:
:func:`bracket_ids`).  This module decides what becomes of it, against an
:class:`~brokers.orders.journal.ExitJournal` (SQLite on a node, PostgreSQL on a cluster) and an
:class:`~brokers.orders.journal.ExitSender`:

1. **Void**: an entry never placed, or done with nothing filled (cancelled, rejected, expired), never
   gets its exit; nor does one whose fill is less than one LOT_SIZE step after fees.
2. **Sized** (:func:`exit_quantity`): an entry done with something filled — FILLED, or cancelled /
   expired after a partial fill — is exited for what it acquired: its executed quantity, less a
   commission the exchange took in the base asset (Binance without BNB), never more than planned,
   rounded down to the LOT_SIZE step, else the exit would be refused for an insufficient balance.
   Until the entry's trades add up to its executed quantity (or while its symbol's rules cannot be
   read) it stays waiting: the next round sizes it.  A PARTIALLY_FILLED entry still working places
   nothing yet: the exit goes out once, when the entry is done.
3. **Claimed, then sent once**: the journal claims it (fenced, the halt switch read in the same
   transaction: halted, it stays waiting and goes out after the resume); only the winner sends.
4. **Rate-limited** (HTTP 429 -1015, :class:`RateLimitedError`: a definite "not placed"): the exit
   protects a position already held, so it is not dropped — the journal puts it back to waiting,
   not before Retry-After, and a later round claims and sends it again with the same ids.
5. **Refused** for good (balance, filters): ``rejected``, logged at error level (the position it
   should protect is unprotected) and written to the audit log where there is one.

A claimed exit whose sender died (or whose answer was lost) is settled by the journal's owner by its
``listClientOrderId`` (a node's reconciliation, a cluster's settlement), then sent again through
:meth:`ExitProcedure.send_claimed` or re-armed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Literal

import structlog

from brokers.filters import SymbolRules
from brokers.models import TERMINAL, BrokerError, ListRequest, RateLimitedError
from brokers.orders.journal import ExitJournal, ExitSender, WaitingExit

log = structlog.get_logger(__name__)

RulesReader = Callable[[str], Awaitable[SymbolRules | None]]
AuditLine = Callable[[str], Awaitable[None]]
"""Writes one audit-log line (the caller stamps it), e.g. a node's trades.log; a cluster has none here."""


def bracket_ids(entry_client_id: str) -> tuple[str, str, str]:
    """The exit OCO's list id and its take-profit and stop order ids, derived from the entry's id."""
    base = "bk-" + hashlib.sha256(entry_client_id.encode()).hexdigest()[:24]
    return f"{base}-L", f"{base}-tp", f"{base}-sl"


def exit_quantity(planned: Decimal, *, entry_side: str, executed: Decimal, base_fee: Decimal, step: Decimal) -> Decimal:
    """What a bracket's exit OCO trades for an entry that is done: what the entry acquired — its
    ``executed`` quantity, less ``base_fee`` (commission taken in the base asset) for a BUY entry —
    never more than ``planned``, rounded down to the LOT_SIZE ``step``; 0 when nothing is left to exit.

    >>> exit_quantity(Decimal("1"), entry_side="BUY", executed=Decimal("0.4"), base_fee=Decimal("0.0004"),
    ...               step=Decimal("0.001"))
    Decimal('0.399')
    """
    held = executed - base_fee if entry_side == "BUY" else executed
    qty = min(planned, held)
    if step > 0:
        qty = (qty // step) * step
    return qty if qty > 0 else Decimal(0)


def utc_second(t: float) -> str:
    """A unix time as the UTC second it is over (Retry-After notes and log fields)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.ceil(t)))


class ExitProcedure:
    """Releases waiting exits of one account (see the module docstring)."""

    def __init__(
        self, journal: ExitJournal, sender: ExitSender, rules: RulesReader, *, audit: AuditLine | None = None
    ) -> None:
        self.journal = journal
        self.sender = sender
        self.rules = rules
        self.audit = audit

    async def release_due(self) -> int:
        """Every exit the journal says is due, in order, while this process may act; how many were
        sent or voided."""
        done = 0
        for exit_ in await self.journal.exits_due():
            if not self.journal.may_send():
                break
            done += await self.release(exit_)
        return done

    async def release(self, exit_: WaitingExit) -> int:
        """One waiting exit: voided, or sized, claimed and sent; 1 when it was sent or voided."""
        entry = exit_.entry
        if entry.status is None:
            return await self._void(exit_, f"bracket void: its entry was not placed ({entry.refusal or 'rejected'})")
        if entry.status not in TERMINAL:
            return 0  # still working: its end brings the exit
        if entry.executed_qty <= 0:
            why = f"bracket void: its entry ended {entry.status} with nothing filled (of {entry.orig_qty})"
            return await self._void(exit_, why)
        req = await self.sized(exit_)
        if req == "nothing":
            why = f"bracket void: its entry filled {entry.executed_qty}, less than one LOT_SIZE step after fees"
            return await self._void(exit_, why)
        if req is None or not await self.journal.claim_exit(req):
            return 0
        await self.send_claimed(req, entry.client_order_id)
        return 1

    async def sized(self, exit_: WaitingExit) -> ListRequest | Literal["nothing"] | None:
        """The exit for what the entry acquired (:func:`exit_quantity`); None when the rules or the
        entry's trades cannot be read yet (a later round tries again), ``"nothing"`` when nothing is
        left to exit."""
        planned, entry = exit_.planned, exit_.entry
        try:
            rules = await self.rules(planned.symbol)
        except BrokerError as exc:
            log.warning("bracket_exit_not_sized", list_client_id=planned.list_client_id, error=str(exc))
            return None
        fills = await self.journal.entry_fills(exit_)
        if rules is None or sum((f.quantity for f in fills), Decimal(0)) < entry.executed_qty:
            log.info("bracket_exit_not_sized", list_client_id=planned.list_client_id, why="trades not all known yet")
            return None
        assert planned.stop.quantity is not None
        fee = sum((f.commission for f in fills if f.commission_asset == rules.base_asset), Decimal(0))
        qty = exit_quantity(
            planned.stop.quantity, entry_side=entry.side, executed=entry.executed_qty, base_fee=fee,
            step=rules.step_size,
        )  # fmt: skip
        if qty <= 0:
            return "nothing"
        if qty == planned.stop.quantity and qty == planned.take_profit.quantity:
            return planned
        return dataclasses.replace(
            planned,
            take_profit=dataclasses.replace(planned.take_profit, quantity=qty),
            stop=dataclasses.replace(planned.stop, quantity=qty),
        )

    async def send_claimed(self, req: ListRequest, entry_client_id: str | None) -> None:
        """Send an exit this process claimed (sized), once, and apply what the send came to."""
        sent = await self.sender.send_exit(req)
        if sent.outcome == "placed":
            await self.journal.exit_placed(req)
        elif sent.outcome == "rate_limited":
            assert sent.rate_limit is not None
            await self._rate_limited(req, entry_client_id, sent.rate_limit)
        elif sent.outcome == "refused":
            await self._refused(req, entry_client_id, sent.error or "refused")
        # pending: the outcome is looked up by the journal's owner (reconciliation / settlement)

    async def _void(self, exit_: WaitingExit, why: str) -> int:
        list_id = exit_.planned.list_client_id
        if not await self.journal.void_exit(list_id, why):
            return 0
        log.info("bracket_void", list_client_id=list_id, entry=exit_.entry.client_order_id, why=why)
        return 1

    async def _rate_limited(self, req: ListRequest, entry_client_id: str | None, exc: RateLimitedError) -> None:
        retry_at = await self.journal.rearm_exit(req, exc)
        if retry_at is None:
            await self._refused(req, entry_client_id, str(exc))
            return
        log.warning(
            "bracket_exit_rate_limited", list_client_id=req.list_client_id, entry=entry_client_id,
            retry_at=utc_second(retry_at), retry_after_s=exc.retry_after_s, error=str(exc),
        )  # fmt: skip
        if self.audit is not None:
            await self.audit(f"BRACKET REFUSED list={req.list_client_id}: {exc}; retried after {utc_second(retry_at)}")

    async def _refused(self, req: ListRequest, entry_client_id: str | None, error: str) -> None:
        if not await self.journal.exit_refused(req, error):
            return
        log.error("bracket_exit_refused", list_client_id=req.list_client_id, entry=entry_client_id, error=error)
        if self.audit is not None:
            await self.audit(f"BRACKET REFUSED list={req.list_client_id}: {error}")
