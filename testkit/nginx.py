"""Debian's nginx as the reverse proxy of docs/operations.md in front of a test daemon, on loopback, without TLS.

nginx runs as a child of the test (``daemon off``, one process: ``master_process off``, so it
never switches user and needs nothing outside its temporary prefix) with its own
configuration, pid file, logs and temp paths in a tmp folder, listening on a free loopback
port.  The ``location /`` block is :data:`DOCUMENTED_LOCATION`, the one the documented TLS snippet
shows (``test_proxy_abuse.py`` checks that docs/operations.md still carries it), pointed at the
daemon's port.  Missing nginx: skipped locally, a failure under CI (:mod:`testkit.external`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from testkit.external import required, stop_process_group, which

DOCUMENTED_LOCATION = """\
    location / {
        proxy_pass http://127.0.0.1:9315;
        proxy_http_version 1.1;
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $remote_addr;   # replaces whatever the client sent
        proxy_set_header X-Forwarded-Proto https;
        client_max_body_size 16m;         # the daemon's own cap for authenticated requests
        proxy_buffering off;              # SSE frames must not wait in a buffer
        proxy_cache off;
        proxy_read_timeout 1h;            # notification streams stay open
        chunked_transfer_encoding on;
    }
"""
"""The documented ``location /`` block (with its upstream ``127.0.0.1:9315``)."""

_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
{location}
    }}
}}
"""


def nginx_binary() -> Path:
    how = "apt-get install nginx; .ci/run does this"
    return required(
        "nginx", which("nginx") or (Path("/usr/sbin/nginx") if Path("/usr/sbin/nginx").exists() else None), how
    )


_PORT_BASE = 20000
_PORT_BLOCK = 800
""":func:`free_port` hands out ports from ``_PORT_BASE`` up, a block of ``_PORT_BLOCK`` per pytest-xdist
worker (gw0, gw1 …; 15 workers fit): below Linux's ephemeral range (32768–60999), so no ``bind(0)``
or outgoing connection of the kernel's takes a port between our pick and the server's bind, and
two workers of one run never pick the same port."""
_next_port: list[int] = []


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def free_port() -> int:
    """A loopback port free right now (the server binds it a moment later; a clash only fails the start).

    Taken in turn from this worker's block (see ``_PORT_BLOCK``), starting at a random offset so
    that two test runs on one machine rarely walk the same ports; each is checked by binding it."""
    first = _PORT_BASE + (_worker_index() % 15) * _PORT_BLOCK
    if not _next_port:
        _next_port.append(random.randrange(_PORT_BLOCK))
    for _ in range(_PORT_BLOCK):
        port = first + _next_port[0] % _PORT_BLOCK
        _next_port[0] += 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {first}–{first + _PORT_BLOCK - 1}")


def config(prefix: Path, port: int, upstream_port: int, location: str = DOCUMENTED_LOCATION) -> str:
    block = location.replace("http://127.0.0.1:9315", f"http://127.0.0.1:{upstream_port}")
    return _CONF.format(prefix=prefix, port=port, location=block)


def _write_config(prefix: Path, port: int, upstream_port: int, location: str) -> Path:
    prefix.mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(config(prefix, port, upstream_port, location))
    return conf


@dataclass
class Nginx:
    url: str
    prefix: Path
    proc: asyncio.subprocess.Process

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


async def _listening(port: int, proc: asyncio.subprocess.Process, prefix: Path, timeout_s: float = 15.0) -> None:
    """Poll the port until nginx accepts (nginx offers no readiness signal in the foreground)."""
    async with asyncio.timeout(timeout_s):
        while True:
            if proc.returncode is not None:
                log = await asyncio.to_thread(Nginx("", prefix, proc).error_log)
                raise RuntimeError(f"nginx exited with {proc.returncode}: {log[-2000:]}")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                await writer.wait_closed()
                return
            await asyncio.sleep(0.02)  # polling for the listening socket, bounded by the timeout


@contextlib.asynccontextmanager
async def running_nginx(
    prefix: Path, upstream_port: int, *, port: int | None = None, location: str = DOCUMENTED_LOCATION
) -> AsyncIterator[Nginx]:
    """nginx with the documented location block (or ``location``) in front of ``127.0.0.1:upstream_port``;
    stopped on exit."""
    binary = nginx_binary()
    port = port or free_port()
    conf = await asyncio.to_thread(_write_config, prefix, port, upstream_port, location)
    proc = await asyncio.create_subprocess_exec(
        str(binary),
        "-p",
        str(prefix),
        "-c",
        str(conf),
        "-e",
        str(prefix / "error.log"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        await _listening(port, proc, prefix)
        yield Nginx(f"http://127.0.0.1:{port}", prefix, proc)
    finally:
        await stop_process_group(proc)  # SIGTERM: nginx's fast shutdown; its own process group
