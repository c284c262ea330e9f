"""Binance market-stream payloads decoded into the feed's own records.

Nothing above the feed sees a raw Binance dict: a kline event becomes a
:class:`KlineUpdate` (open time in unix seconds, prices as floats, the closed flag).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.market_data.intervals import to_binance


@dataclass(frozen=True, slots=True)
class KlineUpdate:
    """One kline event: the state of the kline opening at ``time`` (unix seconds)."""

    symbol: str
    interval: str
    time: int
    open: float
    high: float
    low: float
    close: float
    volume: float
    closed: bool
    event_time_ms: int


def stream_name(symbol: str, interval: str) -> str:
    """The Binance stream name for a symbol's klines, e.g. ``btcusdt@kline_1m``."""
    return f"{symbol.lower()}@kline_{to_binance(interval)}"


def parse_stream_name(name: str) -> tuple[str, str]:
    """``btcusdt@kline_1m`` → ``("BTCUSDT", "1m")``; raises ValueError for other streams."""
    sym, sep, kind = name.partition("@kline_")
    if not sep or not sym or not kind:
        raise ValueError(f"{name!r} is not a kline stream name (expected e.g. btcusdt@kline_1m)")
    return sym.upper(), kind


def parse_kline(data: dict[str, Any]) -> KlineUpdate:
    """Decode a ``"e":"kline"`` payload; raises KeyError/TypeError/ValueError when malformed."""
    k = data["k"]
    return KlineUpdate(
        symbol=k["s"],
        interval=k["i"],
        time=int(k["t"]) // 1000,
        open=float(k["o"]),
        high=float(k["h"]),
        low=float(k["l"]),
        close=float(k["c"]),
        volume=float(k["v"]),
        closed=bool(k["x"]),
        event_time_ms=int(data.get("E", 0)),
    )
