"""The HTTP edge (issue 12 §2, §4): Host/Origin on every route, body caps before parsing, failed
bearers per client address, the /metrics loopback rule, forwarded headers only from trusted
proxies, and at most ``max_streams_per_principal`` notification streams per token.

The app runs in the test's loop (uvicorn on loopback) or is called as plain ASGI where a test
must see exactly how much of a request body the app read.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import aiohttp
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from alerts import PushHub
from daemon import serving as serve_app
from mcp_bridge.http_app import build_http_app
from mcp_bridge.identity import Caller
from mcp_bridge.server import build_server
from mcp_bridge.tools import Services
from mcp_bridge.tools.catalog import TOOL_NAMES

pytestmark = pytest.mark.slow

EVERY_SCOPE = frozenset({"charts", "alerts", "trade", "admin"})
CALLERS = {name: Caller(name.removeprefix("good-"), EVERY_SCOPE) for name in ("good-alice", "good-bob", "good-carol")}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
CALL = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_indicators", "arguments": {}}}
MiB = 1024 * 1024
T = TypeVar("T")


async def authenticate(token: str) -> Caller | None:
    return CALLERS.get(token)


async def metrics() -> bytes:
    return b"chartgen_up 1\n"


async def whoami(request: Request) -> Response:
    """Test-only route (not one of chartgen's): the client address the app sees."""
    return JSONResponse({"client": request.client.host if request.client is not None else None})


def edge_app(services: Services, **kwargs: Any) -> Any:
    server, router = build_server(services)
    return build_http_app(
        server,
        direct=router.direct,
        authenticate=authenticate,
        metrics=metrics,
        status=lambda: {"ok": True},
        extra_routes=[Route("/whoami", whoami)],
        **kwargs,
    )


@pytest.fixture
def hub() -> PushHub:
    return PushHub()


@pytest.fixture
async def edge(services: Services, hub: PushHub) -> AsyncIterator[str]:
    async with serve_app(edge_app(services, push_hub=hub, keepalive_s=3600)) as url:
        yield url


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- DNS rebinding: Host and Origin on every route -------------------------------------------

ROUTES: list[tuple[str, str, dict[str, Any] | None, bool]] = [
    ("POST", "/mcp", CALL, True),  # the session-less fast path (router.direct)
    ("POST", "/mcp", LIST, False),
    ("POST", "/", CALL, True),
    ("POST", "/message", CALL, True),
    ("GET", "/mcp", None, True),
    ("GET", "/sse", None, True),
    ("GET", "/status", None, True),
    ("GET", "/metrics", None, False),
    ("GET", "/", None, False),
    ("GET", "/healthz", None, False),
    ("GET", "/readyz", None, False),
]


@pytest.mark.parametrize(("method", "path", "body", "auth"), ROUTES, ids=[f"{m} {p}" for m, p, *_ in ROUTES])
async def test_a_foreign_host_or_origin_is_refused_on_every_route(
    edge: str, method: str, path: str, body: dict[str, Any] | None, auth: bool
) -> None:
    base_headers = bearer("good-alice") if auth else {}
    data = json.dumps(body).encode() if body is not None else None
    async with aiohttp.ClientSession() as http:
        for extra, want in (
            ({"Host": "evil.example:9315"}, 421),
            ({"Host": "evil.example"}, 421),
            ({"Origin": "http://evil.example"}, 403),
            ({"Origin": "http://localhost.evil.example:80"}, 403),
        ):
            async with http.request(method, edge + path, data=data, headers={**base_headers, **extra}) as r:
                text = (await r.read()).decode()
                assert r.status == want, (extra, r.status, text[:200])
                assert ("base_url" if want == 421 else "DNS-rebinding") in text
        # the same request from an allowed Origin (a local browser client) is served
        headers = {**base_headers, "Origin": "http://localhost:6274"}
        async with http.request(method, edge + path, data=data, headers=headers) as r:
            assert r.status == 200, (r.status, (await r.read())[:200])


# --- request bodies --------------------------------------------------------------------------


PADDED_LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"p":"'


class Body:
    """An ASGI receive() handing out a large tools/list body in 64 KiB chunks and counting what was taken."""

    def __init__(self, size: int) -> None:
        self.data = PADDED_LIST + b"x" * (size - len(PADDED_LIST) - 4) + b'"}}}'
        self.taken = 0

    async def receive(self) -> dict[str, Any]:
        chunk = self.data[self.taken : self.taken + 65536]
        self.taken += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": self.taken < len(self.data)}


async def call_asgi(
    app: Any, body: Body, headers: dict[str, str], *, path: str = "/mcp"
) -> tuple[int, dict[str, Any] | None]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:9315")] + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 9315),
    }
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with asyncio.timeout(60):
        await app(scope, body.receive, send)
    status = sent[0]["status"]
    raw = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(raw) if raw else None


