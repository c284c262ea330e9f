"""The halt switch in a running daemon: halting, resuming, and cancelling open orders.

:class:`HaltSwitch` owns the daemon's view of the halt row (:mod:`brokers.halt`) — kept in
memory for the status surfaces (/readyz, /status, STATUS=, /metrics), which must not touch
the database — and carries out *cancel-open* requests through the order service:

- the ``halt_trading`` tool and the dashboard call :meth:`HaltSwitch.halt` /
  :meth:`HaltSwitch.resume` in this process with a :class:`~brokers.halt_authority.HaltAuthority`
  (who asks, with what rank); a resume the authority may not make raises
  :class:`~brokers.halt_authority.HaltRefused`; a cancel-open runs at once;
- ``chartgen trading halt --cancel-open`` writes the row from another process; :meth:`watch`
  notices within ``poll_s`` through SQLite's ``PRAGMA data_version`` (which changes only when
  another connection commits, and costs no table read), re-reads the row and carries the
  request out; a request left pending while no daemon ran is carried out when the watch starts.

:func:`cancel_open` cancels every open order list (``broker.open_lists`` / ``cancel_list``, where
the broker has them) and every open order (``broker.open_orders`` / ``cancel``), concurrently
with bounded concurrency, and tries once more on any order still open after a failure (a leg
cancelled with its list, an order whose send was in flight).  Each cancelled order passes
through :meth:`OrderService.on_update`, so the order store and trades.log record it.  A request
scoped to some principals (a ``trade`` token's cancel-open: :func:`brokers.halt.cancel_scope_in`)
cancels only the exchange's open orders and lists whose recorded owner (:class:`Ownership`) is one
of them; an order or list the daemon has no owner for is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from brokers.halt import HaltState, HaltStore, held_note
from brokers.halt_authority import HaltAuthority, HaltRefused
from brokers.models import BrokerError, ExchangeList, ExchangeOrder
from brokers.orders.service import OrderService
from brokers.protocol import Broker

log = structlog.get_logger(__name__)

AuditWriter = Callable[[Sequence[str]], Awaitable[None]]
CANCEL_CONCURRENCY = 8
"""Cancels in flight at once: 30 orders take about four round trips, well under the 2 s budget."""
POLL_S = 0.2
IN_FLIGHT_WAIT_S = 1.0
"""How long cancel-open waits for orders admitted before the halt whose send is still under way."""


class CancelTarget(Protocol):
    """Whose open orders cancel-open cancels: the single node's OrderService (which records each
    cancelled order), or the cluster's order leader (whose orders are the exchange's)."""

    @property
    def broker(self) -> Broker: ...

    async def on_update(self, update: ExchangeOrder) -> Any: ...

    def sends_in_flight(self) -> bool:
        """Whether this process is sending an order right now (admitted before the halt)."""
        ...


class Ownership(Protocol):
    """Who owns an order or an order list, as recorded when it was placed (None: no owner known)."""

    async def order_owner(self, client_order_id: str) -> str | None: ...

    async def list_owner(self, list_client_id: str) -> str | None: ...


class ServiceOwnership:
    """The single node's owners: the order store's and the list store's ``owner`` columns."""

    def __init__(self, service: OrderService) -> None:
        self.service = service

    async def order_owner(self, client_order_id: str) -> str | None:
        row = await self.service.store.get(client_order_id)
        return None if row is None else row.owner

    async def list_owner(self, list_client_id: str) -> str | None:
        row = await self.service.lists.store.get(list_client_id)
        return None if row is None else row.owner


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose open orders a cancel-open cancels: ``owners`` None for everyone's, else only orders and
    lists whose owner (looked up through ``ownership``) is one of them."""

    owners: frozenset[str] | None = None
    ownership: Ownership | None = None

    async def covers_order(self, order: ExchangeOrder) -> bool:
        if self.owners is None:
            return True
        if self.ownership is None:
            return False  # owners unknown: cancel nothing (fail closed)
        return await self.ownership.order_owner(order.client_order_id) in self.owners

    async def covers_list(self, lst: ExchangeList) -> bool:
        if self.owners is None:
            return True
        if self.ownership is None:
            return False
        return await self.ownership.list_owner(lst.list_client_id) in self.owners

    def public(self) -> list[str] | None:
        return None if self.owners is None else sorted(self.owners)


EVERYONE = Scope()


@dataclass(slots=True)
class CancelOutcome:
    """What one cancel-open did."""

    orders: int = 0
    lists: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    owners: list[str] | None = None
    """Whose orders it cancelled: None for every principal's."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "orders_cancelled": self.orders,
            "lists_cancelled": self.lists,
            "owners": self.owners,
            "failures": self.failures,
            "seconds": round(self.seconds, 3),
        }


