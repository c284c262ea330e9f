"""The simulated exchange's state: markets, clock, faults, weights, streams and counters.

Everything the REST handlers, the stream handlers and the control API share lives here;
the order book and accounts of the trading half attach to the same object.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from simulator.accounts import SimAccount
from simulator.book import BOOK_LEVELS, Book, OrderBooks
from simulator.clock import ClockMode, SimClock
from simulator.conditional import Conditionals
from simulator.count_filters import CountFilters
from simulator.faults import Faults
from simulator.market import INTERVAL_MS, Market, kline_frame, klines_of, open_time_of
from simulator.market_streams import MarketStreams
from simulator.order_lists import OrderLists
from simulator.order_rate import OrderRate
from simulator.prices import start_price
from simulator.streams import KLINE_PERIOD_MS, StreamConnection, StreamHub
from simulator.tape import Tape
from simulator.weights import WeightMeter
from simulator.ws_api_hub import WsApiHub

DEFAULT_SYMBOLS = ("BTCUSDT", "ETHUSDT", "SOLUSDT", "BNBUSDT")
DEFAULT_API_KEY = "sim-api-key"
DEFAULT_API_SECRET = "sim-api-secret"


@dataclass
class SimConfig:
    seed: int = 42
    symbols: tuple[str, ...] = DEFAULT_SYMBOLS
    clock: ClockMode = "manual"
    speed: float = 1.0
    start_ms: int | None = None
    weight_limit: int = 6000
    ping_interval_s: float = 20.0
    max_connection_age_s: float = 86_400.0
    api_key: str = DEFAULT_API_KEY
    api_secret: str = DEFAULT_API_SECRET
    balances: dict[str, Decimal] = field(default_factory=lambda: {"USDT": Decimal("10000"), "BTC": Decimal("0")})


class SimExchange:
    """One exchange instance (one account, many symbols)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.clock = SimClock(config.clock, start_ms=config.start_ms, speed=config.speed)
        self.faults = Faults()
        self.weights = WeightMeter(config.weight_limit)
        self.hub = StreamHub(self.faults, ping_interval_s=config.ping_interval_s, max_age_s=config.max_connection_age_s)
        self.requests: Counter[str] = Counter()
        self.order_posts_ns: deque[int] = deque(maxlen=10_000)
        self.order_arrivals: dict[str, int] = {}
        """When each order request first arrived (``time.monotonic_ns``), by client order id (benchmarks)."""
        """When each ``POST /api/v3/order`` arrived (``time.monotonic_ns``, comparable across processes): benchmarks."""
        origin = self.clock.now_ms()
        self.markets: dict[str, Market] = {s.upper(): Market(s.upper(), config.seed, origin) for s in config.symbols}
        self.account = SimAccount(config.balances, OrderBooks(self.markets))
        self.order_rate = OrderRate(self.now_ms)
        """The account's order-placement counts per ``ORDERS`` interval (order_rate.py)."""
        self.count_filters = CountFilters()
        """The MAX_NUM_* filters in force (count_filters.py)."""
        self.conditional = Conditionals(self.account, self.count_filters)
        self.order_lists = OrderLists(self.account, self.conditional)
        self.ws_api = WsApiHub()
        self.tapes: dict[str, Tape] = {s: Tape(m) for s, m in self.markets.items()}
        self.market_streams = MarketStreams(self)
        self.account.listeners.append(self._record_fill)
        self.account.trade_hooks.append(self._push_after_walk)

    # --- time ------------------------------------------------------------------------
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def server_time(self) -> int:
        return self.now_ms() + self.faults.clock_skew_ms

    def start_prices(self) -> list[tuple[str, float]]:
        return [(s, start_price(s)) for s in self.markets]

    # --- streams -----------------------------------------------------------------------
    def subscribe(self, conn: StreamConnection, name: str) -> None:
        """Add a stream to a connection, remembering the kline it is at now."""
        from simulator.streams import parse_stream

        key = parse_stream(name)
        open_t = open_time_of(key[1], self.now_ms()) if key and key[1] in INTERVAL_MS else 0
        conn.streams[name] = open_t
        self.market_streams.subscribe(name)

    def push_updates(self, symbol: str | None = None, *, elapsed_ms: int | None = None) -> int:
        """Bring every subscribed stream up to now; kline streams: closed klines (x=true) in order, then the open one.

        ``symbol`` limits the push to one market (a trade); ``elapsed_ms`` is the periodic
        timer's (market_streams.py: what is due when); returns the number of frames queued.
        """
        now = self.now_ms()
        frames = self.market_streams.push(symbol, elapsed_ms=elapsed_ms)
        if elapsed_ms is not None and elapsed_ms % KLINE_PERIOD_MS:
            return frames
        due = []  # every kline stream's klines are priced together (market.klines_of), then pushed in order
        for (sym, interval), subs in self.hub.subscribers().items():
            if symbol is not None and sym != symbol:
                continue
            market = self.markets.get(sym)
            if market is None or interval not in INTERVAL_MS:
                continue
            step = INTERVAL_MS[interval]
            current = open_time_of(interval, now)
            oldest = min(conn.streams[name] for conn, name in subs)
            times = list(range(oldest, current + step, step)) if oldest else [current]
            due.append((sym, interval, subs, market, times))
        priced = klines_of([(market, interval, times) for _, interval, _, market, times in due], now)
        for (sym, interval, subs, _, _), got in zip(due, priced, strict=True):
            step, current = INTERVAL_MS[interval], open_time_of(interval, now)
            klines = {k.open_time: k for k in got}
            payloads: dict[int, Any] = {}  # each frame serialised once for every connection of the stream
            for conn, name in subs:
                last = conn.streams[name] or current
                for t in [*range(last, current, step), current]:
                    if t not in payloads:
                        payloads[t] = kline_frame(sym, interval, klines[t], now)
                    conn.push(name, payloads[t])
                    frames += 1
                conn.streams[name] = current
        return frames

    def trade(self, symbol: str, price: float, qty: float) -> float:
        """A trade now at ``price`` snapped to the tick (returned): re-anchors the path, fills resting orders."""
        price = self.markets[symbol].trade(self.now_ms(), price, qty)
        self.account.match(symbol, Decimal(f"{price:.8f}"), self.now_ms(), Decimal(repr(qty)))
        self.conditional.on_price(symbol, Decimal(f"{price:.8f}"), self.now_ms())
        self.push_updates(symbol)
        return price

    # --- order book and trade tape (book.py, tape.py) ------------------------------------
    def book(self, symbol: str, limit: int = BOOK_LEVELS) -> Book:
        """The order book now: ``limit`` levels a side (at most ``BOOK_LEVELS``), Decimal prices.

        The one source of ``GET /api/v3/depth``: takers' fills consume it and deeper levels come
        into view (book.py); its ``last_update_id`` never decreases and grows whenever its
        content changes.
        """
        return self.account.books.book(symbol, self.now_ms(), min(limit, BOOK_LEVELS))

    def best_bid_ask(self, symbol: str) -> tuple[Decimal, Decimal]:
        """(best bid, best ask) now; ``bid < ask`` (``bid < last ≤ ask`` until a taker trades at the bid).

        Neither side reads empty: takers bring deeper levels into view (book.py).
        """
        book = self.account.books.book(symbol, self.now_ms(), 1)
        return book.best_bid[0], book.best_ask[0]

    def _push_after_walk(self, symbol: str, prices: list[Decimal], now: int) -> None:
        """A taker's walk changed ``symbol``'s book and tape: push its market streams at once.

        Every order path (REST, a triggered stop, a list leg) walks through the account, so
        ``@trade``, ``@depth``, ``@bookTicker``… follow each fill without waiting for the clock
        or the 100 ms sampling (a depth snapshot taken between two orders is then rebuildable
        from the diff stream).  The open kline is pushed too, as Binance's kline stream follows every
        trade: a client's last price is then the trade's, as ``ticker/price`` says.  A walk inside a
        posted trade (a stop it triggered) pushes the open kline twice: an update of an open kline
        may repeat, as Binance's does.
        """
        if symbol in self.markets:
            self.push_updates(symbol)

    def _record_fill(self, event: dict[str, Any]) -> None:
        """Resting orders' fills are public trades too (on the tape and in klines; they do not move the path).

        A taker's fills are printed by the book it took them from (book.py), which re-anchors the path.
        """
        if event.get("e") != "executionReport" or event.get("x") != "TRADE" or event.get("s") not in self.markets:
            return
        if not event["m"]:
            return
        buyer_maker = (event["S"] == "BUY") == bool(event["m"])
        qty = float(event["l"])
        if qty > 0:
            self.markets[event["s"]].record_fill(int(event["T"]), float(event["L"]), qty, buyer_maker=buyer_maker)

    def match_resting(self) -> int:
        """Fill resting orders the price path has reached (after the clock moved).

        The path's price now is a trade of the tape's last trade's quantity (what an order
        resting exactly at that price can get).
        """
        now = self.now_ms()
        symbols = {o.symbol for o in self.account.orders.values() if o.status in ("NEW", "PARTIALLY_FILLED")}
        filled = 0
        for s in sorted(symbols & set(self.markets)):
            price = Decimal(f"{self.markets[s].last_price(now):.8f}")
            qty = self.tapes[s].last_trade(now).qty
            filled += self.account.match(s, price, now, qty) + self.conditional.on_price(s, price, now)
        return filled

    def advance(self, seconds: float) -> dict[str, Any]:
        before = self.now_ms()
        after = self.clock.advance(seconds)
        closed = 0
        for interval, step in INTERVAL_MS.items():
            closed += max(0, (open_time_of(interval, after) - open_time_of(interval, before)) // step)
        filled = self.match_resting()
        frames = self.push_updates()
        return {"ok": True, "time": after, "closed_per_market": closed, "frames": frames, "orders_filled": filled}

    def state(self) -> dict[str, Any]:
        return {
            "orders": [
                {
                    k: o.rest_view()[k]
                    for k in (
                        "symbol",
                        "orderId",
                        "clientOrderId",
                        "status",
                        "side",
                        "type",
                        "price",
                        "origQty",
                        "executedQty",
                    )
                }
                for o in self.account.orders.values()
            ],
            "balances": {b["asset"]: {"free": b["free"], "locked": b["locked"]} for b in self.account.balances_view()},
            "ws_api": self.ws_api.state(),
            "requests": dict(self.requests),
            "order_posts_ns": list(self.order_posts_ns),
            "weight_used_1m": self.weights.used(),
            "order_rate": self.order_rate.counts(),
            "count_filters": self.count_filters.state(self.account, self.order_lists),
            "streams": self.hub.state(),
            "clock_ms": self.now_ms(),
            "symbols": sorted(self.markets),
        }
