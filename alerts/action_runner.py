"""Running alert actions around the firing transaction (see :mod:`alerts.actions` for the guarantees).

:meth:`ActionRunner.plan` prepares the actions of the alerts about to fire (the order path's
checks that need I/O, concurrently) and reserves their client order ids; the evaluator then
commits the firing with them; :meth:`ActionRunner.after_commit` sends each recorded intent
once — concurrently, in tracked tasks, so a slow exchange does not hold up the evaluation of
later ticks — and writes the outcome into the notification and the push frame, publishing the
frame only then, so a pushed notification already carries the order's id and outcome.
:meth:`ActionRunner.finish_pending` settles the outcomes a crash left pending (run at start,
after the order service's first reconciliation has found or sent their orders, and
periodically).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import structlog

from alerts.action_store import OutcomeLog, PlannedAction
from alerts.actions import ActionExecutor, ActionRefused, action_client_id, refused_outcome
from alerts.feed import NotificationFeed
from alerts.models import Alert, notification_payload
from alerts.push import PushHub
from alerts.store import Fired

log = structlog.get_logger(__name__)

AuditWriter = Callable[[Sequence[str]], Awaitable[None]]


def action_line(alert_id: str, outcome: dict[str, Any], at: float) -> str:
    """The trades.log line of an action's outcome."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    status = str(outcome.get("status"))
    if status == "Refused":
        return f"{stamp} ALERT_ACTION_REFUSED id={alert_id} reason={outcome.get('reason')}"
    extra = f" reason={outcome['reason']}" if outcome.get("reason") else ""
    return f"{stamp} ALERT_ACTION id={alert_id} order={outcome.get('order_id')} status={status}{extra}"


class ActionRunner:
    """Prepares, sends and settles alert actions through an :class:`ActionExecutor`."""

    def __init__(
        self,
        executor: ActionExecutor,
        outcomes: OutcomeLog,
        hub: PushHub,
        audit: AuditWriter | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.executor = executor
        self.outcomes = outcomes
        self.hub = hub
        self._audit = audit
        self._clock = clock
        self.feed: NotificationFeed | None = None
        """Where an outcome is announced to live viewers (set by the daemon with the dashboard's feed)."""
        self._sending: set[asyncio.Task[None]] = set()
        self.sent = 0
        self.refused = 0

    async def plan(self, alerts: Iterable[Alert]) -> dict[str, PlannedAction]:
        """Prepare every action (concurrently) and reserve the client ids of those that may proceed."""
        todo = [a for a in alerts if a.action is not None]
        if not todo:
            return {}
        results = await asyncio.gather(*(self._prepare(a) for a in todo))
        return {a.id: p for a, p in zip(todo, results, strict=True)}

    async def _prepare(self, alert: Alert) -> PlannedAction:
        cid = action_client_id(alert.id)
        assert alert.action is not None
        try:
            token = await self.executor.prepare(alert.principal, alert.id, alert.action["place_order"])
        except ActionRefused as exc:
            return PlannedAction(cid, refusal=str(exc))
        except Exception as exc:  # a broken order path must not stop the alert from firing
            log.exception("alert_action_prepare_failed", alert_id=alert.id)
            return PlannedAction(cid, refusal=f"the order could not be prepared: {exc}")
        self.executor.reserve(token)
        return PlannedAction(cid, token=token)

    def release(self, plans: dict[str, PlannedAction], keep: set[str] | frozenset[str] = frozenset()) -> None:
        """Drop the reservations of plans that will not be sent (their alert did not fire, or was refused)."""
        for alert_id, plan in plans.items():
            if plan.token is not None and alert_id not in keep:
                self.executor.release(plan.token)

    async def after_commit(self, fired: Sequence[Fired], plans: dict[str, PlannedAction]) -> list[Fired]:
        """Start sending the committed intents; returns the fired alerts whose push frame can go now."""
        sending = {f.alert.id for f in fired if f.action is not None and f.action.get("status") == "Pending"}
        self.release(plans, keep=sending)
        lines = []
        now = self._clock()
        for f in fired:
            if f.action is None:
                continue
            if f.alert.id in sending:
                task = asyncio.create_task(self._send(f, plans[f.alert.id]), name=f"alert-action-{f.alert.id}")
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
            else:
                self.refused += 1
                lines.append(action_line(f.alert.id, f.action, now))
        if lines and self._audit is not None:
            await self._audit(lines)
        return [f for f in fired if f.alert.id not in sending]

    async def _send(self, fired: Fired, plan: PlannedAction) -> None:
        try:
            outcome = await self.executor.send(plan.token)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The intent is recorded: reconciliation resolves it; the outcome stays pending until then.
            log.exception("alert_action_send_failed", alert_id=fired.alert.id)
            outcome = {"type": "place_order", "order_id": plan.client_order_id, "status": "Pending", "note": str(exc)}
            if fired.push_seq is not None and fired.push_data is not None:
                self.hub.publish(fired.alert.principal, fired.push_seq, fired.push_data)
            return
        self.sent += 1
        await self._settle(fired.alert.id, outcome, fired)

    async def _settle(self, alert_id: str, outcome: dict[str, Any], fired: Fired | None = None) -> None:
        updated = await self.outcomes.record(alert_id, outcome)
        if self.feed is not None and fired is not None:
            self.feed.publish(fired.alert.principal, notification_payload(fired.alert, fired.firing, outcome))
        if updated is not None:
            self.hub.publish(updated.principal, updated.seq, updated.data)
        elif fired is not None and fired.push_seq is not None and fired.push_data is not None:
            self.hub.publish(fired.alert.principal, fired.push_seq, fired.push_data)
        if self._audit is not None:
            await self._audit([action_line(alert_id, outcome, self._clock())])

    async def finish_pending(self) -> int:
        """Settle the outcomes left pending (by a crash, or a send whose answer was lost); returns how many."""
        done = 0
        for alert_id, cid in await self.outcomes.pending():
            if any(t.get_name() == f"alert-action-{alert_id}" for t in self._sending):
                continue
            try:
                outcome = await self.executor.outcome(cid) if cid else refused_outcome("no order was recorded")
            except Exception:
                log.exception("alert_action_outcome_failed", alert_id=alert_id)
                continue
            if outcome is not None:
                await self._settle(alert_id, outcome)
                done += 1
        return done

    async def drain(self) -> None:
        """Wait for the sends in flight (tests, shutdown)."""
        while self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*list(self._sending), return_exceptions=True)
