"""Scopes in the token store: stored with each token, carried by the verified-token cache, and
given to tokens of a database from before scopes existed by the migration (charts, alerts, trade)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from daemon import ALL_MIGRATIONS
from mcp_bridge.oauth.store import MIGRATIONS as OAUTH_MIGRATIONS
from mcp_bridge.oauth.store import OAuthStore
from mcp_bridge.tokens import MIGRATIONS as TOKEN_MIGRATIONS
from mcp_bridge.tokens import TokenError, TokenStore, hash_token
from storage import Database, Migrations


def first_step(m: Migrations) -> Migrations:
    return Migrations(m.package, m.steps[:1])


async def test_tokens_of_a_database_from_before_scopes_get_charts_alerts_trade(tmp_path: Path) -> None:
    path = tmp_path / "chartgen.db"
    old = await Database.open(path)
    await old.migrate([first_step(TOKEN_MIGRATIONS), first_step(OAUTH_MIGRATIONS)])
    now = time.time()
    async with old.transaction() as tx:
        await tx.execute(
            "INSERT INTO access_tokens (id, name, kind, principal, token_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            ("tok_old", "laptop", "pat", "tok_old", hash_token("cg_pat_old"), now),
        )
        await tx.execute(
            "INSERT INTO access_tokens (id, name, kind, principal, token_hash, created_at, expires_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            ("tok_oat", "client-1", "oauth", "oauth:client-1", hash_token("cg_oat_old"), now, now + 3600),
        )
        await tx.execute(
            "INSERT INTO oauth_clients (client_id, info, created_at) VALUES (?, ?, ?)",
            ("client-1", json.dumps({"client_id": "client-1", "redirect_uris": ["http://localhost:1/cb"]}), now),
        )
        await tx.execute(
            "INSERT INTO oauth_refresh_tokens (token_hash, client_id, principal, scopes, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (hash_token("cg_ort_old"), "client-1", "oauth:client-1", "mcp", now),
        )
    await old.close()

    db = await Database.open(path)
    try:
        await db.migrate(ALL_MIGRATIONS)
        tokens = TokenStore(db)
        pat = await tokens.verify("cg_pat_old")
        oat = await tokens.verify("cg_oat_old")
        assert pat is not None and pat.scopes == {"charts", "alerts", "trade"}
        assert oat is not None and oat.scopes == {"charts", "alerts", "trade"}
        refresh = await OAuthStore(db).refresh("cg_ort_old")
        assert refresh is not None and sorted(refresh.scopes) == ["alerts", "charts", "trade"]
        # the client had tokens, so it counts as consented and never expires as junk
        assert await OAuthStore(db).client_counts() == (1, 0)
    finally:
        await db.close()


async def test_a_new_token_has_charts_and_alerts_unless_told_and_the_cache_carries_its_scopes(db: Database) -> None:
    store = TokenStore(db)
    plain, info = await store.create("plain")
    assert info.scopes == {"charts", "alerts"}
    trader, _ = await store.create("trader", scopes={"charts", "trade"})
    for token, want in ((plain, {"charts", "alerts"}), (trader, {"charts", "trade"})):
        first = await store.verify(token)
        assert first is not None and first.scopes == want
        assert store.cache.get(hash_token(token)) == first  # served from memory next time, scopes and all
        again = await store.verify(token)
        assert again is not None and again.scopes == want
    listed = {t.name: t.scopes for t in await store.list()}
    assert listed == {"plain": {"charts", "alerts"}, "trader": {"charts", "trade"}}


async def test_an_unknown_scope_is_refused_and_a_row_without_scopes_grants_nothing(db: Database) -> None:
    store = TokenStore(db)
    with pytest.raises(TokenError, match="valid scopes are charts, alerts, trade, admin"):
        await store.create("x", scopes={"charts", "everything"})
    token, info = await store.create("y")
    await db.execute("UPDATE access_tokens SET scopes = NULL WHERE id = ?", (info.id,))
    store.cache.clear()
    found = await store.verify(token)
    assert found is not None and found.scopes == frozenset()
