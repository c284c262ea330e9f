"""Running the real daemon as a subprocess for integration tests (and killing it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
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

from testkit.secret_scan import daemon_log_file


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
    """Daemon logs: a file of the session's log folder (scanned for secrets at the end of the
    session), or appended to $CG_TEST_DAEMON_LOG when debugging a test."""
    path = os.environ.get("CG_TEST_DAEMON_LOG")
    return open(path, "ab") if path else daemon_log_file()


TEST_DAEMON_ENV = {"CHARTGEN_RENDER_WARM_START": "false"}
"""What a daemon started by the kit gets unless the caller says otherwise: its render processes start
with its first chart.  Most tests never draw one, and warming the two default processes costs about
3 s of CPU per daemon start (each imports matplotlib and draws once), which four test workers on
two cores pay on every start.  A bench that measures charts passes :data:`PRODUCTION_RENDER`."""
PRODUCTION_RENDER = {"CHARTGEN_RENDER_WARM_START": "true"}


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without its CHARTGEN_ settings, plus :data:`TEST_DAEMON_ENV` and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARTGEN_")}
    env.update(TEST_DAEMON_ENV)
    env.update(extra or {})
    return env


async def start_fronts(fronts: list[DaemonProc], n: int, env: dict[str, str]) -> None:
    """Start ``n`` cluster fronts (``--serve --cluster``) into ``fronts`` — each added as it starts, so
    the caller's clean-up stops those that did — and wait until every one is ready."""
    for _ in range(n):
        fronts.append(await start_daemon(["--serve", "--cluster"], data_dir=None, env=env))
    await asyncio.gather(*(f.wait_ready() for f in fronts))


async def start_daemon(
    args: Sequence[str],
    *,
    data_dir: Path | None,
    env: dict[str, str] | None = None,
    timeout_s: float = 60.0,
    stderr_pipe: bool = False,
) -> DaemonProc:
    """Start ``python -m daemon ARGS --data-dir D --port 0`` and wait for its URL lines (a cluster
    front keeps no data dir: ``data_dir`` None).

    ``stderr_pipe``: the log comes back on ``proc.stderr`` (for a test that reads it, or whose
    daemon cannot write files); the test passes it on to ``LogTail``.
    """
    log_target = asyncio.subprocess.PIPE if stderr_pipe else _stderr_target()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        *args,
        "--port",
        "0",
        *(["--data-dir", str(data_dir)] if data_dir is not None else []),
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


@contextlib.asynccontextmanager
async def running_daemon(
    args: Sequence[str], *, data_dir: Path | None, env: dict[str, str] | None = None
) -> AsyncIterator[DaemonProc]:
    """A started daemon, ready (``/readyz`` 200), stopped with SIGTERM on exit."""
    proc = await start_daemon(args, data_dir=data_dir, env=env)
    try:
        await proc.wait_ready()
        yield proc
    finally:
        await proc.stop()


async def _drain(stream: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        while await stream.readline():
            pass


async def create_token(data_dir: Path, name: str, scopes: str | None = None) -> str:
    """``chartgen token create NAME [--scope SCOPES]`` against ``data_dir``; returns the printed token.

    Without ``scopes`` the token has the default ``charts,alerts``; a test that trades passes
    ``"charts,alerts,trade"``.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "token",
        "--data-dir",
        str(data_dir),
        "create",
        name,
        *(["--scope", scopes] if scopes is not None else []),
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


class LogTail:
    """A daemon's piped stderr (``start_daemon(stderr_pipe=True)``): every line is copied to
    the session's log folder (so the secret scan sees it) and kept, and a test can wait for a
    log event instead of sleeping."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.events: list[dict[str, Any]] = []
        self._file = daemon_log_file("piped")
        self._changed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        try:
            while line := await stream.readline():
                self._file.write(line)
                self._file.flush()
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict):
                        self.events.append(event)
                        self._changed.set()
        finally:
            self._file.close()

    async def wait_for(self, event: str, *, since: int = 0, timeout_s: float = 30.0) -> dict[str, Any]:
        """The first log event named ``event`` at or after index ``since``."""
        async with asyncio.timeout(timeout_s):
            while True:
                for e in self.events[since:]:
                    if e.get("event") == event:
                        return e
                self._changed.clear()
                await self._changed.wait()

    def count(self, event: str) -> int:
        return sum(1 for e in self.events if e.get("event") == event)
