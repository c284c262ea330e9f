"""The daemon's garbage-collector policy: the start-up heap is frozen out of full collections.

Everything the daemon builds before it serves — modules, classes, pydantic and MCP schemas,
ccxt's exchange classes, the alerts and schedules loaded from the database — lives until it
stops, yet CPython's full (generation 2) collection walks all of it every time enough new
objects have survived.  With ``chartgen --serve --trade --sim`` that was 270,000–340,000
objects and each full collection stopped the event loop for 170–205 ms (median 171 ms, 16 of
them while ``python -m bench.alerts`` set 2,600 alerts over MCP, AMD EPYC 2 cores); every
tick, request and push waiting meanwhile. ``gc.freeze()`` once start-up is done moves those
objects to the permanent generation, which collections skip: the same run's full collections
took about 2 ms.  A cycle that becomes garbage among the frozen objects is never freed —
hence the collection just before the freeze, and nothing frozen later.
"""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger(__name__)


def freeze_startup_heap() -> int:
    """Collect once, then freeze every object alive; returns how many are frozen (call once, when serving starts)."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("startup_heap_frozen", objects=frozen)
    return frozen
