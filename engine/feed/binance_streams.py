"""Our own Binance market-stream manager on aiohttp websockets.

Streams are spread over combined-stream connections (at most ``max_streams_per_connection``
each, 1024 on Binance).  Each connection is one supervised task that connects, subscribes
(a few streams in the URL, the rest by paced ``SUBSCRIBE`` messages, since Binance takes
at most 5 incoming messages per second), reads, and reconnects:

* immediately after a ``serverShutdown`` event or a proactive rotation before the
  exchange's connection-age cut;
* with exponential backoff and jitter after an error, a close, or a stall (no data
  message within ``stall_timeout_s``; ping frames do not count as data);
* after minutes (``refused_backoff_s``) when the handshake is refused with HTTP 451 or 403:
  the exchange refuses this location or IP, and retrying every few seconds changes nothing.

Each connection keeps its :class:`~engine.feed.health.LastError` until it connects again.
A refused handshake's body is discarded by aiohttp, so the exchange's own message
("Service unavailable from a restricted location …") is read with one plain GET of the
same URL, which the exchange refuses in the same words.

Reading (:mod:`engine.feed.stream_reader`, one :class:`~engine.feed.stream_reader.SessionReader`
per session): after aiohttp's handshake the connection's incoming bytes are taken over from it
(:mod:`engine.feed.ws_frames`, which says why) and split by our frame reader, and every message
that arrived is applied in one pass — JSON by orjson, a kline decoded straight into the sink's
``apply_kline`` (no :class:`~engine.feed.messages.KlineUpdate` per message).  When aiohttp's
internals differ, each message comes through ``ws.receive()`` instead, as before.

The sink hears which streams are live (connected and acknowledged) and which went down, so
it can backfill over REST after every (re)connect.  :class:`~engine.feed.stream_manager.StreamManager`
spreads streams over these connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Iterable
from typing import Any, Literal

import aiohttp
import orjson
import structlog

from engine.feed.health import (
    LastError,
    from_exception,
    log_refusal,
    retry_delay,
)
from engine.feed.messages import KlineUpdate
from engine.feed.protocol import StreamSink
from engine.feed.stream_reader import ConnectionStats, SessionDeadlines, SessionReader
from engine.feed.stream_settings import StreamSettings
from engine.feed.ws_frames import FrameFeed
from engine.market_data.binance_rest import host_of
from engine.market_data.errors import is_refusal

log = structlog.get_logger(__name__)


class StreamConnection:
    """One combined-stream websocket carrying a set of streams, reconnecting forever."""

    def __init__(
        self,
        conn_id: int,
        session: aiohttp.ClientSession,
        base_url: str,
        sink: StreamSink,
        settings: StreamSettings,
        rng: random.Random,
    ) -> None:
        self.conn_id = conn_id
        self._session = session
        self._base_url = base_url.rstrip("/")
        self._sink = sink
        self._settings = settings
        self._rng = rng
        self.streams: set[str] = set()
        self.live: set[str] = set()
        self.connected = False
        self.stats = ConnectionStats()
        self.last_error: LastError | None = None
        """Why the connection is (or last was) down; None once it connects again."""
        self._end: LastError | None = None
        self._ws: aiohttp.ClientWebSocketResponse[Literal[False]] | None = None
        self._to_subscribe: list[str] = []
        self._to_unsubscribe: list[str] = []
        self._pending_acks: dict[int, tuple[str, list[str]]] = {}
        self._next_id = 1
        self._control = asyncio.Event()
        self._restart_reason: str | None = None
        self._wake = asyncio.Event()
        self._closer: asyncio.Future[bool] | None = None
        self._frames: FrameFeed | None = None

    # --- stream set ----------------------------------------------------------------
    def add(self, streams: Iterable[str]) -> None:
        new = [s for s in streams if s not in self.streams]
        was_empty = not self.streams
        self.streams.update(new)
        if was_empty and new:
            self._wake.set()
        if self.connected and new:
            self._to_subscribe.extend(new)
            self._control.set()

    def remove(self, streams: Iterable[str]) -> None:
        gone = [s for s in streams if s in self.streams]
        for s in gone:
            self.streams.discard(s)
            self.live.discard(s)
        self._to_subscribe = [s for s in self._to_subscribe if s in self.streams]
        if self.connected and gone:
            self._to_unsubscribe.extend(gone)
            self._control.set()

    def request_restart(self, reason: str = "requested") -> None:
        """Reconnect now without backoff (used for rotation and by tests)."""
        self._restart_reason = reason
        self._wake.set()
        self._control.set()
        ws = self._ws
        if ws is not None and self._closer is None:
            self._closer = asyncio.ensure_future(ws.close())
        if self._frames is not None:
            self._frames.wake()

    def _kline_sink(self) -> Callable[..., None]:
        """What a decoded kline goes to: the sink's ``apply_kline`` (the update's fields as
        arguments, so no :class:`KlineUpdate` is built per message) or else its ``on_kline``."""
        apply = getattr(self._sink, "apply_kline", None)
        if callable(apply):
            return apply
        on_kline = self._sink.on_kline
        return lambda *fields: on_kline(KlineUpdate(*fields))

    # --- lifecycle -----------------------------------------------------------------
    async def run(self) -> None:
        """Connect, serve and reconnect until cancelled."""
        attempt = 0
        while True:
            if not self.streams:
                self._wake.clear()
                await self._wake.wait()
                continue
            reason = "closed"
            healthy = False
            self._end = None
            try:
                reason, healthy = await self._session_once()
            except asyncio.CancelledError:
                raise
            except aiohttp.WSServerHandshakeError as exc:
                self.stats.connect_failures += 1
                self._end = await self._handshake_refused(exc)
                reason = "error"
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                self.stats.connect_failures += 1
                timed_out = f"no handshake within {self._settings.connect_timeout_s:g} s"
                cause = timed_out if isinstance(exc, TimeoutError) else from_exception(exc).message
                self._end = LastError(f"cannot connect to {self._host}: {cause}")
                log.warning("stream_connect_failed", conn=self.conn_id, error=self._end.message)
                reason = "error"
            except Exception as exc:
                self.stats.connect_failures += 1
                self._end = LastError(f"session crashed: {type(exc).__name__}: {exc}")
                log.exception("stream_session_crashed", conn=self.conn_id)
                reason = "error"
            finally:
                self._went_down()
            if reason in ("shutdown", "rotate", "requested"):
                attempt = 0
                continue
            if healthy:
                attempt = 0
            error = self._end or LastError(f"connection to {self._host} ended ({reason})")
            s = self._settings
            delay = retry_delay(
                attempt,
                initial_s=s.backoff_initial_s,
                max_s=s.backoff_max_s,
                rng=self._rng,
                refused=error.refused,
                refused_s=s.refused_backoff_s,
            )
            self.last_error = error.scheduled(delay)
            attempt = min(attempt + 1, 30)
            if error.refused:
                self.stats.refusals += 1
                log_refusal("stream_refused", error, delay, conn=self.conn_id)
            log.info("stream_reconnect_wait", conn=self.conn_id, reason=reason, delay_s=round(delay, 3))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    @property
    def _host(self) -> str:
        return host_of(self._base_url)

    async def _handshake_refused(self, exc: aiohttp.WSServerHandshakeError) -> LastError:
        """The error for a handshake answered with an HTTP status instead of 101 (the exchange's words if refused)."""
        said = ""
        if is_refusal(exc.status):
            msg = await self._refusal_message(exc.status)
            said = f": {msg}" if msg else ""
        error = LastError(f"HTTP {exc.status} on websocket handshake to {self._host}{said}", exc.status)
        if not error.refused:
            log.warning("stream_connect_failed", conn=self.conn_id, error=error.message)
        return error

    async def _refusal_message(self, status: int) -> str | None:
        """The exchange's ``msg`` for a refused handshake, read with one plain GET (None if it says nothing)."""
        url = self._url(sorted(self.streams)[:1]).replace("ws", "http", 1)
        try:
            async with asyncio.timeout(self._settings.connect_timeout_s):
                async with self._session.get(url) as resp:
                    if resp.status != status:
                        return None
                    body = await resp.content.read(8192)
            data = orjson.loads(body)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the message is a courtesy; the status alone is reported then
            return None
        msg = data.get("msg") if isinstance(data, dict) else None
        return (msg.strip() or None) if isinstance(msg, str) else None

    def _went_down(self) -> None:
        was_live = list(self.live)
        self.connected = False
        self.live.clear()
        self._ws = None
        self._closer = None
        self._pending_acks.clear()
        self._to_subscribe.clear()
        self._to_unsubscribe.clear()
        if was_live:
            self._sink.on_streams_down(was_live)

    def _url(self, streams: list[str]) -> str:
        return f"{self._base_url}/stream?streams={'/'.join(streams)}"

    async def _session_once(self) -> tuple[str, bool]:
        """One websocket session; returns (why it ended, whether it delivered data)."""
        in_url = sorted(self.streams)[: self._settings.max_url_streams]
        async with asyncio.timeout(self._settings.connect_timeout_s):
            ws = await self._session.ws_connect(
                self._url(in_url),
                autoping=True,
                heartbeat=None,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=2.0),
                max_msg_size=0,
                decode_text=False,
            )
        loop = asyncio.get_running_loop()
        self._restart_reason = None
        self._ws = ws
        self.connected = True
        self.last_error = None
        self.stats.connects += 1
        connected_at = loop.time()
        messages_before = self.stats.messages
        log.info("stream_connected", conn=self.conn_id, streams=len(self.streams))
        self.live.update(in_url)
        in_url_set = set(in_url)
        self._to_subscribe = sorted(s for s in self.streams if s not in in_url_set)
        self._sink.on_streams_live(in_url)
        writer = asyncio.create_task(self._write_controls(ws), name=f"stream-{self.conn_id}-control")
        if self._to_subscribe:
            self._control.set()
        try:
            reason = await self._read(ws, connected_at)
            return reason, self.stats.messages > messages_before
        finally:
            writer.cancel()
            try:
                # not `await writer`: its CancelledError would also swallow a cancel of this task
                await asyncio.wait([writer])
                if not writer.cancelled():
                    writer.exception()  # retrieved: a failed control write ends nothing but itself
            finally:
                with contextlib.suppress(Exception):
                    await ws.close()

    async def _write_controls(self, ws: aiohttp.ClientWebSocketResponse[Literal[False]]) -> None:
        """Send queued SUBSCRIBE/UNSUBSCRIBE messages, paced for the exchange's message limit."""
        while True:
            await self._control.wait()
            self._control.clear()
            if self._restart_reason is not None:
                return
            batch = self._settings.subscribe_batch
            while self._to_unsubscribe or self._to_subscribe:
                if self._to_unsubscribe:
                    method, names = "UNSUBSCRIBE", self._to_unsubscribe[:batch]
                    del self._to_unsubscribe[:batch]
                else:
                    method, names = "SUBSCRIBE", self._to_subscribe[:batch]
                    del self._to_subscribe[:batch]
                msg_id = self._next_id
                self._next_id += 1
                self._pending_acks[msg_id] = (method, names)
                await ws.send_str(orjson.dumps({"method": method, "params": names, "id": msg_id}).decode())
                await asyncio.sleep(self._settings.control_interval_s)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse[Literal[False]], connected_at: float) -> str:
        """Read the session's messages until it ends (:mod:`engine.feed.stream_reader`); returns why."""
        reader = SessionReader(
            ws,
            SessionDeadlines.of(self._settings, connected_at),
            conn_id=self.conn_id,
            host=self._host,
            stats=self.stats,
            kline=self._kline_sink(),
            on_ack=self._on_ack,
            restart_reason=lambda: self._restart_reason,
        )
        frames = FrameFeed.attach(ws)
        if frames is None:  # another aiohttp: one message per ws.receive()
            reason = await reader.read_messages()
        else:
            self._frames = frames
            try:
                reason = await reader.read_frames(frames)
            finally:
                self._frames = None
                frames.detach()
        self._end = reader.end
        return reason

    def _on_ack(self, data: dict[str, Any]) -> None:
        ack_id = data.get("id")
        pending = self._pending_acks.pop(ack_id, None) if isinstance(ack_id, int) else None
        if pending is None:
            return
        method, names = pending
        if "code" in data:
            log.error("stream_control_rejected", conn=self.conn_id, method=method, error=data.get("msg"))
            return
        if method == "SUBSCRIBE":
            now_live = [s for s in names if s in self.streams]
            self.live.update(now_live)
            if now_live:
                self._sink.on_streams_live(now_live)
