"""The alert tools' operations for one principal: set, list, cancel, notifications, subscriptions.

Every operation is scoped to the calling principal (a token's identity, or the stdio
session): one client can neither see, cancel nor drain another's alerts, notifications
or subscription.  Results are the wire shapes of chartgen's tools (contract §2.9-2.15)
with our additions (interval, trigger, expiry, note, bar_time).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import structlog

from alerts.action_runner import ActionRunner
from alerts.actions import ActionExecutor
from alerts.models import Alert, Subscription
from alerts.push import PushHub
from alerts.repository import AlertRepository
from alerts.requests import AlertInputError, AlertSpec, parse_set_alert
from config import ChannelSettings
from engine import IndicatorRequest, MarketDataError

log = structlog.get_logger(__name__)

SymbolCheck = Callable[[str], Awaitable[str | None]]
"""Returns None when the exchange lists the symbol, else a message for the caller."""


class ExchangeClock(Protocol):
    def exchange_time_ms(self, symbol: str) -> int | None: ...


class AlertIndex(Protocol):
    """Where the service puts the alerts it sets: the evaluator (alerts/evaluator.py) on a single
    node; on a cluster front the store, which announces them to the workers (alerts/front_alerts.py)."""

    @property
    def market(self) -> ExchangeClock: ...

    @property
    def actions(self) -> ActionRunner | None: ...

    def index(self, alert: Alert, request: IndicatorRequest | None = None) -> None: ...

    def index_many(self, alerts: Iterable[Alert]) -> None: ...

    def unindex(self, alert: Alert) -> None: ...

    async def write_audit(self) -> None: ...

    def status(self) -> dict[str, Any]: ...

    @property
    def active_count(self) -> int: ...


class AlertService:
    """Alert and notification operations behind the MCP tools."""

    def __init__(
        self,
        store: AlertRepository,
        evaluator: AlertIndex,
        hub: PushHub,
        *,
        default_interval: str,
        check_symbol: SymbolCheck | None = None,
        executor: ActionExecutor | None = None,
        max_alerts_per_principal: int = 10_000,
        channels: Mapping[str, ChannelSettings] | None = None,
        clock: Callable[[], float] = time.time,
        no_executor: str = "action needs the order path: run the daemon with --trade",
    ) -> None:
        self.store = store
        self.evaluator = evaluator
        self.hub = hub
        self.default_interval = default_interval
        self._check_symbol = check_symbol
        self.executor = executor
        """The order path that validates alert actions (None: actions are refused — no --trade)."""
        self.no_executor = no_executor
        """The refusal of an action when there is no executor (a cluster front says why it has none)."""
        self.max_alerts = max_alerts_per_principal
        self.channels: Mapping[str, ChannelSettings] = channels or {}
        """The configured notification channels (by name); each one's ``subscribers`` say who may route to it."""
        self.listeners: list[Callable[[], None]] = []
        """Called after an alert is set or cancelled (the dashboard refreshes its list)."""
        self._clock = clock

    async def start(self) -> int:
        """Index every stored alert (start-up); writes audit lines a crash left unwritten."""
        count = 0
        async for batch in self.store.active_batches():
            self.evaluator.index_many(batch)
            count += len(batch)
        await self.evaluator.write_audit()
        if self.evaluator.actions is not None:
            await self.evaluator.actions.finish_pending()
        log.info("alerts_loaded", count=count)
        return count

    def now(self) -> float:
        """The service's clock (expiry times given relative to it are read against it)."""
        return self._clock()

    async def set_alert(self, principal: str, args: dict[str, Any]) -> dict[str, Any]:
        return await self.set_alert_spec(principal, parse_set_alert(args, self._clock()))

    async def set_alert_spec(self, principal: str, spec: AlertSpec) -> dict[str, Any]:
        """An alert parsed by :func:`alerts.requests.parse_set_alert` (the tool edge parses once)."""
        now = self._clock()
        if self._check_symbol is not None:
            try:
                problem = await self._check_symbol(spec.symbol)
            except MarketDataError as exc:
                raise AlertInputError(f"cannot check symbol {spec.symbol} against the exchange: {exc}") from None
            if problem is not None:
                raise AlertInputError(problem)
        action: dict[str, Any] | None = None
        warnings: list[str] = []
        if spec.order is not None:
            if self.executor is None:
                raise AlertInputError(self.no_executor)
            try:
                normalised, warnings = await self.executor.validate(principal, spec.order)
            except ValueError as exc:
                raise AlertInputError(f"action.place_order: {exc}") from None
            action = {"place_order": normalised}
        alert = Alert(
            id=str(uuid.uuid4()),
            principal=principal,
            symbol=spec.symbol,
            interval=spec.interval or self.default_interval,
            kind=spec.kind,
            threshold=spec.threshold,
            indicator=spec.indicator,
            indicator_name=spec.request.definition.name if spec.request is not None else None,
            params=spec.params,
            signal=spec.signal,
            trigger=spec.trigger,
            created_at=now,
            armed_at=self._exchange_now(spec.symbol, now),
            expires_at=spec.expires_at,
            note=spec.note,
            action=action,
        )
        if not await self.store.insert_capped(alert, self.max_alerts):
            raise AlertInputError(
                f"you have {self.max_alerts} active alerts, the most allowed; cancel some with cancel_alert first"
            )
        self.evaluator.index(alert, spec.request)
        log.info(
            "alert_set",
            alert_id=alert.id,
            symbol=alert.symbol,
            kind=alert.kind,
            interval=alert.interval,
            action=action is not None,
        )
        self._changed()
        out: dict[str, Any] = {"alert_id": alert.id}
        if action is not None:
            out["action"] = action
        if warnings:
            out["warnings"] = warnings
        return out

    def _exchange_now(self, symbol: str, now: float) -> float:
        """The exchange's current time as the engine last saw it (the daemon's clock when unknown)."""
        market_ms = self.evaluator.market.exchange_time_ms(symbol)
        return now if market_ms is None else market_ms / 1000.0

    async def list_alerts(self, principal: str) -> list[dict[str, Any]]:
        return [a.listing() for a in await self.store.of_principal(principal)]

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()

    async def cancel_alert(self, principal: str | None, alert_id: Any) -> dict[str, Any]:
        """Cancel one of ``principal``'s alerts (None: anybody's — the operator's dashboard)."""
        if alert_id is None or alert_id == "":
            raise AlertInputError("alert_id is required")
        if not isinstance(alert_id, str) or len(alert_id) > 64:
            raise AlertInputError("alert_id must be the id string set_alert returned")
        alert = await self.store.remove(principal, alert_id, "cancelled", self._clock())
        if alert is None:
            raise AlertInputError(f"alert not found: {alert_id}")
        self.evaluator.unindex(alert)
        self._changed()
        log.info("alert_cancelled", alert_id=alert_id)
        return {"ok": True}

    async def get_notifications(self, principal: str) -> list[dict[str, Any]]:
        return await self.store.drain(principal)

    async def subscribe_to(
        self,
        principal: str,
        symbols: tuple[str, ...] | None,
        types: tuple[str, ...] | None,
        channels: tuple[str, ...] | None = None,
        names: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """Push subscription with filters already read (None: everything); ``channels``: the principal's own
        notification channels (names of the operator's ``[channels.NAME]``) that also get the matching ones,
        each of which must list the principal (its id, or one of its token or OAuth client ``names``) in
        ``subscribers``."""
        unknown = [c for c in channels or () if c not in self.channels]
        if unknown:
            known = ", ".join(sorted(self.channels)) or "none are configured"
            raise AlertInputError(
                f"channels: unknown channel(s) {unknown[:5]}; the configured channels are: {known} "
                "(the operator adds [channels.NAME] tables to the configuration file)"
            )
        refused = [c for c in channels or () if not self.channels[c].may_subscribe(principal, names)]
        if refused:
            raise AlertInputError(
                f"channels: {refused[0]!r} is not granted to this client; the operator grants a channel with "
                f'channels.{refused[0]}.subscribers = ["<token or OAuth client name>"] (or ["*"]) in the '
                "configuration file; without it only notify_all_channels routes notifications there"
            )
        sub = Subscription(principal=principal, symbols=symbols, alert_types=types, channels=channels)
        await self.store.subscribe(sub, self._clock())
        out: dict[str, Any] = {
            "status": "subscribed",
            "symbols": None if symbols is None else list(symbols),
            "alert_types": None if types is None else list(types),
        }
        if channels is not None:
            out["channels"] = list(channels)
        return out

    async def unsubscribe(self, principal: str) -> dict[str, Any]:
        removed = await self.store.unsubscribe(principal)
        return {"status": "unsubscribed" if removed else "not_found"}

    async def list_subscriptions(self, principal: str) -> dict[str, Any]:
        sub = await self.store.subscription(principal)
        if sub is None:
            return {"subscribed": False}
        return {
            "subscribed": True,
            "symbols": None if sub.symbols is None else list(sub.symbols),
            "alert_types": None if sub.alert_types is None else list(sub.alert_types),
            **({} if sub.channels is None else {"channels": list(sub.channels)}),
            "offline_queue_size": await self.store.offline_size(principal, self._clock()),
            "connected": self.hub.connected(principal),
        }
