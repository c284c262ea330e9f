"""The daemon speaks systemd's notify protocol: READY with STATUS, watchdog pings, STOPPING on SIGTERM."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from testkit.daemon_proc import start_daemon

pytestmark = pytest.mark.process


async def _datagram(sock: socket.socket) -> str:
    loop = asyncio.get_running_loop()
    data = await loop.sock_recv(sock, 4096)
    return data.decode()


async def test_ready_status_watchdog_and_stopping_reach_the_notify_socket(tmp_path: Path) -> None:
    """Under a fake systemd (NOTIFY_SOCKET, WATCHDOG_USEC) every lifecycle message arrives in order."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    try:
        env = {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"}
        daemon = await start_daemon(
            ["--serve", "--trade", "--sim", "--clock", "manual", "-s", "BTCUSDT", "-i", "1m"],
            data_dir=tmp_path,
            env=env,
        )
        seen: list[str] = []
        async with asyncio.timeout(60):
            while not any("READY=1" in m for m in seen) or not any(m == "WATCHDOG=1" for m in seen):
                seen.append(await _datagram(sock))
        ready = next(m for m in seen if "READY=1" in m)
        assert "STATUS=" in ready and "markets" in ready
        await daemon.stop()
        async with asyncio.timeout(30):
            while not any("STOPPING=1" in m for m in seen):
                seen.append(await _datagram(sock))
    finally:
        sock.close()