def summary(result: dict[str, Any]) -> str:
    """The trades.log / CLI line of a cancel-open result."""
    orders, lists = result.get("orders_cancelled", 0), result.get("lists_cancelled", 0)
    text = f"HALT cancel-open: {orders} orders, {lists} lists cancelled"
    if result.get("owners") is not None:
        text += " (owned by " + ", ".join(str(o) for o in result["owners"]) + ")"
    failures = result.get("failures") or []
    if failures:
        text += f"; {len(failures)} failed: " + "; ".join(str(f) for f in failures[:5])
    return text


async def _bounded(limit: asyncio.Semaphore, job: Awaitable[Any]) -> Any:
    async with limit:
        return await job


async def _wait_in_flight(service: CancelTarget, timeout_s: float) -> None:
    """Let sends admitted before the halt finish, so their orders are open (and cancelled) or done."""
    step = 0.01
    for _ in range(int(timeout_s / step)):
        if not service.sends_in_flight():
            return
        await asyncio.sleep(step)  # bounded wait for this process's own sends; the service offers no event


async def _covered(scope: Scope, orders: list[ExchangeOrder]) -> list[ExchangeOrder]:
    return [o for o in orders if await scope.covers_order(o)]


async def _cancel_lists(service: CancelTarget, limit: asyncio.Semaphore, out: CancelOutcome, scope: Scope) -> None:
    broker = service.broker
    open_lists = getattr(broker, "open_lists", None)
    cancel_list = getattr(broker, "cancel_list", None)
    if open_lists is None or cancel_list is None:
        return  # a broker without order lists: their legs are cancelled as orders
    try:
        lists: list[ExchangeList] = [lst for lst in await open_lists() if not lst.done and await scope.covers_list(lst)]
    except NotImplementedError:
        return
    except BrokerError as exc:
        out.failures.append(f"listing order lists: {exc}")
        return

    async def one(lst: ExchangeList) -> None:
        try:
            done = await cancel_list(lst.symbol, lst.list_client_id)
        except BrokerError as exc:
            out.failures.append(f"list {lst.list_client_id}: {exc}")
            return
        out.lists += 1
        for leg in getattr(done, "orders", ()):
            if leg.status in ("CANCELED", "EXPIRED"):
                with contextlib.suppress(BrokerError):
                    await service.on_update(leg)

    await asyncio.gather(*(_bounded(limit, one(lst)) for lst in lists))


async def _cancel_orders(service: CancelTarget, orders: list[ExchangeOrder], limit: asyncio.Semaphore) -> list[str]:
    """Cancel ``orders`` concurrently; returns the client ids whose cancel failed (with why)."""
    failed: list[tuple[str, str]] = []

    async def one(order: ExchangeOrder) -> bool:
        try:
            update = await service.broker.cancel(order.symbol, order.client_order_id)
        except BrokerError as exc:
            failed.append((order.client_order_id, str(exc)))
            return False
        await service.on_update(update)
        return True

    await asyncio.gather(*(_bounded(limit, one(o)) for o in orders))
    return [f"{cid}: {why}" for cid, why in failed]


async def cancel_open(
    service: CancelTarget, *, scope: Scope = EVERYONE, concurrency: int = CANCEL_CONCURRENCY
) -> CancelOutcome:
    """Cancel every open order list and order on the venue that ``scope`` covers (see the module docstring)."""
    started = time.perf_counter()
    out = CancelOutcome(owners=scope.public())
    limit = asyncio.Semaphore(concurrency)
    await _wait_in_flight(service, IN_FLIGHT_WAIT_S)
    await _cancel_lists(service, limit, out, scope)
    try:
        first = await _covered(scope, await service.broker.open_orders())
        failed = await _cancel_orders(service, first, limit)
        out.orders = len(first) - len(failed)
        if failed:  # a leg that went with its list, an order filled meanwhile: ask again, retry what is still open
            still = await _covered(scope, await service.broker.open_orders())
            retried = await _cancel_orders(service, still, limit)
            out.orders += len(still) - len(retried)
            out.failures.extend(retried)
    except BrokerError as exc:
        out.failures.append(f"listing open orders: {exc}")
    out.seconds = time.perf_counter() - started
    return out


