"""What revoking a principal stops: its trading, its schedules and its alerts' actions — in the revoking transaction.

A principal (a personal access token's id, ``oauth:<client_id>`` for an OAuth grant) whose last
credential is revoked must never place another order.  The transaction that revokes the tokens
(:meth:`mcp_bridge.tokens.TokenStore.revoke_all`, :meth:`mcp_bridge.oauth.store.OAuthStore.revoke_grant`
/ ``revoke_access``, and their PostgreSQL twins) calls :func:`stop_principals_in` (SQLite) or
:func:`stop_principals` (PostgreSQL) with the principals of the tokens it revoked; for each one left
with no live credential — no active access token, no usable OAuth refresh token — it:

- marks it revoked (``revoked_principals``, brokers/suspensions.py): order admission refuses its
  every order from then on, whatever path it comes by (the backstop for anything in flight);
- cancels its active schedules (brokers/schedules/store.py ``cancel_owners_in``);
- removes the action of each of its armed alerts (alerts/action_store.py ``strip_actions_in``): the
  alerts stay, as plain alerts, so the owner's notifications keep coming.

All of it commits or none does.  Orders already on the exchange are not touched here (``--cancel-open``
asks the daemon to cancel them); the exit OCO of a bracket whose entry has filled is still placed and
kept — it only reduces a position, and cancelling it would leave the position unprotected.  Revoking
only an OAuth access token while its grant's refresh token lives stops nothing: the grant goes on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from alerts import strip_actions, strip_actions_in
from brokers import cancel_owners, cancel_owners_in, mark_revoked, mark_revoked_in


@dataclass(frozen=True, slots=True)
class Stopped:
    """What one revocation stopped."""

    principals: list[str] = field(default_factory=list)
    """The principals left without a live credential (they place no more orders)."""
    schedules: list[str] = field(default_factory=list)
    """The ids of the schedules cancelled."""
    alert_actions: list[str] = field(default_factory=list)
    """The ids of the alerts whose action was removed (the alerts stay)."""

    def lines(self) -> list[str]:
        """What the CLI prints."""
        if not self.principals:
            return []
        return [
            f"stopped trading of {', '.join(self.principals)}: {len(self.schedules)} schedule(s) cancelled"
            + (f" ({', '.join(self.schedules)})" if self.schedules else "")
            + f", {len(self.alert_actions)} alert action(s) removed"
            + (f" (alerts {', '.join(self.alert_actions)} stay as plain alerts)" if self.alert_actions else "")
        ]

    def public(self) -> dict[str, Any]:
        return {"principals": self.principals, "schedules": self.schedules, "alert_actions": self.alert_actions}


_LIVE_SQLITE = (
    "SELECT EXISTS (SELECT 1 FROM access_tokens WHERE principal = ? AND revoked_at IS NULL"
    " AND (expires_at IS NULL OR expires_at > ?))"
    " OR EXISTS (SELECT 1 FROM oauth_refresh_tokens WHERE principal = ? AND revoked_at IS NULL AND used_at IS NULL"
    " AND (expires_at IS NULL OR expires_at > ?))"
)
_LIVE_PG = (
    "SELECT EXISTS (SELECT 1 FROM access_tokens WHERE principal = $1 AND revoked_at IS NULL"
    " AND (expires_at IS NULL OR expires_at > $2))"
    " OR EXISTS (SELECT 1 FROM oauth_refresh_tokens WHERE principal = $1 AND revoked_at IS NULL AND used_at IS NULL"
    " AND (expires_at IS NULL OR expires_at > $2))"
)


def stop_principals_in(conn: sqlite3.Connection, principals: Sequence[str], now: float) -> Stopped:
    """Inside the revoking SQLite transaction (see the module docstring)."""
    gone = sorted(p for p in set(principals) if not conn.execute(_LIVE_SQLITE, (p, now, p, now)).fetchone()[0])
    if not gone:
        return Stopped()
    mark_revoked_in(conn, gone, now)
    return Stopped(gone, cancel_owners_in(conn, gone, now), strip_actions_in(conn, gone))


async def stop_principals(conn: asyncpg.Connection, principals: Sequence[str], now: float) -> Stopped:
    """Inside the revoking PostgreSQL transaction (see the module docstring)."""
    gone = sorted([p for p in set(principals) if not await conn.fetchval(_LIVE_PG, p, now)])
    if not gone:
        return Stopped()
    await mark_revoked(conn, gone, now)
    return Stopped(gone, await cancel_owners(conn, gone, now), await strip_actions(conn, gone))
