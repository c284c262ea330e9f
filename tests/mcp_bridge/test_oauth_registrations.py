"""Junk OAuth registrations cannot block a real client: clients that never completed a consent
expire after an hour, and past the cap a registration evicts the oldest of them instead of being
refused; a client that consented once is never evicted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp.server.auth.provider import AuthorizationParams
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import AnyUrl

from daemon import ALL_MIGRATIONS
from mcp_bridge.oauth.provider import ChartgenOAuthProvider
from mcp_bridge.oauth.store import OAuthStore
from mcp_bridge.tokens import TokenStore
from storage import Database
from testkit.oauth import REDIRECT, client, pkce

pytestmark = pytest.mark.slow


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[ChartgenOAuthProvider]:
    db = await Database.open(tmp_path / "chartgen.db")
    await db.migrate(ALL_MIGRATIONS)
    try:
        yield ChartgenOAuthProvider(
            OAuthStore(db), TokenStore(db), base_url="http://127.0.0.1:9315", redirect_hosts=["localhost"]
        )
    finally:
        await db.close()


async def consented(provider: ChartgenOAuthProvider, info: OAuthClientInformationFull) -> None:
    """Run /authorize's provider step and the operator's approval for ``info``."""
    _, challenge = pkce()
    params = AuthorizationParams(
        state="s",
        scopes=None,
        code_challenge=challenge,
        redirect_uri=AnyUrl(REDIRECT),
        redirect_uri_provided_explicitly=True,
    )
    url = await provider.authorize(info, params)
    request_id = url.split("request=")[1]
    assert await provider.approve(request_id, frozenset({"charts"})) is not None


async def test_a_thousand_junk_registrations_cannot_block_a_real_client(provider: ChartgenOAuthProvider) -> None:
    for i in range(1000):
        await provider.register_client(client(f"junk-{i}"))
    claude = client("Claude")
    await provider.register_client(claude)  # refused with "too many registered clients" before
    assert await provider.get_client(claude.client_id or "") is not None
    await consented(provider, claude)
    for i in range(1000):
        await provider.register_client(client(f"more-junk-{i}"))
    assert await provider.get_client(claude.client_id or "") is not None
    done, pending = await provider.store.client_counts()
    assert (done, pending) == (1, provider.max_pending_clients)


async def test_a_client_that_never_consented_expires_after_an_hour(provider: ChartgenOAuthProvider) -> None:
    abandoned, finished = client("abandoned"), client("finished")
    for info in (abandoned, finished):
        await provider.register_client(info)
    await consented(provider, finished)
    await provider.store.db.execute("UPDATE oauth_clients SET created_at = created_at - 3601")
    assert await provider.get_client(abandoned.client_id or "") is None
    assert await provider.get_client(finished.client_id or "") is not None
    await provider.register_client(client("newcomer"))  # sweeps the expired row
    assert await provider.store.client_counts() == (1, 1)