class HaltSwitch:
    """The halt flag as this daemon sees it, and the carrying out of cancel-open requests."""

    def __init__(
        self,
        store: HaltStore,
        service: OrderService | None,
        *,
        audit: AuditWriter | None = None,
        clock: Callable[[], float] = time.time,
        poll_s: float = POLL_S,
    ) -> None:
        self.store = store
        self.service = service
        self._audit = audit
        self._clock = clock
        self.poll_s = poll_s
        self.state = HaltState()
        """The row as last read (refreshed by :meth:`watch` and by every change made here)."""
        self._cancel_lock = asyncio.Lock()

    @property
    def halted(self) -> bool:
        return self.state.halted

    def note(self) -> str | None:
        """The one-line halt note of the status surfaces, or None when trading runs."""
        return self.state.note()

    async def _write(self, line: str) -> None:
        if self._audit is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock()))
            await self._audit([f"{stamp} {line}"])

    async def refresh(self) -> HaltState:
        self.state = await self.store.read()
        return self.state

    async def halt(self, *, reason: str | None, by: HaltAuthority, cancel_open: bool = False) -> dict[str, Any]:
        """Halt (anyone may; see :mod:`brokers.halt_authority` for a halt already in force) and with
        ``cancel_open`` cancel ``by``'s open orders now (everyone's for the operator, an admin, a
        protection); returns the state, after a cancel-open its result, and a ``note`` when another
        holder keeps holding."""
        self.state = await self.store.halt(reason=reason, by=by, now=self._clock(), cancel_open=cancel_open)
        log.warning("trading_halted", reason=reason, by=by.name, kind=str(by.kind), cancel_open=cancel_open)
        await self._write(f"HALT by {by.name}: {reason or 'no reason given'}")
        result = await self.carry_out_pending() if cancel_open else None
        return {
            **self.state.public(),
            **({"cancel_open": result} if result is not None else {}),
            **held_note(self.state, by),
        }

    async def resume(self, *, by: HaltAuthority) -> dict[str, Any]:
        """Resume trading; raises :class:`~brokers.halt_authority.HaltRefused` (nothing changed) when
        ``by`` may not lift the halt in force."""
        was = self.state.halted
        try:
            self.state = await self.store.resume(by=by)
        except HaltRefused as exc:
            log.warning("trading_resume_refused", by=by.name, kind=str(by.kind), holder=exc.holder.name)
            await self._write(f"RESUME REFUSED for {by.name}: halted by {exc.holder.name}")
            await self.refresh()
            raise
        log.warning("trading_resumed", by=by.name, kind=str(by.kind), was_halted=was)
        await self._write(f"RESUME by {by.name}")
        return self.state.public()

    async def carry_out_pending(self) -> dict[str, Any] | None:
        """Carry out the pending cancel-open request, if any; returns its result (None: nothing pending)."""
        async with self._cancel_lock:
            state = await self.refresh()
            if not state.cancel_pending:
                return None
            seq = state.cancel_seq
            owners = await self.store.cancel_scope(state.cancel_done_seq, seq)
            if self.service is None:
                result = CancelOutcome(
                    failures=["no broker runs in this daemon (start it with --trade)"],
                    owners=None if owners is None else sorted(owners),
                ).as_dict()
            else:
                scope = Scope(owners, ServiceOwnership(self.service))
                result = (await cancel_open(self.service, scope=scope)).as_dict()
            self.state = await self.store.record_cancel(seq, result, self._clock())
            log.warning("trading_halt_cancel_open", **result)
            await self._write(summary(result))
            return result

    async def watch(self) -> None:
        """Supervised task: notice changes written by other processes (``chartgen trading``) within
        ``poll_s`` and carry out their cancel-open requests; a pending one is carried out at once."""
        seen: int | None = None
        while True:
            version = await self.store.data_version()
            if version != seen:
                seen = version
                before = self.state
                state = await self.refresh()
                if state.halted != before.halted:
                    log.warning("trading_halt_changed", halted=state.halted, reason=state.reason, by=state.by)
                if state.cancel_pending:
                    await self.carry_out_pending()
            await asyncio.sleep(self.poll_s)  # a poll schedule: SQLite offers no cross-process notification
