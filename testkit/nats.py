"""Debian's nats-server with JetStream for the cluster bus tests: a child of the test, on loopback.

:func:`running_nats` starts ``nats-server -js -a 127.0.0.1 -p PORT -sd STORE -l LOG`` as a child
in its own process group and waits until it is ready (its ``Server is ready`` log line for this
start, and the port accepting connections: polled, bounded by a timeout).  On exit it is stopped
with SIGTERM (nats-server's clean shutdown), SIGKILL if it has not exited within 15 s.

:class:`NatsServer` can be stopped and started again on the *same* port and store directory,
so an outage test keeps its clients' URL and JetStream finds its streams and consumers again
(file storage); :meth:`NatsServer.pause` / :meth:`NatsServer.resume` (SIGSTOP / SIGCONT) make a
server that keeps its connections but answers nothing.  The log file lives next to the store
(``<store>.log``) and collects every start.

The binary is Debian's (``apt-get install nats-server``: ``/usr/sbin/nats-server`` in 2.9), found
on PATH or in /usr/sbin or /usr/bin.  Missing: skipped locally, a failure under CI
(:mod:`testkit.external`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from testkit.external import required, stop_process_group, which
from testkit.nginx import free_port

READY_LINE = "Server is ready"


def nats_server_binary() -> Path:
    how = "apt-get install nats-server"
    candidates = (which("nats-server"), Path("/usr/sbin/nats-server"), Path("/usr/bin/nats-server"))
    return required("nats-server", next((p for p in candidates if p is not None and p.exists()), None), how)


def _log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _log_since(path: Path, offset: int) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


SMALL_BUS_LIMITS = {
    "market_max_bytes": 8 << 20,
    "notify_max_bytes": 8 << 20,
    "commands_max_bytes": 4 << 20,
    "ticks_max_bytes": 1 << 20,
}
"""``bus_limits`` for tests: JetStream reserves each stream's max_bytes against the disk it sees, and CI
disks are small."""


def nats_env(url: str) -> dict[str, str]:
    """The settings (environment) of a worker or front on ``bus = "nats"`` at ``url``, with the test limits."""
    return {"CHARTGEN_BUS": "nats", "CHARTGEN_NATS_URL": url, "CHARTGEN_BUS_LIMITS": json.dumps(SMALL_BUS_LIMITS)}


@dataclass
class NatsServer:
    """One nats-server on ``127.0.0.1:port`` with its JetStream store in ``store_dir``."""

    store_dir: Path
    port: int
    binary: Path
    proc: asyncio.subprocess.Process | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.store_dir.with_name(self.store_dir.name + ".log")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def log(self) -> str:
        """Everything nats-server logged, all starts."""
        return await asyncio.to_thread(_log_since, self.log_path, 0)

    async def start(self, timeout_s: float = 15.0) -> None:
        """Start it (again) on the same port and store; returns once it serves clients."""
        if self.running:
            raise RuntimeError("nats-server is already running")
        await asyncio.to_thread(self.store_dir.mkdir, parents=True, exist_ok=True)
        offset = await asyncio.to_thread(_log_size, self.log_path)
        self.proc = await asyncio.create_subprocess_exec(
            str(self.binary),
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            str(self.store_dir),
            "-l",
            str(self.log_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            await self._ready(offset, timeout_s)
        except BaseException:
            await self.stop()
            raise

    async def _ready(self, offset: int, timeout_s: float) -> None:
        """Poll for this start's ready line and an accepting port (nats-server has no other readiness signal)."""
        proc = self.proc
        assert proc is not None
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    if proc.returncode is not None:
                        tail = await asyncio.to_thread(_log_since, self.log_path, offset)
                        raise RuntimeError(f"nats-server exited with {proc.returncode}: {tail[-2000:]}")
                    if READY_LINE in await asyncio.to_thread(_log_since, self.log_path, offset):
                        with contextlib.suppress(OSError):
                            _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                            writer.close()
                            await writer.wait_closed()
                            return
                    await asyncio.sleep(0.02)  # polling the log and the port, bounded by the timeout
        except TimeoutError:
            tail = await asyncio.to_thread(_log_since, self.log_path, offset)
            raise RuntimeError(f"nats-server not ready within {timeout_s:g} s: {tail[-2000:]}") from None

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing (a stalled server).

        Returns once every thread of the server is stopped: ``kill`` returns when the signal is
        queued, and a thread of the (Go, multi-threaded) server running on another core may still
        answer a request for a moment — a test that publishes right after would race it."""
        assert self.proc is not None and self.proc.returncode is None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + 5.0
        while not all(_stopped(stat) for stat in tasks.glob("*/stat")):
            if time.monotonic() > deadline:
                raise RuntimeError("nats-server did not stop within 5 s of SIGSTOP")
            time.sleep(0.001)  # polling the kernel's view of the threads, bounded above

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        assert self.proc is not None and self.proc.returncode is None
        os.killpg(self.proc.pid, signal.SIGCONT)

    async def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 15 s); the port and store stay for :meth:`start`."""
        proc = self.proc
        if proc is None:
            return
        await stop_process_group(proc)  # a paused server handles the SIGTERM once continued
        self.proc = None


def _stopped(stat: Path) -> bool:
    """Whether the thread whose ``/proc/…/stat`` this is is stopped (state T or t); gone counts as stopped."""
    try:
        text = stat.read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2] in "Tt"


@contextlib.asynccontextmanager
async def running_nats(store_dir: Path, port: int | None = None) -> AsyncIterator[NatsServer]:
    """A ready nats-server with JetStream storing in ``store_dir`` (a free loopback port unless ``port``);
    stopped on exit."""
    server = NatsServer(store_dir=store_dir, port=port or free_port(), binary=nats_server_binary())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
