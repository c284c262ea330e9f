"""A daemon subprocess against a simulator running in the test process (it survives the daemon's kills).

Shared by the crash-safety tests (alerts, orders, alert actions): the environment that points the
daemon at the simulator, starting it, moving the simulator's price, and calling a tool for JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from simulator import RunningSimulator
from testkit.daemon_proc import DaemonProc, start_daemon


def sim_env(sim: RunningSimulator, *, broker: str | None = None, **extra: str) -> dict[str, str]:
    """The daemon's environment for ``sim`` (BTCUSDT, 1m, a short window); ``broker="binance"`` adds the
    simulator's keys and resolves unsent intents at once."""
    ws = sim.url.replace("http://", "ws://")
    env = {
        "CHARTGEN_BINANCE_REST_URL": sim.url,
        "CHARTGEN_BINANCE_STREAM_URL": ws,
        "CHARTGEN_BINANCE_WS_API_URL": f"{ws}/ws-api/v3",
        "CHARTGEN_SYMBOLS": "BTCUSDT",
        "CHARTGEN_INTERVALS": "1m",
        "CHARTGEN_ENGINE_WINDOW_BARS": "100",
    }
    if broker == "binance":
        env |= {
            "CHARTGEN_BROKER": "binance",
            "CHARTGEN_ORDER_UNRESOLVED_GRACE_S": "0",
            "BINANCE_API_KEY": "sim-api-key",
            "BINANCE_API_SECRET": "sim-api-secret",
        }
    return env | extra


async def start_on_sim(sim: RunningSimulator, data_dir: Path, env: dict[str, str]) -> DaemonProc:
    """``chartgen --serve --trade`` on ``sim``, ready."""
    proc = await start_daemon(["--serve", "--trade"], data_dir=data_dir, env=env)
    return await proc.wait_ready()


async def post_price(http: aiohttp.ClientSession, sim: RunningSimulator, price: float) -> None:
    """A BTCUSDT trade at ``price`` on the simulator."""
    async with http.post(f"{sim.url}/sim/v1/price", json={"symbol": "BTCUSDT", "price": f"{price:.2f}"}) as r:
        assert r.status == 200


async def tool_json(client: Any, name: str, args: dict[str, Any] | None = None) -> Any:
    """Call a tool that must succeed; its JSON answer."""
    result = await client.call_tool(name, args or {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)
