"""Orders through a cluster: ``place_order`` at ``chartgen --serve --cluster`` fronts, sent by
``chartgen leader`` processes, with the leading one SIGKILLed in the middle of bursts.

    python -m bench.cluster_orders [--rounds 5] [--orders 100] [--kill-after 30] [--fronts 2]
                                   [--leaders 2] [--concurrency 10]

Debian's PostgreSQL on loopback (testkit/postgres.py, fsync on), the exchange simulator on
the real clock (in this process; it refuses signed requests older than their recvWindow, 5 s),
``--fronts`` front processes and ``--leaders`` leader processes (lease TTL 6 s: the defaults).
Every order is a MARKET buy of about 10 USDT of BTCUSDT with our client order id, sent as a
session-less ``tools/call`` to the fronts in turn, ``--concurrency`` at a time.

- **calm**: ``--orders`` orders with no kill: calls per second and the latency of a call (p50,
  p99) — front, intent in PostgreSQL, the leader's admission (exchange rules, the venue's ticker,
  the halt switch and the daily limit in a fenced transaction), the exchange, the answer.
- **each round**: a burst of ``--orders``; after ``--kill-after`` answers the leading process is
  SIGKILLed (and restarted afterwards as a standby). Measured: **takeover** — from the kill until
  the new holder acquired the lease (both on PostgreSQL's clock); **orders again** — from the kill
  until the first order *sent after the kill* was answered Filled; the answers: placed, refused
  with an error, Pending.
- **exactly once**: every placed answer's client order id is on the exchange once, every error's
  not at all, no id twice; the BTC the answers say was bought (less the 0.1 % fee) equals the
  change of the exchange account's BTC balance.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import time
import uuid
from collections import Counter
from decimal import ROUND_UP, Decimal
from typing import Any

import aiohttp

from bench.agent_common import print_machine
from bench.cluster_workers import _percentile
from bench.sim_limits import lift_order_limits

SYMBOL = "BTCUSDT"
DEADLINE_S = 120.0


async def _place(http: aiohttp.ClientSession, url: str, token: str, cid: str, qty: Decimal) -> tuple[bool, str]:
    """(is the answer an error, its text)."""
    args = {"symbol": SYMBOL, "side": "buy", "type": "market", "quantity": float(qty), "client_order_id": cid}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "place_order", "arguments": args}}
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
        r.raise_for_status()
        result = (await r.json())["result"]
    return bool(result.get("isError")), str(result["content"][0]["text"])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from cluster import lease_name
    from daemon import CLUSTER_MIGRATIONS
    from mcp_bridge import ALL_SCOPES, PgTokenStore
    from simulator import FEE, start_simulator
    from storage import PostgresDatabase
    from testkit.daemon_proc import DaemonProc, start_fronts
    from testkit.leaders import leader_env, lease_holder, other_holder, start_leader, stop_leaders
    from testkit.postgres import postgres_server
    from testkit.secret_scan import daemon_log_file
    from testkit.workers import pid_of, until

    lease = lease_name("main")
    budget = Decimal(20) * args.orders * (args.rounds + 1) + 1000
    with postgres_server() as server:
        sim = await start_simulator(
            host="127.0.0.1", port=0, clock="real", symbols=[SYMBOL], balances={"USDT": budget, "BTC": Decimal(0)}
        )
        await lift_order_limits(sim.url)  # ~50 orders/s: past Binance's ORDERS limit (bench/sim_limits.py)
        dsn = await server.new_database()
        db = await PostgresDatabase.open(dsn)
        await db.migrate(CLUSTER_MIGRATIONS)
        token = (await PgTokenStore(db).create("bench", principal="bench", scopes=ALL_SCOPES))[0]
        env = leader_env(dsn, sim.url, CHARTGEN_TRADING_MAX_DAILY_NOTIONAL=str(budget * 2))
        log = daemon_log_file()
        leaders = [await start_leader(env, log=log) for _ in range(args.leaders)]
        fronts: list[DaemonProc] = []
        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=None))

        async def holder() -> str | None:
            return await lease_holder(db)

        async def server_now() -> float:
            return float(await db.fetchval("SELECT extract(epoch FROM clock_timestamp())"))

        price = Decimal(str(dict(sim.exchange.start_prices())[SYMBOL]))
        qty = (Decimal(10) / price).quantize(Decimal("0.00001"), rounding=ROUND_UP)
        btc0 = sim.exchange.account.free.get("BTC", Decimal(0))
        answers: list[tuple[str, bool, str]] = []
        row: dict[str, Any] = {"fronts": args.fronts, "leaders": args.leaders, "orders": args.orders}
        try:
            await start_fronts(fronts, args.fronts, env)
            await until(holder, DEADLINE_S, 0.1)

            async def burst(tag: str, on_answer: Any = None) -> list[tuple[str, bool, str, float, float]]:
                gate = asyncio.Semaphore(args.concurrency)
                got: list[tuple[str, bool, str, float, float]] = []

                async def one(i: int) -> None:
                    cid = f"{tag}-{i:04d}-{uuid.uuid4().hex[:6]}"
                    async with gate:
                        sent = time.monotonic()
                        err, text = await _place(http, fronts[i % len(fronts)].mcp_url, token, cid, qty)
                        got.append((cid, err, text, sent, time.monotonic()))
                        answers.append((cid, err, text))
                        if on_answer is not None:
                            await on_answer(len(got))

                await asyncio.gather(*(one(i) for i in range(args.orders)))
                return got

            started = time.monotonic()
            calm = await burst("calm")
            took = time.monotonic() - started
            lat = sorted((done - sent) * 1000 for _, _, _, sent, done in calm)
            row["calm"] = {
                "calls_per_s": round(len(calm) / took, 1),
                "p50_ms": round(_percentile(lat, 0.5), 1),
                "p99_ms": round(_percentile(lat, 0.99), 1),
                "errors": sum(1 for _, err, *_ in calm if err),
            }
            print(json.dumps({"calm": row["calm"]}), flush=True)

            rounds: list[dict[str, Any]] = []
            for n in range(args.rounds):
                first = await until(holder, DEADLINE_S, 0.1)
                killed: dict[str, float] = {}

                async def kill_at(count: int, first: str = first, killed: dict[str, float] = killed) -> None:
                    if count == args.kill_after and not killed:
                        os.killpg(pid_of(first), signal.SIGKILL)
                        killed["server"], killed["mono"] = await server_now(), time.monotonic()

                got = await burst(f"r{n}", kill_at)
                again = min(
                    (done - killed["mono"] for _, err, text, sent, done in got
                     if sent > killed["mono"] and not err and '"Filled"' in text),
                    default=float("nan"),
                )  # fmt: skip
                second = await until(lambda first=first: other_holder(db, first), DEADLINE_S, 0.1)
                acquired = float(
                    await db.fetchval(
                        "SELECT extract(epoch FROM acquired_at) FROM cluster_leases WHERE name = $1", lease
                    )
                )
                outcome = {
                    "takeover_s": round(acquired - killed["server"], 2),
                    "orders_again_s": round(again, 2),
                    "placed": sum(1 for _, err, text, *_ in got if not err and '"Filled"' in text),
                    "errors": sum(1 for _, err, *_ in got if err),
                    "pending": sum(1 for _, err, text, *_ in got if not err and '"Pending"' in text),
                    "new_leader": second != first,
                }
                rounds.append(outcome)
                print(json.dumps({"round": n + 1, **outcome}), flush=True)
                for i, proc in enumerate(leaders):  # the killed one comes back as a standby
                    if proc.pid == pid_of(first):
                        await asyncio.wait_for(proc.wait(), 30)
                        leaders[i] = await start_leader(env, log=log)
            row["rounds"] = rounds
            takeovers = [r["takeover_s"] for r in rounds]
            agains = [r["orders_again_s"] for r in rounds]
            row["takeover_s"] = {"p50": statistics.median(takeovers), "max": max(takeovers)}
            row["orders_again_s"] = {"p50": statistics.median(agains), "max": max(agains)}

            on_exchange = Counter(o.client_order_id for o in sim.exchange.account.orders.values())
            bought = Decimal(0)
            problems = Counter[str]()
            for cid, err, text in answers:
                if err:
                    problems["error but on the exchange"] += on_exchange[cid] != 0
                    continue
                body = json.loads(text)
                if body["status"] == "Pending":
                    continue
                problems["placed but not on the exchange once"] += on_exchange[cid] != 1
                bought += Decimal(str(body["filled_quantity"]))
            problems["sent twice"] = sum(1 for v in on_exchange.values() if v > 1)
            balance = sim.exchange.account.free["BTC"] - btc0
            row["exactly_once"] = {
                "answers": len(answers),
                **{k: int(v) for k, v in problems.items()},
                "balance_equals_answers": balance == bought - bought * FEE,
            }
            print(json.dumps({"summary": row}), flush=True)
            return row
        finally:
            for front in fronts:
                await front.stop()
            await stop_leaders(leaders)
            log.close()
            await http.close()
            await db.close()
            await sim.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--orders", type=int, default=100)
    parser.add_argument("--kill-after", type=int, default=30)
    parser.add_argument("--fronts", type=int, default=2)
    parser.add_argument("--leaders", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    print_machine()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
