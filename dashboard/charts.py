"""The markets page's chart data: the engine's series payload plus markers of fired alerts and fills.

The series is what generate_chart's ``format: "series"`` returns for the engine's indicators
(built by the chart service from the engine's window; at a cluster front, which follows no market,
from the exchange's REST history as the front's generate_chart does), so the page draws exactly
what the PNG charts and the tools see.  Markers: each alert of the market that fired within the shown bars
(at the bar it fired in, at its value) and each fill of the symbol (at the bar of its trade).
"""

from __future__ import annotations

from typing import Any

import orjson

from alerts import recent_fired
from dashboard.deps import DashboardDeps
from mcp_bridge import ToolError, chart_request

INTERVAL_S = {"1m": 60, "3m": 180, "5m": 300, "15m": 900, "30m": 1800, "1h": 3600, "2h": 7200, "4h": 14400,
              "6h": 21600, "8h": 28800, "12h": 43200, "1d": 86400, "3d": 259200, "1w": 604800}  # fmt: skip


async def chart_payload(deps: DashboardDeps, symbol: str, interval: str, bars: int) -> dict[str, Any]:
    """The series payload of one followed market with ``markers``; ToolError names a bad argument."""
    if deps.services.engine is None and deps.cluster is None:
        raise ToolError("the live engine is not running: start the daemon with --trade")
    req = chart_request(
        {"symbol": symbol, "interval": interval, "indicators": list(deps.indicators), "bars": bars,
         "format": "series", "source": "auto"},
        min(deps.services.max_bars, 1000),
    )  # fmt: skip
    out = await deps.services.charts.chart(req)
    payload: dict[str, Any] = orjson.loads(out.text or "{}")
    times = [b["t"] for b in payload.get("bars", []) if b.get("t") is not None]
    payload["markers"] = await _markers(deps, symbol.upper(), interval, times) if times else []
    return payload


def _bar_of(t: float, times: list[int], step: int) -> int | None:
    if t < times[0] or t >= times[-1] + step:
        return None
    return int(t // step * step)


async def _markers(deps: DashboardDeps, symbol: str, interval: str, times: list[int]) -> list[dict[str, Any]]:
    step = INTERVAL_S.get(interval, 60)
    out: list[dict[str, Any]] = []
    alerts = deps.services.alerts
    if alerts is not None:
        for r in await recent_fired(alerts.store.db, 200):
            record = orjson.loads(r["record"])
            bar = _bar_of(r["at"], times, step)
            if record.get("symbol") == symbol and bar is not None:
                label = record.get("note") or record.get("kind", "alert").replace("_", " ")
                out.append({"t": bar, "kind": "alert", "price": r["value"], "text": f"alert: {label}"})
    orders = deps.services.orders
    if orders is not None:
        fills = await orders.store.fills(orders.broker.name, symbol)
    else:
        fills = await deps.cluster.fills(symbol) if deps.cluster is not None else []
    for f in fills:
        bar = _bar_of(f.time_ms / 1000, times, step)
        if bar is not None:
            text = f"{f.side.lower()} {f.quantity.normalize():f} @ {f.price.normalize():f}"
            out.append({"t": bar, "kind": "fill", "price": float(f.price), "text": text})
    return out
