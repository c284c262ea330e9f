"""A lease holder in its own process (tests/cluster/test_lease.py): acquires, says so, waits for a
line on stdin, then reports whether it may still act and whether the fence still passes.  With
``open`` as a fifth argument it waits *inside* its fenced transaction (a holder stalled mid-write)."""

from __future__ import annotations

import asyncio
import sys

import asyncpg
import orjson

from cluster.lease import LeaseLost, Leases
from storage import PostgresDatabase


async def main(dsn: str, name: str, holder: str, ttl_s: float, stall_inside: bool) -> None:
    db = await PostgresDatabase.open(dsn, min_size=1, max_size=1, idle_in_transaction_timeout_s=ttl_s / 2)
    try:
        lease = await Leases(db).acquire(name, holder, ttl_s)
        assert lease is not None
        if not stall_inside:
            print(orjson.dumps({"token": lease.token}).decode(), flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        report: dict[str, object] = {"may_act": lease.may_act()}
        try:
            async with db.transaction() as conn:
                await lease.fence(conn)
                await conn.execute("CREATE TABLE IF NOT EXISTS sent (token BIGINT)")
                await conn.execute("INSERT INTO sent VALUES ($1)", lease.token)
                if stall_inside:
                    print(orjson.dumps({"token": lease.token}).decode(), flush=True)
                    await asyncio.to_thread(sys.stdin.readline)
            report["fenced_write"] = "committed"
        except LeaseLost as exc:
            report["fenced_write"] = f"refused: {exc}"
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            report["fenced_write"] = f"failed: {type(exc).__name__}"
        print(orjson.dumps(report).decode(), flush=True)
    finally:
        await db.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5:] == ["open"]))
