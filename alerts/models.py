"""The alert engine's records: alerts, fired notifications, push subscriptions.

These are the persisted shapes (pydantic, validated on the way in and out of SQLite) and
the wire shapes of chartgen's tools (contract §2.9-2.15, §5.9), which they render.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, field_validator

AlertKind = Literal["price_above", "price_below", "indicator_signal"]
ALERT_KINDS: tuple[str, ...] = ("price_above", "price_below", "indicator_signal")


Trigger = Literal["touch", "close"]


def is_alert_kind(kind: str) -> TypeGuard[AlertKind]:
    """Whether ``kind`` is one of :data:`ALERT_KINDS` (an :data:`AlertKind` to the type checker)."""
    return kind in ALERT_KINDS


def rfc3339(ts: float) -> str:
    """chartgen's timestamp spelling: RFC 3339 with a ``+00:00`` offset."""
    return datetime.fromtimestamp(ts, UTC).isoformat()


class Alert(BaseModel):
    """One active one-shot alert, owned by ``principal`` (a token's identity or the stdio session)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    principal: str
    symbol: str
    interval: str
    kind: AlertKind
    threshold: float | None = None
    indicator: str | None = None
    """The indicator as the client named it (alias kept for display)."""
    indicator_name: str | None = None
    """Its canonical name."""
    params: dict[str, Any] = Field(default_factory=dict)
    signal: str | None = None
    trigger: Trigger = "touch"
    created_at: float
    armed_at: float | None = None
    """Exchange time (unix seconds) when the alert was set: only bars closing after it count."""
    expires_at: float | None = None
    note: str | None = None
    action: dict[str, Any] | None = None
    """``{"place_order": {...}}``: the normalised place_order arguments run once when it fires
    (see :mod:`alerts.actions`); None for a notification-only alert."""

    @field_validator("threshold")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and (not math.isfinite(v) or v <= 0):
            raise ValueError("threshold must be a finite positive number")
        return v

    def condition(self) -> dict[str, Any]:
        """chartgen's ``condition`` object (list_alerts, get_notifications)."""
        if self.kind == "indicator_signal":
            body: dict[str, Any] = {"indicator": self.indicator, "signal": self.signal}
            if self.params:
                body["params"] = self.params
            return {"indicator_signal": body}
        return {self.kind: self.threshold}

    def push_condition(self) -> dict[str, Any]:
        """The ``condition`` of a push frame (contract §5.9: tagged with ``type``)."""
        if self.kind == "indicator_signal":
            out: dict[str, Any] = {"type": "indicator_signal", "indicator": self.indicator, "signal": self.signal}
            if self.params:
                out["params"] = self.params
            return out
        return {"type": self.kind, "threshold": self.threshold}

    def listing(self) -> dict[str, Any]:
        """One entry of list_alerts."""
        out: dict[str, Any] = {
            "id": self.id,
            "symbol": self.symbol,
            "condition": self.condition(),
            "created_at": rfc3339(self.created_at),
            "interval": self.interval,
        }
        if self.kind != "indicator_signal":
            out["trigger"] = self.trigger
        if self.expires_at is not None:
            out["expires_at"] = rfc3339(self.expires_at)
        if self.note is not None:
            out["note"] = self.note
        if self.action is not None:
            out["action"] = self.action
        return out


class Firing(BaseModel):
    """Why and when an alert fired: the value that met it and the bar it belongs to."""

    model_config = ConfigDict(frozen=True)

    alert_id: str
    value: float
    triggered_at: float
    bar_time: int | None = None
    """Open time (unix seconds) of the bar the value belongs to."""


def notification_payload(alert: Alert, firing: Firing, action: dict[str, Any] | None = None) -> dict[str, Any]:
    """An entry of get_notifications (contract §2.12 plus interval, bar_time and note, and the
    action's outcome for an alert that places an order)."""
    out: dict[str, Any] = {
        "alert_id": alert.id,
        "symbol": alert.symbol,
        "interval": alert.interval,
        "condition": alert.condition(),
        "triggered_at": rfc3339(firing.triggered_at),
        "value": firing.value,
        "bar_time": None if firing.bar_time is None else rfc3339(firing.bar_time),
        "note": alert.note,
    }
    if action is not None:
        out["action"] = action
    return out


def push_frame(alert: Alert, firing: Firing, action: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``notifications/alert_triggered`` JSON-RPC notification (contract §5.9, interval filled in;
    ``action`` as in :func:`notification_payload`)."""
    frame: dict[str, Any] = {
        "jsonrpc": "2.0",
        "method": "notifications/alert_triggered",
        "params": {
            "alert_id": alert.id,
            "symbol": alert.symbol,
            "interval": alert.interval,
            "condition": alert.push_condition(),
            "value": firing.value,
            "triggered_at": rfc3339(firing.triggered_at),
            "bar_time": None if firing.bar_time is None else rfc3339(firing.bar_time),
            "note": alert.note,
        },
    }
    if action is not None:
        frame["params"]["action"] = action
    return frame


class Subscription(BaseModel):
    """A principal's push subscription: filters (None = everything)."""

    model_config = ConfigDict(frozen=True)

    principal: str
    symbols: tuple[str, ...] | None = None
    alert_types: tuple[str, ...] | None = None
    channels: tuple[str, ...] | None = None
    """Notification channels (``[channels.NAME]``) this principal routes its matching notifications to."""

    def matches(self, alert: Alert) -> bool:
        if self.symbols is not None and alert.symbol not in self.symbols:
            return False
        return self.alert_types is None or alert.kind in self.alert_types
