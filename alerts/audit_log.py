"""The trades.log lines of fired alerts: :class:`AlertAuditLog`, their batched writer.

The line itself (contract §5.8) is spelled by :mod:`alerts.trades_line`.  This module appends
the lines of fired alerts not recorded as written yet.  It runs off the firing path: the
evaluator only marks that something fired, and a background task writes every firing of a
short coalescing window in one pass (also run once at start-up for firings a crash left
unlogged).  A pass reads only the fields a line needs, extracted by SQLite on the database
thread (``json_extract``), not records parsed on the loop.

Progress is one high-water mark, the ``alert_events`` rowid up to which every fired row has its
line (``alert_counters.audit_logged_rowid``, alerts schema step 4): a pass reads the rows above
it in rowid (= commit) order and moves the mark with a one-row update on the loop's own
connection (``Database.run_transaction_on_loop``).  Lines are written before the mark moves,
so a crash in between writes them again on restart, never not at all.

Why it is built so (``bench/alerts_push.py``, tick → SSE at 1,000 firings a second, AMD EPYC
2 cores): the passes used to parse each row's record into an Alert on the loop (~20 µs a row,
stalls of 5 ms and more), and to set a ``logged`` flag per row (~260 rows and their partial
index, on the database thread, holding the write lock every firing waits for for 1–19 ms; in
two of three runs 32–40 % of the bench's slowest 2 % fell inside one of those windows, which
covered 3–6 % of all ticks).  The mark's update holds it 0.05–0.23 ms.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from alerts.repository import AlertRepository
from alerts.store import AlertStore
from alerts.trades_line import trades_line

AuditWriter = Callable[[Sequence[str]], Awaitable[None]]
"""Appends lines to trades.log (the daemon's ``TradesLog.append``)."""


AUDIT_COALESCE_S = 0.25
"""How long firings accumulate before their trades.log lines are written together."""


class AuditEntry(NamedTuple):
    """A fired alert whose trades.log line is not written yet."""

    alert_id: str
    rowid: int
    """Its ``alert_events`` row: the mark moves past it once the line is written."""
    line: str


_MARK = "audit_logged_rowid"
_UNLOGGED = (
    "SELECT alert_id, rowid, at, json_extract(record, '$.kind'), json_extract(record, '$.threshold'),"
    " json_extract(record, '$.indicator'), json_extract(record, '$.signal'),"
    " json_extract(record, '$.symbol'), json_extract(record, '$.interval')"
    " FROM alert_events"
    f" WHERE rowid > (SELECT value FROM alert_counters WHERE name = '{_MARK}')"
    " AND outcome = 'fired' AND logged = 0 ORDER BY rowid LIMIT ?"
)


class AlertAuditLog:
    """Writes the trades.log lines of fired alerts not yet logged, in coalesced passes."""

    def __init__(self, store: AlertRepository, write: AuditWriter | None) -> None:
        self.store = store
        """The evaluator's store; the lines are read from SQLite's ``alert_events``, so a writer is only
        given with the single-node :class:`AlertStore` (a cluster worker passes none)."""
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
        await self._write([entry.line for entry in pending])
        await self.mark_logged(pending[-1].rowid)

    async def unlogged(self, limit: int = 10_000) -> list[AuditEntry]:
        """Fired alerts whose trades.log line is not written yet, in the order they were committed."""
        rows = await self._sqlite().db.fetchall(_UNLOGGED, (limit,))
        return [AuditEntry(r[0], int(r[1]), trades_line(r[0], float(r[2]), *r[3:])) for r in rows]

    async def mark_logged(self, rowid: int) -> None:
        """Every fired row up to ``rowid`` has its line (the mark never moves back)."""

        def mark(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE alert_counters SET value = ? WHERE name = ? AND value < ?", (rowid, _MARK, rowid))

        await self._sqlite().db.run_transaction_on_loop(mark)

    def _sqlite(self) -> AlertStore:
        store = self.store
        if not isinstance(store, AlertStore):
            raise TypeError(f"the trades.log audit reads SQLite's alert_events; {type(store).__name__} has none")
        return store
