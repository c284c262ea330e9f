"""Alert changes announced on PostgreSQL's ``LISTEN``/``NOTIFY``, for the cluster's workers.

A worker evaluates the alerts of the markets it owns (daemon/worker/runtime.py) and learns of
alerts set or cancelled through any front from these notifications, sent inside the transaction
that made the change (PostgreSQL delivers them at commit, never for a rolled-back one).  A firing
sends none: the worker that fired already knows, and any other holder finds the alert gone when
it tries.  Payloads are plain text, well under PostgreSQL's 8,000-byte limit:

- ``set SYMBOL INTERVAL ID`` — an alert was armed on that market;
- ``gone SYMBOL INTERVAL ID`` — it was cancelled or expired;
- ``reload`` — a bulk insert: re-read the alerts of every owned market.

A notification sent while a listener was disconnected is lost, so a worker re-reads its markets'
alerts after every reconnect (storage/postgres.py ``Listener``).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from alerts.models import Alert

ALERTS_CHANNEL = "chartgen_alerts"


@dataclass(frozen=True, slots=True)
class AlertChange:
    op: str
    """``set``, ``gone`` or ``reload``."""
    symbol: str = ""
    interval: str = ""
    alert_id: str = ""


def parse_change(payload: str) -> AlertChange | None:
    """The change a payload announces; None for one this code does not know (a newer sender)."""
    parts = payload.split(" ")
    if parts == ["reload"]:
        return AlertChange("reload")
    if len(parts) == 4 and parts[0] in ("set", "gone"):
        return AlertChange(parts[0], parts[1], parts[2], parts[3])
    return None


async def _notify(conn: asyncpg.Connection, payload: str) -> None:
    await conn.execute("SELECT pg_notify($1, $2)", ALERTS_CHANNEL, payload)


async def notify_set(conn: asyncpg.Connection, alert: Alert) -> None:
    await _notify(conn, f"set {alert.symbol} {alert.interval} {alert.id}")


async def notify_gone(conn: asyncpg.Connection, alert: Alert) -> None:
    await _notify(conn, f"gone {alert.symbol} {alert.interval} {alert.id}")


async def notify_reload(conn: asyncpg.Connection) -> None:
    await _notify(conn, "reload")
