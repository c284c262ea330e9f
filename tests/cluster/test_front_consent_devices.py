"""Device cookies on the OAuth consent page at the cluster's fronts (issue 36 §4; ``chartgen --serve
--cluster`` subprocesses on a real PostgreSQL): the signing key is the cluster's (``dashboard_auth``
in PostgreSQL), so a device cookie the dashboard's sign-in issued at one front gets a consent checked
at another front whose global budget guessers keep spent — refused 429 without it — and the right
passphrase refreshes the cookie.  The single node: tests/mcp_bridge/test_consent_devices.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from dashboard import DEVICE_COOKIE
from storage import PostgresDatabase
from testkit.daemon_proc import DaemonProc
from testkit.oauth import PASSPHRASE
from tests.cluster.test_front_oauth import set_cluster_passphrase, start_front
from tests.dashboard.test_dashboard_sign_in import from_address, spend_the_global_budget
from tests.mcp_bridge.test_consent_devices import parked_consent, post_consent

pytestmark = [pytest.mark.servers, pytest.mark.process, pytest.mark.timeout(180)]


@pytest.fixture
async def fronts(cluster: tuple[str, PostgresDatabase], sim: Any) -> AsyncIterator[list[DaemonProc]]:
    dsn, _ = cluster
    await set_cluster_passphrase(dsn)
    started: list[DaemonProc] = []
    try:
        for _ in range(2):
            started.append(await start_front(dsn, sim))
        yield started
    finally:
        for front in started:
            await front.stop()


async def test_a_device_cookie_from_one_front_gets_a_consent_checked_at_another(fronts: list[DaemonProc]) -> None:
    a, b = fronts
    jar = aiohttp.CookieJar(unsafe=True)
    async with from_address("127.0.2.1", jar) as operator:  # the operator signed in at front a's dashboard
        async with operator.post(
            f"{a.base}/ui/login", data={"passphrase": PASSPHRASE}, headers={"Origin": a.base}, allow_redirects=False
        ) as r:
            assert r.status == 303, await r.text()
    (cookie,) = [c for c in jar if c.key == DEVICE_COOKIE]
    action, request_id = await parked_consent(b.base)

    await spend_the_global_budget(b.base, first=30)  # front b's limiter (each front counts its own)
    refused = await post_consent("127.0.2.2", action, request_id, PASSPHRASE)
    assert refused.status == 429 and "on this server" in refused.body

    admitted = await post_consent("127.0.2.3", action, request_id, PASSPHRASE, cookie.value)
    assert admitted.status == 303 and "code=" in admitted.location, admitted.body
    assert admitted.device_cookie() != cookie.value  # refreshed, under the cluster's key
