"""The REST row of a kline formatted by Python alone: the oracle the simulator's fast row paths are checked against."""

from __future__ import annotations

from simulator.market import Kline


def reference_row(k: Kline) -> tuple[object, ...]:
    """The REST row of one kline, formatted by Python alone (as before any fast path)."""
    taker = k.volume * 0.5
    return (
        k.open_time,
        f"{k.open:.8f}",
        f"{k.high:.8f}",
        f"{k.low:.8f}",
        f"{k.close:.8f}",
        f"{k.volume:.8f}",
        k.close_time,
        f"{k.volume * (k.open + k.close) / 2.0:.8f}",
        k.trades,
        f"{taker:.8f}",
        f"{taker * (k.open + k.close) / 2.0:.8f}",
        "0",
    )