async def peak_mib(coro: Awaitable[T]) -> tuple[T, float]:
    """``coro``'s result and the peak of Python allocations while it ran, in MiB."""
    tracemalloc.start()
    try:
        result = await coro
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak / MiB


async def test_an_unauthenticated_15_mib_body_is_refused_without_being_kept(services: Services) -> None:
    app = edge_app(services)
    body = Body(15 * MiB)
    (status, answer), peak = await peak_mib(call_asgi(app, body, {"content-type": "application/json"}))
    assert status == 413
    assert answer is not None and answer["error"]["code"] == -32600
    message = answer["error"]["message"]
    assert "65536" in message and "max_unauthenticated_body_bytes" in message and "Bearer" in message
    assert peak < 2, f"{peak:.1f} MiB allocated for a refused body"
    assert body.taken == len(body.data)  # received and dropped, so a proxy in front sees the 413


async def test_a_declared_oversized_unauthenticated_body_is_refused_without_being_kept(services: Services) -> None:
    app = edge_app(services)
    body = Body(15 * MiB)
    headers = {"content-type": "application/json", "content-length": str(len(body.data))}
    (status, _), peak = await peak_mib(call_asgi(app, body, headers))
    assert status == 413 and peak < 2


@pytest.mark.parametrize("token", ["wrong", ""])
async def test_a_bad_bearer_is_refused_before_its_large_body_is_read(services: Services, token: str) -> None:
    app = edge_app(services)
    body = Body(15 * MiB)
    (status, answer), peak = await peak_mib(call_asgi(app, body, {"authorization": f"Bearer {token}"}))
    assert status == 401
    assert answer is not None and answer["error"]["message"] == "Invalid or expired token"
    assert peak < 2, f"{peak:.1f} MiB allocated for the body of a refused bearer"


async def test_a_bad_bearer_on_a_small_request_echoes_its_id_as_chartgen_does(services: Services) -> None:
    """chartgen's 401 carries the request's id (contract §1.4): read from a small body only."""
    app = edge_app(services)
    body = Body(0)
    body.data = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_indicators"}}'
    status, answer = await call_asgi(app, body, {"authorization": "Bearer wrong"})
    assert status == 401 and answer is not None
    assert answer["id"] == 7 and answer["error"] == {"code": -32000, "message": "Invalid or expired token"}


async def test_the_small_cap_is_a_setting(services: Services) -> None:
    app = edge_app(services, max_unauthenticated_body_bytes=4096)
    status, answer = await call_asgi(app, Body(8192), {})
    assert status == 413 and answer is not None and "4096" in answer["error"]["message"]


async def test_bodies_within_the_caps_are_served_with_and_without_a_bearer(edge: str) -> None:
    small = {**LIST, "params": {"_meta": {"p": "x" * 32_000}}}
    large = {**LIST, "params": {"_meta": {"p": "x" * 900_000}}}  # under aiohttp's raw-body warning
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{edge}/mcp", json=small) as r:  # chartgen's clients: tools/list without a bearer
            assert r.status == 200 and len((await r.json())["result"]["tools"]) == len(TOOL_NAMES)
        async with http.post(f"{edge}/mcp", json=large) as r:
            assert r.status == 413
            assert "max_unauthenticated_body_bytes" in (await r.json())["error"]["message"]
        async with http.post(f"{edge}/mcp", json=large, headers=bearer("good-alice")) as r:
            assert r.status == 200 and len((await r.json())["result"]["tools"]) == len(TOOL_NAMES)
        async with http.post(f"{edge}/mcp", json=CALL, headers=bearer("good-alice")) as r:
            assert r.status == 200 and json.loads((await r.json())["result"]["content"][0]["text"])["total"] == 38


