"""A channel flooded by one principal: how long the operator's own alerts wait (issue 36).

One principal fires 2,000 alerts with 500-character notes, 200 a second, into a webhook channel
at its default rate (60 messages a minute: a burst of ten, then one a second); every 2 s during
the flood the operator fires one alert into the same channel.  Measured on the real clock with a
local receiver (aiohttp on loopback, answers 204): each operator alert's firing commit → the
receiver's arrival (p50 / max, target ≤ one rate interval, 1 s), the messages the flood took
(digests) and when its last notification arrived.  Before the per-principal queues the operator's
alert waited behind the whole backlog (one message per notification at 60 a minute: 2,000
notifications ≈ 33 minutes).

Run: ``python -m bench.channel_flood``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from alerts import Alert, AlertStore, ChannelRouting, Firing, OutboxSender, OutboxStore, RateBucket
from config import WebhookChannel
from daemon import ALL_MIGRATIONS
from storage import Database
from testkit.channel_receivers import Receiver

FLOOD = 2_000
BATCH = 50
PACE_S = 0.25
OPERATOR_EVERY_S = 2.0


def _alert(principal: str, note: str | None = None) -> Alert:
    return Alert(
        id=f"{principal}-{uuid.uuid4().hex[:12]}",
        principal=principal,
        symbol="BTCUSDT",
        interval="1m",
        kind="price_above",
        threshold=70_000.0,
        created_at=time.time(),
        note=note,
    )


async def _fire(store: AlertStore, alerts: list[Alert]) -> None:
    await store.insert_many(alerts)
    await store.fire([Firing(alert_id=a.id, value=70_001.0, triggered_at=time.time()) for a in alerts])


async def bench_flood() -> dict[str, Any]:
    receiver = await Receiver("webhook", clock=time.time).start()
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "bench.db")
        try:
            await db.migrate(ALL_MIGRATIONS)
            store = AlertStore(db, routing=ChannelRouting(known=frozenset({"ops"}), all_principals=("ops",)))
            channel = WebhookChannel(kind="webhook", url=receiver.url, secret="s", allow_private_address=True)
            sender = OutboxSender(OutboxStore(db), {"ops": channel}, max_age_s=3600.0)
            store.on_enqueued = sender.wake
            task = asyncio.create_task(sender.run())
            mine: dict[str, float] = {}
            t0 = time.time()
            next_operator = t0 + OPERATOR_EVERY_S
            fired = 0
            while fired < FLOOD:
                await _fire(store, [_alert("tok_flood", "n" * 500) for _ in range(BATCH)])
                fired += BATCH
                if time.time() >= next_operator:
                    a = _alert("operator")
                    await _fire(store, [a])
                    mine[a.id] = time.time()
                    next_operator += OPERATOR_EVERY_S
                await asyncio.sleep(PACE_S)
            flood_fired_s = time.time() - t0
            deadline = time.monotonic() + 300
            while len(receiver.delivered_ids()) < FLOOD + len(mine) and time.monotonic() < deadline:
                receiver.arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(receiver.arrived.wait(), 1.0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await db.close()
            await receiver.close()
    arrivals = {i: r.at for r in receiver.delivered() for i in receiver.covered(r)}
    waits = [arrivals[i] - at for i, at in mine.items() if i in arrivals]
    sent = receiver.delivered()
    return {
        "flood": FLOOD,
        "flood_fired_s": round(flood_fired_s, 1),
        "operator_alerts": len(mine),
        "operator_arrived": len(waits),
        "operator_wait_p50_s": round(statistics.median(waits), 3) if waits else None,
        "operator_wait_max_s": round(max(waits), 3) if waits else None,
        "interval_s": RateBucket(channel.rate_per_minute).interval_s,
        "messages": len(sent),
        "digests": sum(len(receiver.covered(r)) > 1 for r in sent),
        "all_delivered_s": round(sent[-1].at - t0, 1) if sent else None,
        "delivered_once": len(receiver.delivered_ids()) == len(set(receiver.delivered_ids())) == FLOOD + len(mine),
    }


def main() -> None:
    result = asyncio.run(bench_flood())
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}")
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
