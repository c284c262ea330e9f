"""Reading a traced SQLite statement log: under which ``synchronous`` level each transaction committed.

``PRAGMA synchronous`` is per connection, not per table, so durability tests trace the
statements the connection runs (``Database.trace_statements``) and read them back here.
"""

from __future__ import annotations

NORMAL, FULL = 1, 2


def committed_under(trace: list[str], fragment: str) -> set[int]:
    """The synchronous levels of the transactions in ``trace`` that ran a statement containing ``fragment``."""
    mode, inside, hit, out = NORMAL, False, False, set()
    for sql in trace:
        text = " ".join(sql.split()).upper()
        if text.startswith("PRAGMA SYNCHRONOUS ="):
            mode = FULL if text.endswith("FULL") else NORMAL
        elif text.startswith("BEGIN"):
            inside, hit = True, False
        elif text.startswith("COMMIT") and inside:
            if hit:
                out.add(mode)
            inside = False
        elif inside and fragment.upper() in text:
            hit = True
    return out
