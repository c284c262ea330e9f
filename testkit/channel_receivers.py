"""Local receivers for the notification channels: a webhook, a fake Telegram Bot API, a fake ntfy.

Each records every request (headers, body, the receiver's clock) and can misbehave on purpose:
answer 5xx, stall until the client gives up, answer 429 with ``Retry-After`` (Telegram: its JSON
``retry_after``), redirect (302), or be down (listening socket closed, reopened later on the same port).  With
``chaos`` set, each request misbehaves with that probability (seeded RNG), so a run is repeatable.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from aiohttp import web

Kind = Literal["webhook", "telegram", "ntfy"]
REDIRECT_TO = "http://elsewhere.example/moved"


@dataclass(frozen=True, slots=True)
class Received:
    """One request as the receiver saw it (``ok``: it answered 2xx)."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    ok: bool

    @property
    def key(self) -> str:
        return self.headers.get("Idempotency-Key", "")


@dataclass
class Receiver:
    kind: Kind
    chaos: float = 0.0
    seed: int = 0
    retry_after_s: int = 1
    clock: Callable[[], float] = field(default=lambda: 0.0)
    requests: list[Received] = field(default_factory=list)
    down_until: float | None = None
    """While the clock is before this, every request fails with 503 (the manual-clock outage)."""
    forced: list[str] = field(default_factory=list)
    """Behaviours for the next requests, in order ("fail", "stall", "429", "redirect"), before any chaos."""

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port = 0
        self.arrived = asyncio.Event()
        self._closing = asyncio.Event()

    @property
    def url(self) -> str:
        path = {"webhook": "/hook", "telegram": "", "ntfy": "/chartgen-alerts"}[self.kind]
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await self._listen()
        return self

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        if not self.port:
            self.port = self._runner.addresses[0][1]

    async def go_down(self) -> None:
        """Close the listening socket: connections are refused until :meth:`come_back`."""
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def come_back(self) -> None:
        if self._site is None:
            await self._listen()

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def delivered(self) -> list[Received]:
        return [r for r in self.requests if r.ok]

    def covered(self, request: Received) -> list[str]:
        """The notification ids one request carried: one, or a digest's (webhook JSON; text: its "id" lines)."""
        if self.kind == "webhook":
            frame = orjson.loads(request.body)
            if frame.get("method") == "notifications/alerts_digest":
                return [n["alert_id"] for n in frame["params"]["notifications"]]
            return [frame["params"]["alert_id"]]
        text = orjson.loads(request.body)["text"] if self.kind == "telegram" else request.body.decode()
        lines = text.split("\n")
        if " more alerts fired" in lines[0]:
            return [line.rsplit(" id ", 1)[1] for line in lines[1:]]
        return [lines[-1].removeprefix("id: ")]

    def delivered_ids(self) -> list[str]:
        """Every notification id of every delivered request, in the order received (digests expanded)."""
        return [i for r in self.delivered() for i in self.covered(r)]

    def first_delivery_order(self) -> list[str]:
        """Idempotency keys in the order each was first delivered."""
        seen: dict[str, None] = {}
        for r in self.delivered():
            seen.setdefault(r.key, None)
        return list(seen)

    def _behaviour(self) -> str:
        if self.down_until is not None and self.clock() < self.down_until:
            return "fail"
        if self.forced:
            return self.forced.pop(0)
        if self.chaos and self._rng.random() < self.chaos:
            return self._rng.choice(["fail", "stall", "429"])
        return "ok"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        behaviour = self._behaviour()
        ok = behaviour == "ok"
        self.requests.append(Received(request.path, dict(request.headers), body, self.clock(), ok))
        self.arrived.set()
        if behaviour == "stall":
            await self._closing.wait()  # the client gives up first; released when the receiver closes
        if behaviour == "fail":
            return web.Response(status=503, text="unavailable")
        if behaviour == "redirect":
            return web.Response(status=302, headers={"Location": REDIRECT_TO}, text="moved")
        if behaviour == "429":
            if self.kind == "telegram":
                answer: dict[str, Any] = {
                    "ok": False,
                    "error_code": 429,
                    "description": "Too Many Requests: retry later",
                    "parameters": {"retry_after": self.retry_after_s},
                }
                return web.Response(status=429, body=orjson.dumps(answer), content_type="application/json")
            return web.Response(status=429, headers={"Retry-After": str(self.retry_after_s)}, text="slow down")
        if self.kind == "telegram":
            sent = orjson.loads(body)
            result = {"message_id": len(self.requests), "chat": {"id": sent.get("chat_id")}, "text": sent.get("text")}
            return web.Response(body=orjson.dumps({"ok": True, "result": result}), content_type="application/json")
        if self.kind == "ntfy":
            return web.json_response({"id": f"m{len(self.requests)}", "event": "message"})
        return web.Response(status=204)


def channel_table(
    name: str,
    receiver: Receiver,
    *,
    timeout_s: float = 2.0,
    secret: str = "whsec-test",
    max_per_minute: int | None = None,
    subscribers: list[str] | None = None,
) -> str:
    """The ``[channels.NAME]`` TOML table pointing at ``receiver`` (on loopback: ``allow_private_address``)."""
    lines = [f"[channels.{name}]", f'kind = "{receiver.kind}"', f"timeout_s = {timeout_s}"]
    lines.append("allow_private_address = true")
    if max_per_minute is not None:
        lines.append(f"max_per_minute = {max_per_minute}")
    if subscribers is not None:
        lines.append("subscribers = [" + ", ".join(f'"{s}"' for s in subscribers) + "]")
    if receiver.kind == "webhook":
        lines += [f'url = "{receiver.url}"', f'secret = "{secret}"']
    elif receiver.kind == "telegram":
        lines += [f'api_url = "{receiver.url}"', 'bot_token = "123456:TEST-token"', 'chat_id = "42"']
    else:
        lines += [f'url = "{receiver.url}"']
    return "\n".join(lines) + "\n"
