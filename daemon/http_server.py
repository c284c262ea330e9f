"""Serving an ASGI app with uvicorn inside the daemon's own event loop.

Client addresses behind a reverse proxy: uvicorn's own proxy-header handling
(``proxy_headers``/``forwarded_allow_ips``, its ``ProxyHeadersMiddleware``) replaces the TCP
peer by the ``X-Forwarded-For`` client only when the peer is one of ``trusted_proxies`` (IPs
or CIDR networks).  With none configured (the default) the middleware is not installed at
all, so forwarded headers are ignored whatever uvicorn's ``FORWARDED_ALLOW_IPS`` environment
variable says (uvicorn's own default would trust loopback, i.e. every client of a local proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import uvicorn


class BindError(OSError):
    """The listening socket could not be opened (address in use, permission, bad host)."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening, non-blocking TCP socket (port 0 picks a free port).

    The protocol is given explicitly (IPPROTO_TCP): asyncio turns on TCP_NODELAY for
    accepted connections only when the socket says it is TCP, and without it every
    response written in two parts (headers, body) waits ~40 ms for a delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BindError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


class DaemonServer(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon owns SIGTERM/SIGINT.

    uvicorn's ``capture_signals`` re-raises a captured signal after its shutdown, which
    would kill the process before the daemon stops the engine, the render pool and the
    simulator; instead the daemon's handler sets ``should_exit`` and shutdown continues
    in order (lifecycle in three phases: stop accepting, drain, close).
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()
        """Set once the sockets accept connections (systemd READY=1 waits on it)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.listening.set()


def _forwarded_allow_ips(trusted_proxies: Sequence[str]) -> list[str]:
    """``trusted_proxies`` in the form uvicorn parses: addresses as they are, networks normalised
    (uvicorn reads ``10.1.2.3/8`` strictly and would otherwise keep it as a never-matching literal)."""
    return [str(ipaddress.ip_network(p, strict=False)) if "/" in p else p.strip() for p in trusted_proxies]


def make_server(app: Any, *, trusted_proxies: Sequence[str] = ()) -> DaemonServer:
    """A uvicorn server for ``app`` that logs through our logging set-up.

    ``trusted_proxies``: the peers whose ``X-Forwarded-For``/``X-Forwarded-Proto`` are believed;
    empty: none (no proxy-header handling at all).
    """
    allow = _forwarded_allow_ips(trusted_proxies)
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
        proxy_headers=bool(allow),
        forwarded_allow_ips=allow or None,
    )
    return DaemonServer(config)


def stop_on_signals(server: uvicorn.Server) -> None:
    """SIGTERM and SIGINT ask the server to finish in-flight requests and exit; a second one forces it."""
    loop = asyncio.get_running_loop()

    def handle() -> None:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, handle)


@contextlib.asynccontextmanager
async def serving(
    app: Any, host: str = "127.0.0.1", port: int = 0, *, trusted_proxies: Sequence[str] = ()
) -> AsyncIterator[str]:
    """Serve ``app`` in a background task while the block runs; yields the base URL."""
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    server = make_server(app, trusted_proxies=trusted_proxies)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="uvicorn")
    try:
        # uvicorn exposes no start event, only a flag: poll it with a deadline
        async with asyncio.timeout(15):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(15):
            await task
