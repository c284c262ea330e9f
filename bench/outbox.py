"""Notification channel benchmarks: outbox throughput to a healthy webhook, and what the sender costs
the firing path.

- 10,000 notifications (already fired, in the outbox) delivered to a healthy local webhook
  receiver (aiohttp on loopback, answers 204): wall time until the last is marked delivered
  (target ≤ 10 s), requests per second.
- Tick → SSE frame at 1,000 ticks/s inside the daemon (bench.alerts_push.bench_tick_to_sse),
  with no channel configured and with a webhook channel receiving every notification
  (``notify_all_channels``): p50/p99 both ways, run alternately (target: unchanged within noise).

Run: ``python -m bench.outbox``.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from alerts import Alert, AlertStore, ChannelRouting, Firing, OutboxSender, OutboxStore
from bench.alerts_push import bench_tick_to_sse
from config import WebhookChannel
from daemon import ALL_MIGRATIONS
from storage import Database
from testkit.channel_receivers import Receiver


async def bench_delivery(n: int = 10_000) -> dict[str, float]:
    receiver = await Receiver("webhook", clock=time.time).start()
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        try:
            await db.migrate(ALL_MIGRATIONS)
            store = AlertStore(db, routing=ChannelRouting(known=frozenset({"hook"}), all_principals=("hook",)))
            now = time.time()
            alerts = [
                Alert(id=f"a{i:06d}", principal="p", symbol="BTCUSDT", interval="1m", kind="price_above",
                      threshold=1.0 + i, created_at=now)
                for i in range(n)
            ]  # fmt: skip
            await store.insert_many(alerts)
            for i in range(0, n, 500):
                await store.fire(
                    [Firing(alert_id=a.id, value=a.threshold or 0, triggered_at=now) for a in alerts[i : i + 500]]
                )
            channel = WebhookChannel(  # loopback receiver; a rate that never coalesces (throughput measured)
                kind="webhook", url=receiver.url, secret="bench-secret", allow_private_address=True,
                max_per_minute=60_000,
            )  # fmt: skip
            sender = OutboxSender(OutboxStore(db), {"hook": channel}, max_age_s=3600.0)
            t0 = time.perf_counter()
            await sender.run(until_empty=True)
            elapsed = time.perf_counter() - t0
            pending = (await sender.status())["hook"]["pending"]
        finally:
            await db.close()
            await receiver.close()
    assert pending == 0 and len(receiver.delivered()) >= n
    return {"notifications": n, "seconds": elapsed, "per_s": n / elapsed}


_RECEIVER = """
import asyncio, sys, time
from testkit.channel_receivers import Receiver
async def main():
    r = await Receiver("webhook", clock=time.time).start()
    print(r.url, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    print(len(r.delivered()), flush=True)
asyncio.run(main())
"""


async def bench_firing_with_sender(rounds: int = 3) -> dict[str, Any]:
    """The webhook receiver runs in a process of its own, so only the daemon's side is measured."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RECEIVER, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdin is not None
    url = (await proc.stdout.readline()).decode().strip()
    channels = {"channels": {"hook": {"kind": "webhook", "url": url, "secret": "bench-secret",
                                      "allow_private_address": True, "max_per_minute": 60_000}},
                "notify_all_channels": ["hook"]}  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    try:
        for _ in range(rounds):
            runs["without"].append(await bench_tick_to_sse(steps=2000))
            runs["with"].append(await bench_tick_to_sse(steps=2000, extra_settings=channels))
    finally:
        proc.stdin.close()
        received = int((await proc.stdout.readline()).decode().strip() or 0)
        await proc.wait()
    return {
        name: {
            "p50_ms": [round(r["tick_to_sse_p50_ms"], 2) for r in rs],
            "p99_ms": [round(r["tick_to_sse_p99_ms"], 2) for r in rs],
            "median_p99_ms": round(statistics.median(r["tick_to_sse_p99_ms"] for r in rs), 2),
        }
        for name, rs in runs.items()
    } | {"webhook_requests": received}


def print_table(delivery: dict[str, float], firing: dict[str, Any]) -> None:
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}")
    print("| bench | target | measured |")
    print("|---|---|---|")
    print(
        f"| {delivery['notifications']:,} notifications to a healthy webhook | ≤ 10 s | "
        f"{delivery['seconds']:.2f} s ({delivery['per_s']:,.0f}/s) |"
    )
    for name in ("without", "with"):
        f = firing[name]
        print(f"| tick → SSE at 1,000/s, {name} a webhook channel, p50 / p99 per run | unchanged | "
              f"{f['p50_ms']} / {f['p99_ms']} ms |")  # fmt: skip


async def run() -> dict[str, Any]:
    delivery = await bench_delivery()
    firing = await bench_firing_with_sender()
    return {"delivery": delivery, "firing": firing}


def main() -> None:
    results = asyncio.run(run())
    print_table(results["delivery"], results["firing"])


if __name__ == "__main__":
    main()
