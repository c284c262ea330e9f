"""The simulator's order limits lifted, for the benches that measure our order path above them.

The simulator enforces Binance's ORDERS limits for one account (100 placements per 10 s,
200,000 a day) and MAX_NUM_ORDERS / MAX_NUM_ORDER_LISTS per symbol, as Binance does.  The order
benches send faster than that (100 firings/s, ~50 orders/s through a cluster) or keep more orders
open (1,000 for reconciliation) to measure *our* path under load; against Binance one account
would be refused past the limits (our side of that refusal is tested in
tests/brokers/test_order_rate_limit.py).  So they lift the limits through the simulator's fault
knob before they start, and docs/benchmarks.md says so beside their rows.
"""

from __future__ import annotations

import aiohttp

LIFTED = {
    "order_rate": {"per_10s": 1_000_000_000, "per_day": 1_000_000_000},
    "max_num_orders": 1_000_000,
    "max_num_order_lists": 1_000_000,
}


async def lift_order_limits(sim_url: str) -> None:
    """``POST /sim/v1/faults`` with :data:`LIFTED` on the simulator at ``sim_url``."""
    async with aiohttp.ClientSession() as http, http.post(f"{sim_url}/sim/v1/faults", json=LIFTED) as r:
        if r.status != 200:
            raise RuntimeError(f"the simulator refused to lift its order limits: {r.status} {await r.text()}")