# --- failed bearers are counted per client address ------------------------------------------


def client_at(app: Any, ip: str) -> TestClient:
    """A client from ``ip`` (used without ``with``: several share one app, whose lifespan runs once at most)."""
    return TestClient(app, base_url="http://127.0.0.1:9315", client=(ip, 50000))


def test_failed_bearers_lock_out_only_their_address_and_never_a_token_known_good(services: Services) -> None:
    app = edge_app(services)
    abuser, other = client_at(app, "203.0.113.9"), client_at(app, "203.0.113.10")
    assert abuser.get("/status", headers=bearer("good-alice")).status_code == 200  # alice's token: known good
    codes = [abuser.get("/status", headers=bearer(f"guess-{i}")).status_code for i in range(31)]
    assert codes[:30] == [401] * 30 and codes[30] == 429
    assert abuser.get("/status", headers=bearer("guess-x")).status_code == 429
    # another address: untouched, a bad-then-good sequence included
    assert other.get("/status", headers=bearer("typo")).status_code == 401
    assert other.get("/status", headers=bearer("good-bob")).status_code == 200
    # the locked-out address: a token already seen valid still works (someone else behind the same
    # NAT or proxy is not locked out by the guesser); any other token is refused unchecked
    assert abuser.get("/status", headers=bearer("good-alice")).status_code == 200
    assert abuser.get("/status", headers=bearer("good-bob")).status_code == 200
    assert abuser.get("/status", headers=bearer("good-carol")).status_code == 429


def test_ipv6_clients_are_counted_per_slash_64(services: Services) -> None:
    app = edge_app(services)
    for i in range(30):
        assert client_at(app, f"2001:db8:1:2::{i + 1:x}").get("/status", headers=bearer("guess")).status_code == 401
    assert client_at(app, "2001:db8:1:2::ffff").get("/status", headers=bearer("guess")).status_code == 429
    assert client_at(app, "2001:db8:1:3::1").get("/status", headers=bearer("guess")).status_code == 401


# --- /metrics --------------------------------------------------------------------------------


def test_metrics_are_free_only_to_a_direct_loopback_connection_without_forwarded_headers(services: Services) -> None:
    app = edge_app(services)
    with client_at(app, "127.0.0.1") as local:
        assert local.get("/metrics").status_code == 200
        for header in (
            {"X-Forwarded-For": "203.0.113.5"},
            {"X-Forwarded-For": "127.0.0.1"},
            {"Forwarded": "for=203.0.113.5"},
            {"X-Real-IP": "203.0.113.5"},
        ):
            assert local.get("/metrics", headers=header).status_code == 401, header
            assert local.get("/metrics", headers={**header, **bearer("good-bob")}).status_code == 200


def test_metrics_require_token_applies_to_loopback_too(services: Services) -> None:
    app = edge_app(services, metrics_require_token=True)
    with client_at(app, "127.0.0.1") as local:
        assert local.get("/metrics").status_code == 401
        assert local.get("/metrics", headers=bearer("good-bob")).status_code == 200


# --- forwarded headers only from trusted proxies ---------------------------------------------


