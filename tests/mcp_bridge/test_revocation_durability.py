"""Revocations commit with ``synchronous=FULL``: a power loss must not bring a revoked token back.

Personal token revocation and the OAuth state changes that invalidate something (a used
code, a rotated refresh token, a revoked grant or access token, a new passphrase) are
traced at the connection and must have committed under FULL.
"""

from __future__ import annotations

from mcp_bridge.oauth.store import OAuthStore
from mcp_bridge.tokens import TokenStore
from storage import Database
from testkit.sqlite_trace import FULL, NORMAL, committed_under


async def test_token_revocation_commits_with_full(db: Database) -> None:
    tokens = TokenStore(db)
    await tokens.create("laptop")
    trace: list[str] = []
    await db.trace_statements(trace.append)
    await tokens.revoke("laptop")
    await db.trace_statements(None)
    assert committed_under(trace, "UPDATE access_tokens SET revoked_at") == {FULL}
    assert await db.synchronous() == NORMAL


async def test_oauth_revocations_and_passphrase_commit_with_full(db: Database) -> None:
    store = OAuthStore(db)
    trace: list[str] = []
    await db.trace_statements(trace.append)
    await store.revoke_grant("client-1")
    await store.revoke_access("token-1")
    await store.set_passphrase_hash("scrypt$x")
    await store.consume_code("code-1", lambda tx: None)
    await db.trace_statements(None)
    levels = [committed_under(trace, fragment) for fragment in ("UPDATE", "INSERT")]
    assert set().union(*levels) == {FULL}, trace
    assert await db.synchronous() == NORMAL
