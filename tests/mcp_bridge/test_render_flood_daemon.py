"""The real daemon under a render flood: one client's backlog does not hold up another client.

``chartgen --serve`` with one or two render workers and two tokens.  Client A sends six of the
heaviest charts at once (4096×4096, 5000 bars: each keeps the worker busy for seconds).
Client B pings while A's first chart renders, and asks for a small chart once A's first is
back (A's other five are queued by then).  The assertions are about order, not time: B's
ping is answered while A's charts are still rendering, and B's chart is answered while at
least two of A's are still outstanding (four with two workers, as A may hold only one) —
B waits for at most the render already started, not for A's whole backlog (first-in
first-out answered B after all of A's).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from testkit.daemon_proc import create_token, start_daemon

pytestmark = [pytest.mark.slow, pytest.mark.process]

HEAVY = {"format": "png", "width": 4096, "height": 4096, "bars": 5000}
SMALL = {"format": "png", "bars": 50, "width": 400, "height": 300, "indicators": ["rsi"]}
A_CHARTS = 6


def call(req_id: int, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": "generate_chart", "arguments": arguments}
    return {"jsonrpc": "2.0", "id": req_id, "method": "tools/call", "params": params}


@pytest.mark.parametrize(("workers", "left"), [(1, 2), (2, 4)])
async def test_a_flooding_client_does_not_hold_up_another_clients_ping_and_chart(
    tmp_path: Path, workers: int, left: int
) -> None:
    """One worker: B waits for A's render in progress only.  Two: A may use one, so B waits for none."""
    token_a, token_b = await create_token(tmp_path, "flood-a"), await create_token(tmp_path, "quiet-b")
    env = {"CHARTGEN_RENDER_WORKERS": str(workers)}
    daemon = await start_daemon(["--serve"], data_dir=tmp_path, env=env)
    try:
        await daemon.wait_ready()
        async with aiohttp.ClientSession() as http:

            async def post(token: str, body: dict[str, Any]) -> dict[str, Any]:
                headers = {"Authorization": f"Bearer {token}"}
                async with http.post(daemon.mcp_url, json=body, headers=headers) as r:
                    assert r.status == 200, await r.text()
                    return await r.json()

            warm = await post(token_b, call(1, SMALL))  # the worker is up and B's connection open
            assert not warm["result"].get("isError"), warm
            flood = [asyncio.create_task(post(token_a, call(100 + i, HEAVY))) for i in range(A_CHARTS)]
            try:
                pong = await post(token_b, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
                assert pong == {"jsonrpc": "2.0", "id": 2, "result": {}}
                assert sum(not t.done() for t in flood) >= A_CHARTS - 1  # answered while A's charts render

                # once A's first chart is back, A's other five have long reached the daemon (each needs
                # milliseconds before its render; a render takes seconds): B's chart comes after all of them
                await asyncio.wait(flood, return_when=asyncio.FIRST_COMPLETED)
                chart = await post(token_b, call(3, SMALL))
                outstanding = sum(not t.done() for t in flood)
                assert not chart["result"].get("isError"), chart
                assert [c["type"] for c in chart["result"]["content"]] == ["image"]
                assert outstanding >= left, f"B's chart waited for {A_CHARTS - outstanding} of A's renders"
            finally:
                for t in flood:
                    t.cancel()
                await asyncio.gather(*flood, return_exceptions=True)
    finally:
        await daemon.kill()  # a graceful stop would first finish A's abandoned renders (seconds each)
