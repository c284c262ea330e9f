"""The trades.log lines of fired alerts: chartgen's ``ALERT_TRIGGERED`` line and its batched writer.

Owns the line format (contract §5.8) and :class:`AlertAuditLog`, which appends the lines of
the fired alerts the store has not marked logged yet.  It runs off the firing path: the
evaluator only marks that something fired, and a background task writes every firing of a
short coalescing window in one pass (also run once at start-up for firings a crash left
unlogged).

A pass reads only the fields a line needs, extracted by SQLite on the database thread
(``json_extract``), and marks the rows in one hand-off: parsing each fired alert's record into
an :class:`~alerts.models.Alert` on the event loop cost about 20 µs a row, so at 1,000 firings
a second every pass stalled the loop for 5 ms or more, which was the tick → SSE p99
(``bench/alerts_push.py``: p99 8.8–26.6 ms with those passes against 6.5–12.3 ms without any).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from alerts.store import AlertStore

AuditWriter = Callable[[Sequence[str]], Awaitable[None]]
"""Appends lines to trades.log (the daemon's ``TradesLog.append``)."""


AUDIT_COALESCE_S = 0.25
"""How long firings accumulate before their trades.log lines are written together."""


def _rust_float(x: float | None) -> str:
    """Rust's ``{:?}`` of an f64 (``50000.0``, ``0.85``, ``1e20``), as chartgen writes it."""
    if x is None:
        return "NaN"
    text = repr(float(x))
    return text.replace("e+", "e")


class AuditEntry(NamedTuple):
    """What a trades.log line says of one fired alert."""

    alert_id: str
    fired_at: float
    kind: str
    threshold: float | None
    indicator: str | None
    signal: str | None
    symbol: str
    interval: str


_UNLOGGED = (
    "SELECT alert_id, at, json_extract(record, '$.kind'), json_extract(record, '$.threshold'),"
    " json_extract(record, '$.indicator'), json_extract(record, '$.signal'),"
    " json_extract(record, '$.symbol'), json_extract(record, '$.interval')"
    " FROM alert_events WHERE logged = 0 AND outcome = 'fired' ORDER BY at LIMIT ?"
)


def audit_line(alert: AuditEntry) -> str:
    """chartgen's trades.log line for a fired alert (contract §5.8)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(alert.fired_at))
    if alert.kind == "price_above":
        cond = f"PriceAbove({_rust_float(alert.threshold)})"
    elif alert.kind == "price_below":
        cond = f"PriceBelow({_rust_float(alert.threshold)})"
    else:
        cond = f'IndicatorSignal {{ indicator: "{alert.indicator}", signal: "{alert.signal}" }}'
    return f"{stamp} ALERT_TRIGGERED id={alert.alert_id} {cond} {alert.symbol} {alert.interval}"


class AlertAuditLog:
    """Writes the trades.log lines of fired alerts not yet logged, in coalesced passes."""

    def __init__(self, store: AlertStore, write: AuditWriter | None) -> None:
        self.store = store
        self._write = write
        self._due = asyncio.Event()

    def mark_due(self) -> None:
        """Alerts fired: the next pass of :meth:`run` writes their lines."""
        self._due.set()

    async def run(self, coalesce_s: float = AUDIT_COALESCE_S) -> None:
        """Background task: append trades.log lines for fired alerts, batched (never on the firing path).

        Firings within ``coalesce_s`` share one pass: each pass is two database round trips
        (read the unlogged rows, mark them), and at 1,000 firings/s running one per firing
        kept the database busy when the next firing wanted it (tick → SSE p50 9.0 → 5.5 ms
        when removed, ``bench/alerts_push.py``)."""
        while True:
            await self._due.wait()
            await asyncio.sleep(coalesce_s)  # coalescing window, not synchronisation
            self._due.clear()
            await self.write()

    async def write(self) -> None:
        """Append trades.log lines for fired alerts not yet logged (also run at start-up)."""
        if self._write is None:
            return
        pending = await self.unlogged()
        if not pending:
            return
        await self._write([audit_line(entry) for entry in pending])
        await self.mark_logged([entry.alert_id for entry in pending])

    async def unlogged(self, limit: int = 10_000) -> list[AuditEntry]:
        """Fired alerts whose trades.log line is not written yet (oldest first)."""
        rows = await self.store.db.fetchall(_UNLOGGED, (limit,))
        return [AuditEntry(r[0], float(r[1]), r[2], r[3], r[4], r[5], r[6], r[7]) for r in rows]

    async def mark_logged(self, alert_ids: Sequence[str]) -> None:
        def mark(conn: sqlite3.Connection) -> None:
            conn.executemany("UPDATE alert_events SET logged = 1 WHERE alert_id = ?", [(a,) for a in alert_ids])

        await self.store.db.run_transaction(mark)
