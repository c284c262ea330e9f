"""The simulated exchange's state: markets, clock, faults, weights, streams and counters.

Everything the REST handlers, the stream handlers and the control API share lives here;
the order book and accounts of the trading half attach to the same object.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from brokers.simulator.accounts import SimAccount
from brokers.simulator.book import BOOK_LEVELS, Book, build_book
from brokers.simulator.clock import ClockMode, SimClock
from brokers.simulator.conditional import Conditionals
from brokers.simulator.faults import Faults
from brokers.simulator.market import INTERVAL_MS, Market, kline_event, open_time_of
from brokers.simulator.order_lists import OrderLists
from brokers.simulator.prices import start_price
from brokers.simulator.streams import StreamConnection, StreamHub
from brokers.simulator.tape import Tape
from brokers.simulator.weights import WeightMeter
from brokers.simulator.ws_api_hub import WsApiHub

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
        self.account = SimAccount(config.balances)
        self.conditional = Conditionals(self.account)
        self.order_lists = OrderLists(self.account, self.conditional)
        self.ws_api = WsApiHub()
        self.tapes: dict[str, Tape] = {s: Tape(m) for s, m in self.markets.items()}
        self.account.listeners.append(self._record_fill)

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
        from brokers.simulator.streams import parse_stream

        key = parse_stream(name)
        open_t = open_time_of(key[1], self.now_ms()) if key and key[1] in INTERVAL_MS else 0
        conn.streams[name] = open_t

    def push_updates(self, symbol: str | None = None) -> int:
        """Bring every subscribed kline stream up to now: closed klines (x=true) in order, then the open one.

        ``symbol`` limits the push to one market (a trade); returns the number of frames queued.
        """
        now = self.now_ms()
        frames = 0
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
            klines = {k.open_time: k for k in market.klines(interval, times, now)}
            for conn, name in subs:
                last = conn.streams[name] or current
                for t in range(last, current, step):
                    conn.push(name, kline_event(sym, interval, klines[t], now))
                    frames += 1
                conn.push(name, kline_event(sym, interval, klines[current], now))
                conn.streams[name] = current
                frames += 1
        return frames

    def trade(self, symbol: str, price: float, qty: float) -> float:
        """A trade now at ``price`` snapped to the tick (returned): re-anchors the path, fills resting orders."""
        price = self.markets[symbol].trade(self.now_ms(), price, qty)
        self.account.match(symbol, Decimal(f"{price:.8f}"), self.now_ms())
        self.conditional.on_price(symbol, Decimal(f"{price:.8f}"), self.now_ms())
        self.push_updates(symbol)
        return price

    # --- order book and trade tape (book.py, tape.py) ------------------------------------
    def book(self, symbol: str, limit: int = BOOK_LEVELS) -> Book:
        """The order book now: ``limit`` levels a side (at most ``BOOK_LEVELS``), Decimal prices."""
        return build_book(self.markets[symbol], self.now_ms(), max(1, min(limit, BOOK_LEVELS)))

    def best_bid_ask(self, symbol: str) -> tuple[Decimal, Decimal]:
        """(best bid, best ask) now; ``bid < last ≤ ask``, at least one tick apart."""
        book = build_book(self.markets[symbol], self.now_ms(), 1)
        return book.best_bid[0], book.best_ask[0]

    def _record_fill(self, event: dict[str, Any]) -> None:
        """Order fills are public trades too (on the tape and in klines; they do not move the path)."""
        if event.get("e") != "executionReport" or event.get("x") != "TRADE" or event.get("s") not in self.markets:
            return
        buyer_maker = (event["S"] == "BUY") == bool(event["m"])
        qty = float(event["l"])
        if qty > 0:
            self.markets[event["s"]].record_fill(int(event["T"]), float(event["L"]), qty, buyer_maker=buyer_maker)

    def match_resting(self) -> int:
        """Fill resting orders the price path has reached (after the clock moved)."""
        now = self.now_ms()
        symbols = {o.symbol for o in self.account.orders.values() if o.status == "NEW"}
        filled = 0
        for s in sorted(symbols & set(self.markets)):
            price = Decimal(f"{self.markets[s].last_price(now):.8f}")
            filled += self.account.match(s, price, now) + self.conditional.on_price(s, price, now)
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
            "streams": self.hub.state(),
            "clock_ms": self.now_ms(),
            "symbols": sorted(self.markets),
        }
