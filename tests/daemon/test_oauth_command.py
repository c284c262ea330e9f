"""``chartgen oauth list | revoke`` on a single node's data dir: an approved client is listed with its
grant; revoking it kills its refresh and access tokens; an unknown client is a clear error.  (The
cluster's, with ``--cluster``: tests/cluster/test_front_oauth.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from daemon.database import open_database
from mcp_bridge import AccessRow, OAuthStore, RefreshRow, TokenStore
from tests.daemon.test_cli_state_options import chartgen

pytestmark = pytest.mark.process


async def _approved_client(data_dir: Path) -> tuple[str, str]:
    """A client approved once with one grant: (its refresh token, its access token)."""
    async with open_database(Settings(data_dir=data_dir)) as db:
        store = OAuthStore(db)
        await store.save_client("c-1", {"client_name": "Claude"}, None)
        await store.save_consent("req-1", "c-1", {}, 600.0)
        assert await store.approve("req-1", "code-1", {"client_id": "c-1"}, 300.0)

        async def issue(tx: object) -> None:
            await store.insert_access(tx, AccessRow("tok_1", "c-1", "oauth:c-1", 2e9, ["charts"]), "access-1")
            await store.insert_refresh(tx, "refresh-1", RefreshRow("c-1", "oauth:c-1", ["charts"], None, None))

        await store.consume_code("code-1", issue)
        assert await TokenStore(db).verify("access-1") is not None
    return "refresh-1", "access-1"


async def test_list_and_revoke_an_approved_client(tmp_path: Path) -> None:
    refresh, access = await _approved_client(tmp_path)
    code, out, err = await chartgen("oauth", "--data-dir", str(tmp_path), "list")
    assert code == 0, err
    (row,) = out.splitlines()[1:]
    assert row.startswith("c-1") and "Claude" in row and row.rstrip().endswith(" 1")

    code, out, err = await chartgen("oauth", "revoke", "nobody", "--data-dir", str(tmp_path))
    assert code == 1 and "no approved client 'nobody'" in err and "chartgen oauth list" in err

    code, out, err = await chartgen("oauth", "--data-dir", str(tmp_path), "revoke", "c-1")
    assert code == 0 and "revoked every token of c-1" in out, err
    async with open_database(Settings(data_dir=tmp_path)) as db:
        assert await OAuthStore(db).refresh(refresh) is None
        assert await TokenStore(db).verify(access) is None
    code, out, _ = await chartgen("oauth", "--data-dir", str(tmp_path), "list")
    assert out.splitlines()[1].rstrip().endswith(" 0")
