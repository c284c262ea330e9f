"""The verified-token cache: a cached token still honours expiry, and a revocation — by the
``chartgen token revoke`` command in another process or inside the daemon — is refused on the
very next request."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from mcp_bridge.token_cache import marker_for
from mcp_bridge.tokens import TokenStore
from storage import Database
from testkit.daemon_proc import DaemonProc, clean_env, create_token, start_daemon


async def test_a_cached_token_is_served_from_memory_and_dropped_on_revocation(db: Database) -> None:
    store = TokenStore(db)
    token, info = await store.create("a")
    assert (await store.verify(token)) == info
    reads = 0
    real_fetchone = db.fetchone

    async def counting(*args: object) -> object:
        nonlocal reads
        reads += 1
        return await real_fetchone(*args)  # type: ignore[arg-type]

    db.fetchone = counting  # type: ignore[method-assign]
    for _ in range(5):
        assert (await store.verify(token)) == info
    assert reads == 0, "a verified token should not need the database again"

    await store.revoke("a")
    assert await store.verify(token) is None
    assert reads == 1


async def test_another_process_revoking_is_seen_at_once(db: Database) -> None:
    """A second store on its own connection (as the CLI has) revokes; the first sees it next time."""
    store = TokenStore(db)
    token, _ = await store.create("b")
    assert await store.verify(token) is not None
    other = await Database.open(db.path)  # type: ignore[arg-type]
    try:
        await TokenStore(other).revoke("b")
    finally:
        await other.close()
    assert marker_for(db.path) is not None and marker_for(db.path).exists()  # type: ignore[union-attr]
    assert await store.verify(token) is None


async def test_expiry_applies_to_cached_tokens(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    import mcp_bridge.tokens as tokens_module

    store = TokenStore(db)
    token, _ = await store.create("c", ttl_s=60)
    assert await store.verify(token) is not None
    later = tokens_module.time.time() + 120
    monkeypatch.setattr(tokens_module.time, "time", lambda: later)
    assert await store.verify(token) is None


async def revoke_with_cli(data_dir: Path, name: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon", "token", "--data-dir", str(data_dir), "revoke", name,
        env=clean_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    proc = await start_daemon(["--serve"], data_dir=tmp_path)
    try:
        yield proc
    finally:
        await proc.stop()


@pytest.mark.process
async def test_chartgen_token_revoke_takes_effect_on_the_next_request(daemon: DaemonProc, tmp_path: Path) -> None:
    token = await create_token(tmp_path, "cli-revoked")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_indicators", "arguments": {}}}
    headers = {"authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        for _ in range(3):  # verified, then served from the cache
            async with http.post(daemon.mcp_url, json=body, headers=headers) as r:
                assert r.status == 200
        await revoke_with_cli(tmp_path, "cli-revoked")
        async with http.post(daemon.mcp_url, json=body, headers=headers) as r:
            assert r.status == 401
