"""The Binance user data stream over the WebSocket API (``userDataStream.subscribe.signature``).

listenKey streams no longer exist on the testnet; the WS-API subscription is signed with
the account's HMAC key.  :meth:`UserStream.run` connects, subscribes and turns
``executionReport`` events into order updates (with their fill) for the tracker.  Any end
of the subscription — a dropped connection, ``eventStreamTerminated``, a refused
subscription — raises, so the daemon's supervisor reconnects it with backoff; after every
(re)subscription ``on_resubscribed`` runs (reconciliation), so fills that happened while the
stream was down are not missed.

Why ours and not python-binance's (1.0.37 implements the same subscription in
``binance/ws/keepalive_websocket.py``): measured against the simulator by
``python -m bench.python_binance_gaps`` (three drops of the WS-API connection, one limit
order after each; 2-core AMD EPYC) and pinned by tests/brokers/test_user_stream_vs_python_binance.py:

- As shipped, its WS-API connection comes back by itself (after ~2 s) but nothing subscribes
  again: the exchange holds 0 subscriptions, the socket has delivered two ``{"e": "error"}``
  messages and then waits for ever — 0 execution reports for the order placed afterwards.
- Rebuilt by a supervisor on every error message (the best wrapper we could write), every
  resubscription took 10.1 s (3 of 3 drops): its read loop reconnects after a random 1–2 s
  wait while the subscribe request has already opened a second connection; the answer
  arrives on the connection nobody reads and the request fails with "Request timed out"
  after its fixed 10-s ``TIMEOUT``.  Ours resubscribed in 0.1 s (the loop's own pause) and
  delivered every report.
- Closing it waits for that same 10-s ``recv()`` timeout.
So a drop would cost ≥ 10 s of fills learnt only by reconciliation instead of 0.1 s; the
signing (:func:`sign`) and the frame handling here are ~60 lines.

Protective orders and lists: an execution report's ``P`` (stop price), ``d`` (trailing delta)
and ``W`` (working time: a conditional order is ``triggered`` once it is set) are parsed;
``listStatus`` events go to ``on_list`` (:func:`brokers.binance.lists.list_from_event`).
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import aiohttp
import orjson
import structlog

from brokers.binance.lists import list_from_event
from brokers.models import STOP_TYPES, ExchangeList, ExchangeOrder, Fill

log = structlog.get_logger(__name__)

OrderHandler = Callable[[ExchangeOrder], Awaitable[None]]
ListHandler = Callable[[ExchangeList], Awaitable[None]]


class UserStreamEnded(Exception):
    """The subscription ended (terminated, refused or disconnected); the supervisor restarts it."""


def sign(params: dict[str, Any], secret: str) -> str:
    """HMAC-SHA256 (hex) of the parameters sorted by name, as the WS-API requires."""
    payload = "&".join(f"{k}={params[k]}" for k in sorted(params))
    return hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()


def execution_to_update(e: dict[str, Any]) -> ExchangeOrder:
    """An ``executionReport`` event as an order update (with its fill when ``x`` is TRADE)."""
    fills: tuple[Fill, ...] = ()
    if e.get("x") == "TRADE" and Decimal(str(e.get("l", "0"))) > 0:
        fills = (
            Fill(
                trade_id=int(e.get("t", 0)),
                symbol=e["s"],
                side=e["S"],
                client_order_id=e["c"],
                quantity=Decimal(str(e["l"])),
                price=Decimal(str(e["L"])),
                commission=Decimal(str(e.get("n", "0") or "0")),
                commission_asset=str(e.get("N") or ""),
                time_ms=int(e.get("T", 0)),
            ),
        )
    status = e["X"]
    client_id = e["C"] if status == "CANCELED" and e.get("C") else e["c"]
    price = Decimal(str(e.get("p", "0")))
    stop = Decimal(str(e.get("P", "0") or "0"))
    delta = e.get("d")
    return ExchangeOrder(
        symbol=e["s"],
        client_order_id=client_id,
        status=status,
        side=e["S"],
        type=e["o"],
        orig_qty=Decimal(str(e.get("q", "0"))),
        executed_qty=Decimal(str(e.get("z", "0"))),
        cumulative_quote=Decimal(str(e.get("Z", "0"))),
        price=price if price > 0 else None,
        exchange_order_id=str(e.get("i")),
        time_in_force=e.get("f"),
        update_time_ms=e.get("E"),
        reject_reason=None if e.get("r") in (None, "NONE") else str(e.get("r")),
        fills=fills,
        stop_price=stop if stop > 0 else None,
        trailing_delta=None if delta in (None, "", 0, "0") else int(delta),
        triggered=e.get("o") in STOP_TYPES and e.get("W") not in (None, -1, "-1"),
    )


class UserStream:
    """One supervised WS-API connection carrying the account's execution events."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        ws_api_url: str,
        *,
        api_key: str,
        api_secret: str,
        on_order: OrderHandler,
        on_resubscribed: Callable[[], Awaitable[Any]] | None = None,
        on_list: ListHandler | None = None,
        time_offset_ms: Callable[[], int] = lambda: 0,
        heartbeat_s: float = 20.0,
    ) -> None:
        self._session = session
        self._url = ws_api_url
        self._key = api_key
        self._secret = api_secret
        self._on_order = on_order
        self._on_resubscribed = on_resubscribed
        self._on_list = on_list
        self._offset = time_offset_ms
        self._heartbeat = heartbeat_s
        self.connected = False
        self.subscriptions = 0
        self.events = 0

    async def run(self) -> None:
        """Connect, subscribe and forward events until the stream ends (then raise UserStreamEnded)."""
        try:
            async with self._session.ws_connect(self._url, heartbeat=self._heartbeat) as ws:
                params: dict[str, Any] = {"apiKey": self._key, "timestamp": int(time.time() * 1000) + self._offset()}
                params["signature"] = sign(params, self._secret)
                request_id = str(uuid.uuid4())
                await ws.send_str(orjson.dumps(
                    {"id": request_id, "method": "userDataStream.subscribe.signature", "params": params}
                ).decode())  # fmt: skip
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                            break
                        continue
                    data = orjson.loads(msg.data)
                    if data.get("id") == request_id:
                        if data.get("status") != 200:
                            error = data.get("error", {})
                            raise UserStreamEnded(f"subscription refused: {error.get('code')} {error.get('msg')}")
                        self.connected = True
                        self.subscriptions += 1
                        log.info("user_stream_subscribed", subscription=data.get("result", {}).get("subscriptionId"))
                        if self._on_resubscribed is not None:
                            await self._on_resubscribed()
                        continue
                    event = data.get("event") if isinstance(data.get("event"), dict) else None
                    if event is None:
                        continue
                    kind = event.get("e")
                    if kind == "executionReport":
                        self.events += 1
                        await self._on_order(execution_to_update(event))
                    elif kind == "listStatus" and self._on_list is not None:
                        self.events += 1
                        await self._on_list(list_from_event(event))
                    elif kind == "eventStreamTerminated":
                        raise UserStreamEnded("Binance ended the user data stream (eventStreamTerminated)")
        except aiohttp.ClientError as exc:
            raise UserStreamEnded(f"user data stream connection failed: {exc}") from None
        finally:
            self.connected = False
        raise UserStreamEnded("user data stream closed by the exchange")
