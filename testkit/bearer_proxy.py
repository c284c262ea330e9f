"""A loopback reverse proxy that adds ``Authorization: Bearer …`` to every request.

The MCP conformance runner has no option to send a bearer token, and the daemon always asks
for one; the proxy lets the runner reach the daemon with its real authentication switched on.
Everything else (method, path, Host, Origin, body, streamed answers) passes through as is.
"""

from __future__ import annotations

import asyncio
from typing import Any, Self

import aiohttp
from aiohttp import web

_HOP_BY_HOP = {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}


class BearerProxy:
    def __init__(self, upstream: str, token: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._relays: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> Self:
        self._http = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        # relays still running are long-lived SSE streams: end them, or the server's clean-up
        # waits out its shutdown timeout for them
        for task in list(self._relays):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._http is not None
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        try:
            return await self._relay(request)
        finally:
            self._relays.discard(task)

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Authorization"] = f"Bearer {self.token}"
        async with self._http.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=await request.read(),
            allow_redirects=False,
        ) as answer:
            out = web.StreamResponse(
                status=answer.status,
                headers={k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP},
            )
            await out.prepare(request)
            try:
                async for chunk in answer.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
            except (aiohttp.ClientError, ConnectionError):
                pass  # either side went away mid-stream (a client closing its SSE stream)
            return out
