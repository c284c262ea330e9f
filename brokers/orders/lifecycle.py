"""Send once: the rule every order and order list follows when it leaves, on a node and on a cluster.

An intent is recorded before it is sent (a node: PENDING_SUBMIT in SQLite; a cluster: claimed
``sending`` under the leader's lease token).  :func:`send_once` sends it one time and records what the
exchange said through an :class:`AnswerJournal` (brokers/orders/sqlite_journal.py,
cluster/pg_order_journal.py):

- an answer → **placed**;
- a definite refusal (:class:`OrderRejected`; :class:`RateLimitedError`, HTTP 429 -1015, nothing
  reached the book) → **refused**;
- a lost answer (:class:`OutcomeUnknown`: a timeout, a 5xx — the order may be on the book) →
  **unknown**: it is looked up by its client id later, never sent again, so it can never be placed twice;
- any other failure: where ``contain_failures`` (a cluster's leader, which runs unattended and must
  answer every claimed intent) a broker error is a refusal and anything else may have left, so it is
  unknown; otherwise (a node, whose caller is waiting) it is raised with nothing recorded — the intent
  stays pending and reconciliation looks it up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

import structlog

from brokers.models import BrokerError, OrderRejected, OutcomeUnknown, RateLimitedError

log = structlog.get_logger(__name__)

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class AnswerJournal(Protocol[T_contra]):
    """Where a sent intent's answer is recorded (see the module docstring)."""

    async def placed(self, intent_id: str, answer: T_contra) -> None: ...

    async def refused(self, intent_id: str, exc: BrokerError) -> None: ...

    async def unknown(self, intent_id: str, error: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Sent(Generic[T]):
    """What :func:`send_once` came to: the answer when placed, the error otherwise."""

    outcome: Literal["placed", "refused", "unknown"]
    answer: T | None = None
    error: BaseException | None = None


async def send_once(
    intent_id: str, place: Callable[[], Awaitable[T]], journal: AnswerJournal[T], *, contain_failures: bool
) -> Sent[T]:
    """Send the recorded intent ``intent_id`` (``place``) exactly once and record its answer."""
    try:
        answer = await place()
    except OutcomeUnknown as exc:
        await journal.unknown(intent_id, str(exc))
        return Sent("unknown", error=exc)
    except (OrderRejected, RateLimitedError) as exc:
        await journal.refused(intent_id, exc)
        return Sent("refused", error=exc)
    except BrokerError as exc:
        if not contain_failures:
            raise
        await journal.refused(intent_id, exc)
        return Sent("refused", error=exc)
    except Exception as exc:  # whatever failed, the request may have left: settle by asking
        if not contain_failures:
            raise
        log.exception("order_send_failed", client_order_id=intent_id)
        await journal.unknown(intent_id, repr(exc))
        return Sent("unknown", error=exc)
    await journal.placed(intent_id, answer)
    return Sent("placed", answer)
