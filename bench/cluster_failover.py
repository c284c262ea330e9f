"""Order-leader failover: how long after the leader is killed orders are sent again, and that none
is doubled.

    python -m bench.cluster_failover [--rounds 5] [--ttl 6] [--rate 20]

Debian's PostgreSQL on loopback (testkit/postgres.py, fsync on) and the exchange simulator
on the real clock (in this process) as the exchange.  Two order-leader processes
(tests/cluster/order_leader_proc.py: a BinanceBroker to the simulator, recvWindow 5 s, and
:func:`cluster.orders.run_leader` with the lease TTL given) stand as candidates; this process
submits a MARKET order intent every ``1/rate`` s and waits for the answers.  Each round it
SIGKILLs whichever process leads, in the middle of the stream, then measures:

- **takeover**: from the kill until the other candidate holds the lease (server-side row);
- **orders again**: from the kill until the first intent submitted *after* the kill is answered
  by the exchange (what a client of ``place_order`` sees);
- the outcome of every intent: placed ⇔ on the exchange exactly once, rejected ⇔ not on it.

The killed process is restarted as the new standby before the next round.  The machine is
printed; the leader processes, PostgreSQL, the simulator and this process share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.agent_common import print_machine
from bench.sim_limits import lift_order_limits
from brokers import OrderRequest
from cluster import ORDER_PATH_MIGRATIONS, OrderIntents, lease_name
from storage import PostgresDatabase

ROOT = Path(__file__).resolve().parents[1]
ACCOUNT = "sim"
RECV_WINDOW_S = 5.0


def _req() -> OrderRequest:
    return OrderRequest(
        symbol="BTCUSDT",
        side="BUY",
        type="MARKET",
        client_order_id=f"b-{uuid.uuid4().hex[:16]}",
        quantity=Decimal("0.0001"),
    )


async def _candidate(dsn: str, sim_url: str, member: str, ttl_s: float) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.cluster.order_leader_proc",
        dsn,
        sim_url,
        ACCOUNT,
        member,
        str(ttl_s),
        str(RECV_WINDOW_S),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    await asyncio.wait_for(proc.stdout.readline(), 60)
    return proc


async def _holder(db: PostgresDatabase) -> str | None:
    value = await db.fetchval(
        "SELECT holder FROM cluster_leases WHERE name = $1 AND expires_at > clock_timestamp()", lease_name(ACCOUNT)
    )
    return None if value is None else str(value)


async def run(rounds: int, ttl_s: float, rate: float) -> list[dict[str, Any]]:
    from simulator import start_simulator
    from testkit.postgres import postgres_server

    results: list[dict[str, Any]] = []
    with postgres_server() as server:
        sim = await start_simulator(host="127.0.0.1", port=0, clock="real")
        await lift_order_limits(sim.url)  # 20 orders/s: past Binance's ORDERS limit (bench/sim_limits.py)
        dsn = await server.new_database()
        db = await PostgresDatabase.open(dsn)
        await db.migrate(ORDER_PATH_MIGRATIONS)
        intents = OrderIntents(db)
        procs: dict[str, asyncio.subprocess.Process] = {}
        answers: list[asyncio.Task[Any]] = []
        try:
            for i, name in enumerate(("a", "b")):
                procs[name] = await _candidate(dsn, sim.url, f"{name}{i}", ttl_s)
            for r in range(rounds):
                while True:  # first round: wait for a candidate to lead
                    leader = await _holder(db)
                    if leader is not None:
                        break
                    await asyncio.sleep(0.05)
                name = leader[0]
                stop_at = time.monotonic() + 3.0  # stream for 3 s, then kill mid-stream
                while time.monotonic() < stop_at:
                    req = _req()
                    await intents.submit(ACCOUNT, req)
                    answers.append(asyncio.create_task(intents.wait_answer(req.client_order_id, 120)))
                    await asyncio.sleep(1 / rate)  # the request rate of the stream
                os.kill(procs[name].pid, signal.SIGKILL)
                killed = time.monotonic()
                await procs[name].wait()
                after: list[asyncio.Task[Any]] = []
                takeover = None
                first_answer = None
                while first_answer is None:
                    req = _req()
                    await intents.submit(ACCOUNT, req)
                    task = asyncio.create_task(intents.wait_answer(req.client_order_id, 120))
                    after.append(task)
                    if takeover is None and (h := await _holder(db)) is not None and h != leader:
                        takeover = time.monotonic() - killed
                    done = [t for t in after if t.done()]
                    if done:
                        first_answer = time.monotonic() - killed
                    await asyncio.sleep(1 / rate)
                answers.extend(after)
                if takeover is None:
                    takeover = first_answer
                procs[name] = await _candidate(dsn, sim.url, f"{name}{r + 2}", ttl_s)  # the new standby
                results.append({"round": r + 1, "takeover_s": takeover, "orders_again_s": first_answer})
                print(
                    f"round {r + 1}: takeover {takeover:.2f} s, orders answered again {first_answer:.2f} s after kill"
                )
            got = await asyncio.gather(*answers)
            on_exchange = Counter(o.client_order_id for o in sim.exchange.account.orders.values())
            placed = sum(1 for a in got if a is not None and a.state == "placed")
            rejected = sum(1 for a in got if a is not None and a.state == "rejected")
            unanswered = sum(1 for a in got if a is None)
            consistent = all(
                a is not None and (on_exchange[a.client_order_id] == (1 if a.state == "placed" else 0)) for a in got
            )
            doubled = sum(1 for n in on_exchange.values() if n > 1)
            print(
                f"{len(got)} intents: {placed} placed, {rejected} rejected, {unanswered} unanswered;"
                f" doubled on the exchange: {doubled}; placed ⇔ on the exchange once: {consistent}"
            )
            takeovers = [r["takeover_s"] for r in results]
            again = [r["orders_again_s"] for r in results]
            print(
                f"takeover p50 {statistics.median(takeovers):.2f} s max {max(takeovers):.2f} s;"
                f" orders again p50 {statistics.median(again):.2f} s max {max(again):.2f} s (lease TTL {ttl_s} s)"
            )
        finally:
            for proc in procs.values():
                if proc.returncode is None:
                    proc.terminate()
                    await proc.wait()
            await intents.close()
            await db.close()
            await sim.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ttl", type=float, default=6.0)
    parser.add_argument("--rate", type=float, default=20.0)
    args = parser.parse_args()
    print_machine()
    asyncio.run(run(args.rounds, args.ttl, args.rate))


if __name__ == "__main__":
    main()
