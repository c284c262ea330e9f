"""The channel sender's HTTP/1.1 client against a real aiohttp server on loopback: Content-Length,
chunked and close-delimited answers, connection reuse, a request on a connection the server closed
while idle sent again on a new one, and errors that say what failed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from alerts.channels.http1 import Http1Client, HttpError


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[str]]]:
    peers: list[str] = []

    async def plain(request: web.Request) -> web.Response:
        peers.append(str(request.transport.get_extra_info("peername")))
        return web.json_response({"got": (await request.read()).decode()}, status=201)

    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=429, headers={"Retry-After": "7"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for part in (b"slow ", b"down"):
            await resp.write(part)
        await resp.write_eof()
        return resp

    async def closing(request: web.Request) -> web.Response:
        peers.append(str(request.transport.get_extra_info("peername")))
        return web.Response(text="bye", headers={"Connection": "close"})

    app = web.Application()
    app.router.add_post("/plain", plain)
    app.router.add_post("/chunked", chunked)
    app.router.add_post("/closing", closing)
    runner = web.AppRunner(app, keepalive_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", peers
    finally:
        await runner.cleanup()


async def test_answers_of_every_framing_and_connection_reuse(server: tuple[str, list[str]]) -> None:
    base, peers = server
    client = Http1Client()
    try:
        first = await client.post(f"{base}/plain", {"Content-Type": "text/plain"}, b"one")
        second = await client.post(f"{base}/plain", {}, b"two")
        assert (first.status, first.body) == (201, b'{"got": "one"}') and second.body == b'{"got": "two"}'
        assert peers[0] == peers[1]  # the same kept-alive connection
        slow = await client.post(f"{base}/chunked", {}, b"")
        assert (slow.status, slow.headers["retry-after"], slow.body) == (429, "7", b"slow down")
        bye = await client.post(f"{base}/closing", {}, b"x")
        assert bye.body == b"bye"
    finally:
        await client.close()


async def test_a_connection_closed_while_idle_is_replaced(server: tuple[str, list[str]]) -> None:
    base, peers = server
    client = Http1Client()
    try:
        await client.post(f"{base}/plain", {}, b"a")
        # the server's keep-alive timeout (0.2 s) closes the idle connection; the next request must still work
        await asyncio.sleep(0.5)  # let the server's idle timeout pass (what is tested), not synchronisation
        again = await client.post(f"{base}/plain", {}, b"b")
        assert again.status == 201 and peers[0] != peers[1]
    finally:
        await client.close()


async def test_errors_say_what_failed() -> None:
    client = Http1Client()
    with pytest.raises(HttpError, match=r"cannot connect to 127\.0\.0\.1:9"):
        await client.post("http://127.0.0.1:9/x", {}, b"")
    with pytest.raises(HttpError, match="not an http"):
        await client.post("ftp://example.com/x", {}, b"")