async def whoami_via(url: str, xff: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/whoami", headers={"X-Forwarded-For": xff}) as r:
        return (await r.json())["client"]


async def test_without_trusted_proxies_forwarded_headers_are_ignored_whatever_the_environment(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")
    async with serve_app(edge_app(services)) as url:
        assert await whoami_via(url, "203.0.113.7") == "127.0.0.1"
        async with aiohttp.ClientSession() as http:
            codes = []
            for i in range(31):  # a rotating spoofed X-Forwarded-For does not escape the limit
                headers = {"X-Forwarded-For": f"198.51.100.{i}", **bearer(f"guess-{i}")}
                async with http.get(f"{url}/status", headers=headers) as r:
                    codes.append(r.status)
    assert codes[-1] == 429


@pytest.mark.parametrize(
    ("trusted", "seen"),
    [(["127.0.0.1"], "203.0.113.7"), (["127.0.0.0/8"], "203.0.113.7"), (["10.0.0.0/8", "::1"], "127.0.0.1")],
)
async def test_forwarded_for_is_honoured_only_from_a_trusted_proxy(
    services: Services, trusted: list[str], seen: str
) -> None:
    async with serve_app(edge_app(services), trusted_proxies=trusted) as url:
        assert await whoami_via(url, "203.0.113.7") == seen
        # the proxy's own address at the right of the chain is skipped; a spoof at the left is not believed
        if seen != "127.0.0.1":
            assert await whoami_via(url, "198.51.100.1, 203.0.113.7") == "203.0.113.7"


# --- notification streams per token ----------------------------------------------------------


async def open_stream(http: aiohttp.ClientSession, url: str, token: str) -> aiohttp.ClientResponse:
    resp = await http.get(f"{url}/mcp", headers=bearer(token))
    assert resp.status == 200
    assert (await resp.content.readline()).startswith(b": connected")
    return resp


async def test_a_ninth_stream_of_a_token_closes_its_oldest(edge: str, hub: PushHub) -> None:
    async with aiohttp.ClientSession() as http:
        bob = await open_stream(http, edge, "good-bob")
        streams = [await open_stream(http, edge, "good-alice") for _ in range(8)]
        assert hub.stream_count() == 9
        newest = await open_stream(http, edge, "good-alice")
        async with asyncio.timeout(10):
            rest = await streams[0].content.read()  # the oldest ends (the client reconnects)
        assert b"closed" in rest and b"max_streams_per_principal" in rest
        assert hub.stream_count() == 9  # alice 8, bob 1
        hub.publish("alice", 1, '{"n":1}')
        hub.publish("bob", 2, '{"n":2}')
        for resp in [*streams[1:], newest]:
            async with asyncio.timeout(10):
                while not (line := await resp.content.readline()).startswith(b"id:"):
                    assert line, "stream ended"
            assert line == b"id: 1\n"
        async with asyncio.timeout(10):
            while not (line := await bob.content.readline()).startswith(b"id:"):
                assert line, "stream ended"
        assert line == b"id: 2\n"
        for resp in [bob, *streams, newest]:
            resp.close()


async def test_the_stream_cap_is_a_setting(services: Services) -> None:
    hub = PushHub()
    async with serve_app(edge_app(services, push_hub=hub, max_streams_per_principal=1)) as url:
        async with aiohttp.ClientSession() as http:
            first = await open_stream(http, url, "good-alice")
            second = await open_stream(http, url, "good-alice")
            async with asyncio.timeout(10):
                assert b"closed" in await first.content.read()
            assert hub.stream_count() == 1
            first.close()
            second.close()


async def test_without_a_push_hub_streams_are_still_capped(services: Services) -> None:
    async with serve_app(edge_app(services, keepalive_s=3600, max_streams_per_principal=2)) as url:
        async with aiohttp.ClientSession() as http:
            streams = [await open_stream(http, url, "good-alice") for _ in range(3)]
            async with asyncio.timeout(10):
                assert b"closed" in await streams[0].content.read()
            for s in streams:
                s.close()


def test_the_hub_ends_a_principals_oldest_stream_past_the_limit_and_no_other() -> None:
    hub = PushHub()
    alice = [hub.open("alice", limit=2) for _ in range(2)]
    bob = hub.open("bob", limit=2)
    newest = hub.open("alice", limit=2)
    assert alice[0].closed_reason == "replaced" and alice[0].queue.get_nowait() is None
    assert alice[1].closed_reason is None and newest.closed_reason is None and bob.closed_reason is None
    assert hub.stream_count() == 3
    assert hub.publish("alice", 1, "{}") == 2 and alice[0].queue.empty()
    hub.close(alice[0])  # the replaced stream's writer cleans up: nothing else is touched
    assert hub.stream_count() == 3
    unlimited = [hub.open("stdio") for _ in range(20)]  # no limit asked (a stdio session): none applied
    assert all(s.closed_reason is None for s in unlimited)
