"""The verified-token cache: bearer checks without a database round trip, revoked at once.

Every request carries a bearer token; reading it from SQLite costs a hop to the database
thread (~0.3 ms under load).  Verified tokens are kept in memory by their SHA-256 (never the
token text), with everything the store returned for them (principal, scopes, expiry), and
still checked for expiry on each use.  A revocation anywhere — `chartgen
token revoke` in another process, OAuth's /revoke, a replayed code or refresh token — replaces
a small marker file next to the database (``chartgen.db-tokens``); each check compares the
marker's identity (one ``stat``) and drops the whole cache when it changed, so the next request
with a revoked token reads the database and is refused.  In-memory databases (tests) have no
marker and no cache.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import weakref
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")

MARKER_SUFFIX = "-tokens"


def marker_for(db_path: Path | None) -> Path | None:
    return None if db_path is None else db_path.with_name(db_path.name + MARKER_SUFFIX)


_LOCAL: weakref.WeakSet[VerifiedTokenCache[Any]] = weakref.WeakSet()


def signal_revocation(db_path: Path | None) -> bool:
    """Tell every process using this database that tokens were revoked.

    This process's caches are dropped first, whatever happens next; then the marker is
    replaced (atomically: a new inode each time, so the change is seen whatever the file
    system's timestamp resolution).  False when the marker could not be written (disk full,
    read-only): other processes then keep their cache until it is written or they restart.
    """
    for cache in list(_LOCAL):
        cache.clear()
    marker = marker_for(db_path)
    if marker is None:
        return True
    tmp = marker.with_name(f"{marker.name}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(secrets.token_hex(8))
        os.replace(tmp, marker)
    except OSError as exc:
        log.error("token_revocation_marker_failed", marker=str(marker), error=str(exc))
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


class VerifiedTokenCache(Generic[T]):
    """Token hash → what the store returned, valid until the revocation marker changes."""

    def __init__(self, db_path: Path | None, max_entries: int = 10_000) -> None:
        self.marker = marker_for(db_path)
        self.max_entries = max_entries
        self._entries: dict[str, T] = {}
        self._seen: tuple[int, int, int] | None = None
        _LOCAL.add(self)

    @property
    def enabled(self) -> bool:
        return self.marker is not None

    def _current(self) -> tuple[int, int, int]:
        assert self.marker is not None
        try:
            st = os.stat(self.marker)
        except FileNotFoundError:
            return (0, 0, 0)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def get(self, token_hash: str) -> T | None:
        if self.marker is None:
            return None
        current = self._current()
        if current != self._seen:
            self._entries.clear()
            self._seen = current
            return None
        return self._entries.get(token_hash)

    def put(self, token_hash: str, value: T, seen_before_read: tuple[int, int, int] | None) -> None:
        """Keep ``value`` unless the marker changed since the read began (a revocation raced it)."""
        if self.marker is None or seen_before_read is None or seen_before_read != self._current():
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[token_hash] = value

    def snapshot(self) -> tuple[int, int, int] | None:
        """The marker's identity now (taken before a database read, passed back to ``put``)."""
        return None if self.marker is None else self._current()

    def clear(self) -> None:
        self._entries.clear()
