"""Running the real daemon as a subprocess for integration tests (and killing it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


@dataclass
class DaemonProc:
    """A started daemon: its process and the lines it printed at start-up."""

    proc: asyncio.subprocess.Process
    mcp_url: str
    sim_url: str | None = None
    token: str | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.mcp_url.removesuffix("/mcp")

    async def wait_ready(self, timeout_s: float = 60.0) -> DaemonProc:
        """Poll ``/readyz`` until it answers 200 (the daemon offers no readiness event over HTTP)."""
        async with aiohttp.ClientSession() as http, asyncio.timeout(timeout_s):
            while True:
                async with http.get(f"{self.base}/readyz") as r:
                    if r.status == 200:
                        return self
                await asyncio.sleep(0.05)  # polling readiness, bounded by the timeout

    async def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        async with asyncio.timeout(timeout_s):
            return await self.proc.wait()

    async def kill(self) -> None:
        """kill -9 of the daemon's whole process group (as systemd kills a cgroup): no clean-up runs."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        async with asyncio.timeout(30):
            await self.proc.wait()


def _stderr_target() -> Any:
    """Daemon logs: discarded, or appended to $CG_TEST_DAEMON_LOG when debugging a test."""
    path = os.environ.get("CG_TEST_DAEMON_LOG")
    return open(path, "ab") if path else asyncio.subprocess.DEVNULL


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARTGEN_")}
    env.update(extra or {})
    return env


async def start_daemon(
    args: Sequence[str], *, data_dir: Path, env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> DaemonProc:
    """Start ``python -m daemon ARGS --data-dir D --port 0`` and wait for its URL lines."""
    log_target = _stderr_target()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        *args,
        "--port",
        "0",
        "--data-dir",
        str(data_dir),
        env=clean_env(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=log_target,
        start_new_session=True,
    )
    if hasattr(log_target, "close"):
        log_target.close()  # the child has its own descriptor
    assert proc.stdout is not None
    found = DaemonProc(proc, "")
    want_sim = "--sim" in args
    try:
        async with asyncio.timeout(timeout_s):
            while not found.mcp_url or (want_sim and (found.sim_url is None or found.token is None)):
                line = (await proc.stdout.readline()).decode()
                assert line, f"daemon exited before printing its URLs: {found.lines}"
                found.lines.append(line)
                if m := re.match(r"MCP server listening on (\S+)", line):
                    found.mcp_url = m.group(1)
                if m := re.match(r"Exchange simulator at (\S+)", line):
                    found.sim_url = m.group(1)
                if m := re.match(r"Demo bearer token \(this run only\): (\S+)", line):
                    found.token = m.group(1)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    asyncio.get_running_loop().create_task(_drain(proc.stdout))
    return found


async def _drain(stream: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        while await stream.readline():
            pass


async def create_token(data_dir: Path, name: str) -> str:
    """``chartgen token create NAME`` against ``data_dir``; returns the printed token."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "token",
        "--data-dir",
        str(data_dir),
        "create",
        name,
        env=clean_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode().strip()


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str | None, *, read_timeout_s: float = 60.0) -> AsyncIterator[Client]:
    """The official SDK client over Streamable HTTP, sending ``Authorization: Bearer TOKEN``."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    http: httpx2.AsyncClient = create_mcp_http_client(headers=headers)
    async with http:
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=read_timeout_s) as c:
            yield c
