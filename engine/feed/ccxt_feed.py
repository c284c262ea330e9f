"""Markets of any ccxt exchange (``--exchange NAME``) behind the same feed seam as Binance.

Two pieces, so :class:`~engine.feed.sync.WindowSync` keeps every guarantee it gives for
Binance (backfill after each (re)connect, open candles never stored, gaps refilled):

* :class:`CcxtKlineRest` — the backfill source: the exchange clock and klines over ccxt's
  REST methods, shaped as Binance rows; ccxt errors become MarketDataError/RateLimited.
* :class:`CcxtStreamFeed` — one supervised ``watch_ohlcv`` loop per stream on ccxt.pro.
  ccxt gives candles, not Binance's closed flag, so a candle is taken as *closed* when a
  newer candle arrives (its last values are the final ones).  The first batch after a
  (re)connect only sets the current candle: older bars come from the REST backfill, never
  from a cache that may hold a candle's last values from before the drop.  No update within
  ``stall_timeout_s`` → the websocket clients are closed and every loop reconnects; errors
  back off exponentially with jitter, for minutes after an HTTP 451/403 (the exchange
  refuses this location or IP; ccxt names the status in its message).  Each stream keeps
  its last error until it is live again.  Proactive rotation is the owner's periodic
  ``restart_all("rotate")`` (the daemon schedules it every ``engine_rotate_after_s``); the
  feed itself keeps no timer for it.

Engine symbols are exchange market ids without separators (``BTCUSDT``; for Kraken e.g.
``XBTUSD`` or ``BTCUSD``); :class:`CcxtMarkets` maps them to ccxt's unified symbols.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import random
import re
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from engine.feed.health import LastError, from_exception, log_refusal, retry_delay
from engine.feed.messages import KlineUpdate, parse_stream_name
from engine.feed.protocol import StreamSink
from engine.feed.stream_settings import StreamSettings
from engine.market_data.binance_rest import KLINES_MAX_LIMIT, KlineRow
from engine.market_data.errors import REFUSED_STATUSES, MarketDataError, RateLimited
from engine.market_data.intervals import interval_seconds, to_binance

log = structlog.get_logger(__name__)

DEFAULT_RETRY_AFTER_S = 10.0
"""ccxt does not surface Retry-After; a rate-limited request is retried after this long."""

_REFUSAL_IN_TEXT = re.compile(r"(?:^|\s)(" + "|".join(map(str, sorted(REFUSED_STATUSES))) + r")(?=[\s,]|$)")


def refusal_status(exc: BaseException) -> int | None:
    """451 or 403 when a ccxt error is the exchange refusing this location or IP, else None.

    ccxt raises ``ExchangeNotAvailable("binance GET <url> 451 <reason> <body>")`` for these
    (and aiohttp's handshake error text for websockets), so the status is read from the text.
    """
    import ccxt

    if not isinstance(exc, (ccxt.ExchangeNotAvailable, ccxt.NetworkError, ccxt.PermissionDenied)):
        return None
    m = _REFUSAL_IN_TEXT.search(str(exc))
    return int(m.group(1)) if m else None


def build_pro_exchange(exchange_id: str, *, urls: dict[str, Any] | None = None) -> Any:
    """A public (key-less) ccxt.pro exchange; ``urls`` overrides its API URLs (tests: the simulator)."""
    import ccxt.pro as ccxtpro

    cls = getattr(ccxtpro, exchange_id, None)
    if cls is None or exchange_id not in ccxtpro.exchanges:
        sample = ", ".join(ccxtpro.exchanges[:8])
        raise MarketDataError(f"exchange {exchange_id!r} has no ccxt.pro websocket support; e.g. {sample}, …")
    options: dict[str, Any] = {"fetchCurrencies": False, "fetchMargins": False}
    if exchange_id.startswith("binance"):
        options["fetchMarkets"] = {"types": ["spot"]}
    exchange = cls({"enableRateLimit": True, "options": options, "newUpdates": True})
    if urls:
        api = dict(exchange.urls.get("api", {}))
        for k, v in urls.items():
            api[k] = {**api.get(k, {}), **v} if isinstance(v, dict) and isinstance(api.get(k), dict) else v
        exchange.urls["api"] = api
    return exchange


def _compact(s: str) -> str:
    return "".join(ch for ch in s if ch.isalnum()).upper()


class CcxtMarkets:
    """Engine symbol (``BTCUSDT``) → ccxt unified symbol (``BTC/USDT``), loaded once."""

    def __init__(self, exchange: Any) -> None:
        self._exchange = exchange
        self._lock = asyncio.Lock()
        self._by_engine: dict[str, str] | None = None

    async def unified(self, symbol: str) -> str:
        async with self._lock:
            if self._by_engine is None:
                markets = await _call(self._exchange.load_markets())
                table: dict[str, str] = {}
                for m in markets.values():
                    if not m.get("spot", True) or m.get("active") is False:
                        continue
                    table.setdefault(_compact(f"{m.get('base', '')}{m.get('quote', '')}"), m["symbol"])
                for m in markets.values():  # exchange ids win over base+quote
                    if m.get("spot", True) and m.get("id"):
                        table[_compact(str(m["id"]))] = m["symbol"]
                self._by_engine = table
        found = self._by_engine.get(_compact(symbol))
        if found is None:
            raise MarketDataError(f"{symbol!r} is not a spot market on {self._exchange.id}")
        return found

    async def check(self, symbol: str) -> str | None:
        """None if ``symbol`` is a spot market of the exchange, else a message naming close ones."""
        try:
            await self.unified(symbol)
            return None
        except MarketDataError as exc:
            if self._by_engine is None:
                raise
            close = difflib.get_close_matches(_compact(symbol), sorted(self._by_engine), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            return f"{exc}{hint}"


async def _call(awaitable: Any, timeout_s: float | None = None) -> Any:
    """Await a ccxt call, mapping its errors onto the engine's market-data errors."""
    import ccxt

    try:
        return await asyncio.wait_for(awaitable, timeout_s) if timeout_s else await awaitable
    except TimeoutError as exc:
        raise MarketDataError(f"the exchange did not answer within {timeout_s:g} s") from exc
    except (ccxt.RateLimitExceeded, ccxt.DDoSProtection) as exc:
        raise RateLimited(f"rate limited by the exchange: {exc}", retry_after_s=DEFAULT_RETRY_AFTER_S) from exc
    except ccxt.BaseError as exc:
        raise MarketDataError(f"{type(exc).__name__}: {exc}", status=refusal_status(exc)) from exc


class CcxtKlineRest:
    """The backfill source of a ccxt exchange, with Binance's klines semantics."""

    def __init__(self, exchange: Any, markets: CcxtMarkets, *, timeout_s: float = 15.0) -> None:
        self._exchange = exchange
        self._markets = markets
        self._timeout_s = timeout_s

    async def server_time_ms(self, *, max_wait_s: float | None = None) -> int:
        if self._exchange.has.get("fetchTime"):
            return int(await _call(self._exchange.fetch_time(), self._timeout_s))
        return int(time.time() * 1000)  # exchanges without a clock endpoint: ours (NTP-synced on a VPS)

    async def klines(
        self,
        symbol: str,
        interval: str,
        *,
        limit: int = 500,
        start_ms: int | None = None,
        end_ms: int | None = None,
        max_wait_s: float | None = None,
    ) -> list[KlineRow]:
        name = to_binance(interval)
        if name not in (self._exchange.timeframes or {}):
            raise MarketDataError(
                f"{self._exchange.id} has no {name} candles; it has {', '.join(self._exchange.timeframes or {})}"
            )
        step_ms = interval_seconds(name) * 1000
        limit = max(1, min(limit, KLINES_MAX_LIMIT))
        since = start_ms
        if since is None and end_ms is not None:
            since = max(0, end_ms - (limit - 1) * step_ms)
        unified = await self._markets.unified(symbol)
        candles = await _call(self._exchange.fetch_ohlcv(unified, name, since, limit), self._timeout_s)
        rows: list[KlineRow] = []
        for c in candles or []:
            t = int(c[0])
            if (start_ms is not None and t < start_ms) or (end_ms is not None and t > end_ms):
                continue
            if any(x is None for x in c[1:6]):
                continue
            rows.append([t, c[1], c[2], c[3], c[4], c[5], t + step_ms - 1])
        return rows[-limit:]


@dataclass(slots=True)
class _StreamState:
    stream: str
    task: asyncio.Task[None] | None = None
    live: bool = False
    connects: int = 0
    errors: int = 0
    stalls: int = 0
    messages: int = 0
    last_error: LastError | None = None


class CcxtStreamFeed:
    """One ``watch_ohlcv`` loop per followed stream; same surface as the Binance StreamManager."""

    def __init__(
        self,
        exchange: Any,
        markets: CcxtMarkets,
        sink: StreamSink,
        settings: StreamSettings | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.exchange = exchange
        self._markets = markets
        self._sink = sink
        self._settings = settings or StreamSettings()
        self._rng = rng or random.Random()
        self._streams: dict[str, _StreamState] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._resetting: asyncio.Task[None] | None = None
        self.resets = 0

    # --- lifecycle ---------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[CcxtStreamFeed]:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for st in self._streams.values():
                    self._start(st)
                try:
                    yield self
                finally:
                    for st in self._streams.values():
                        if st.task is not None:
                            st.task.cancel()
        finally:
            self._tg = None
            with contextlib.suppress(Exception):
                await self.exchange.close()

    def _start(self, st: _StreamState) -> None:
        if self._tg is not None and st.task is None:
            st.task = self._tg.create_task(self._follow(st), name=f"ccxt-{st.stream}")

    # --- stream set ------------------------------------------------------------------
    def add(self, streams: Iterable[str]) -> None:
        for name in streams:
            if name not in self._streams:
                st = _StreamState(name)
                self._streams[name] = st
                self._start(st)

    def remove(self, streams: Iterable[str]) -> None:
        for name in streams:
            st = self._streams.pop(name, None)
            if st is not None and st.task is not None:
                st.task.cancel()

    def is_live(self, stream: str) -> bool:
        st = self._streams.get(stream)
        return st is not None and st.live

    def stream_error(self, stream: str) -> LastError | None:
        st = self._streams.get(stream)
        return None if st is None or st.live else st.last_error

    def restart_all(self, reason: str = "requested") -> None:
        """Drop every websocket; each loop reconnects (and the sink backfills)."""
        if self._resetting is None or self._resetting.done():
            self.resets += 1
            log.info("ccxt_feed_reset", exchange=self.exchange.id, reason=reason)
            self._resetting = asyncio.ensure_future(self.exchange.close_ws_clients())

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "exchange": self.exchange.id,
                "stream": st.stream,
                "live": st.live,
                "connects": st.connects,
                "errors": st.errors,
                "stalls": st.stalls,
                "messages": st.messages,
                "last_error": None if st.last_error is None else st.last_error.as_dict(),
            }
            for st in self._streams.values()
        ]

    # --- one stream --------------------------------------------------------------------
    async def _follow(self, st: _StreamState) -> None:
        symbol, interval = parse_stream_name(st.stream)
        attempt = 0
        while True:
            error: LastError | None = None
            try:
                unified = await self._markets.unified(symbol)
                got_data = await self._watch(st, symbol, interval, unified)
                if got_data:
                    attempt = 0
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    self._went_down(st)
                    raise
                # ccxt cancels its own futures when its clients close (a reset): reconnect
                log.info("ccxt_stream_reset", stream=st.stream)
            except Exception as exc:  # noqa: BLE001 - every failure reconnects with backoff
                st.errors += 1
                error = from_exception(exc)
                if not isinstance(exc, MarketDataError):
                    error = LastError(f"{self.exchange.id}: {type(exc).__name__}: {exc}", refusal_status(exc))
                if not error.refused:
                    log.warning("ccxt_stream_error", stream=st.stream, error=f"{type(exc).__name__}: {exc}")
            self._went_down(st)
            s = self._settings
            delay = retry_delay(
                attempt,
                initial_s=s.backoff_initial_s,
                max_s=s.backoff_max_s,
                rng=self._rng,
                refused=error is not None and error.refused,
                refused_s=s.refused_backoff_s,
            )
            attempt = min(attempt + 1, 30)
            if error is not None:
                st.last_error = error.scheduled(delay)
                if error.refused:
                    log_refusal("ccxt_stream_refused", error, delay, stream=st.stream)
            await asyncio.sleep(delay)

    def _went_down(self, st: _StreamState) -> None:
        if st.live:
            st.live = False
            if self._streams.get(st.stream) is st:
                self._sink.on_streams_down([st.stream])

    async def _watch(self, st: _StreamState, symbol: str, interval: str, unified: str) -> bool:
        """Read candles until an error or a stall; True if any data arrived."""
        timeframe = to_binance(interval)
        stall = self._settings.stall_timeout_s
        current: list[Any] | None = None
        got_data = False
        while True:
            try:
                candles = await asyncio.wait_for(self.exchange.watch_ohlcv(unified, timeframe), stall)
            except TimeoutError:
                st.stalls += 1
                log.warning("ccxt_stream_stalled", stream=st.stream, silent_s=stall)
                self.restart_all("stall")
                return got_data
            if not candles:
                continue
            got_data = True
            st.messages += 1
            now_ms = int(time.time() * 1000)
            batch = sorted((c for c in candles if not any(x is None for x in c[:6])), key=lambda c: c[0])
            if not batch:
                continue
            if not st.live:
                st.live = True
                st.last_error = None
                st.connects += 1
                self._sink.on_streams_live([st.stream])
                current = list(batch[-1])  # older candles come from the backfill
            for c in batch:
                if current is None or c[0] == current[0]:
                    current = list(c)
                elif c[0] > current[0]:
                    self._sink.on_kline(_update(symbol, timeframe, current, closed=True, now_ms=now_ms))
                    current = list(c)
            if current is not None:
                self._sink.on_kline(_update(symbol, timeframe, current, closed=False, now_ms=now_ms))


def _update(symbol: str, interval: str, c: list[Any], *, closed: bool, now_ms: int) -> KlineUpdate:
    return KlineUpdate(
        symbol=symbol,
        interval=interval,
        time=int(c[0]) // 1000,
        open=float(c[1]),
        high=float(c[2]),
        low=float(c[3]),
        close=float(c[4]),
        volume=float(c[5]),
        closed=closed,
        event_time_ms=now_ms,
    )
