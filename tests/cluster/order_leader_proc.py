"""An order leader in its own process (tests/cluster/test_order_leader.py, bench.cluster_failover):
a BinanceBroker to the simulator and :func:`cluster.orders.run_leader` until SIGTERM (or SIGKILL).

    python -m tests.cluster.order_leader_proc DSN SIM_URL ACCOUNT MEMBER TTL_S RECV_WINDOW_S
"""

from __future__ import annotations

import asyncio
import signal
import sys

from brokers import BinanceBroker
from cluster.order_leader import OrderLeader, run_leader
from simulator import DEFAULT_API_KEY, DEFAULT_API_SECRET
from storage import PostgresDatabase


async def main(dsn: str, sim_url: str, account: str, member: str, ttl_s: float, recv_window_s: float) -> None:
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=3, idle_in_transaction_timeout_s=ttl_s / 2)
    broker = BinanceBroker(
        api_key=DEFAULT_API_KEY,
        api_secret=DEFAULT_API_SECRET,
        rest_url=sim_url,
        recv_window_ms=int(recv_window_s * 1000),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await broker.sync_time()
        leader = OrderLeader(db, broker, account=account, member_id=member, ttl_s=ttl_s)
        print("ready", flush=True)
        await run_leader(leader, stop, idle_s=ttl_s / 6)
    finally:
        await broker.close()
        await db.close()


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], a[3], float(a[4]), float(a[5])))
