"""A revoked and a suspended principal whose schedules and action alerts keep coming due: no order of
theirs reaches the exchange simulator, while a third principal keeps trading — through a revocation
and a suspension made at the same moment from other processes while the schedules run every second,
and through a restart of the daemon (a new simulator: any order of theirs on it is a failure), where
the schedules' catch-up run is refused too, and the suspended principal cannot set a new action alert."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from alerts import action_client_id
from brokers import SUSPENDED_MESSAGE
from testkit.daemon_proc import create_token, mcp_client, running_daemon
from tests.brokers.test_principal_stop_daemon import (
    ARGS,
    BUY,
    ENV,
    TRADER,
    _read,
    call,
    cli,
    exchange_ids,
    fired,
    log_until,
    ok,
    price,
)

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(400)]


def above(level: float) -> dict[str, object]:
    return {"symbol": "BTCUSDT", "condition": {"price_above": level}, "action": {"place_order": BUY}}


def theirs(ids: set[str], schedules: list[str], alerts: list[str]) -> set[str]:
    """The client ids in ``ids`` that belong to the stopped principals' schedules or alert actions."""
    actions = {action_client_id(a) for a in alerts}
    return {cid for cid in ids if cid in actions or any(cid.startswith(f"cg-{s}-") for s in schedules)}


async def test_no_order_of_a_revoked_or_suspended_principal_reaches_the_exchange(tmp_path: Path) -> None:
    log = tmp_path / "trades.log"
    async with running_daemon(ARGS, data_dir=tmp_path, env=ENV) as daemon, aiohttp.ClientSession() as http:
        await price(http, daemon, 65000)
        bot_token = await create_token(tmp_path, "bot", TRADER)
        sus_token = await create_token(tmp_path, "sus", TRADER)
        other_token = await create_token(tmp_path, "other", TRADER)
        async with (
            mcp_client(daemon.mcp_url, bot_token) as bot,
            mcp_client(daemon.mcp_url, sus_token) as sus,
            mcp_client(daemon.mcp_url, other_token) as other,
        ):
            sids = {name: (await ok(c, "schedule_order", {**BUY, "every": "1s"}))["schedule_id"]
                    for name, c in (("bot", bot), ("sus", sus), ("other", other))}  # fmt: skip
            alerts = {name: (await ok(c, "set_alert", above(65100)))["alert_id"]
                      for name, c in (("bot", bot), ("sus", sus), ("other", other))}  # fmt: skip
            for name in ("bot", "sus"):
                await log_until(log, f"SCHEDULE-RUN id={sids[name]}")  # both were trading

            # revoke one and suspend the other at the same moment, while every schedule runs each second
            (rc1, out1, err1), (rc2, out2, err2) = await asyncio.gather(
                cli(tmp_path, "token", "revoke", "bot"), cli(tmp_path, "trading", "suspend", "sus")
            )
            assert rc1 == 0 and "1 schedule(s) cancelled" in out1, out1 + err1
            assert rc2 == 0 and "suspended trading of" in out2, out2 + err2
            runs = _read(log).count(f"SCHEDULE-RUN id={sids['other']}")
            await log_until(log, f"SCHEDULE-RUN id={sids['other']}", runs + 2)  # sends admitted before settle
            settled = await exchange_ids(http, daemon)

            await price(http, daemon, 65200)
            await log_until(log, f"ALERT_ACTION id={alerts['other']}")
            text = await log_until(log, f"ALERT_ACTION_REFUSED id={alerts['sus']}")
            assert SUSPENDED_MESSAGE in text.split(f"ALERT_ACTION_REFUSED id={alerts['sus']}", 1)[1].splitlines()[0]
            await fired(tmp_path, alerts["bot"])
            await log_until(log, f"SCHEDULE-REFUSED id={sids['sus']}")
            runs = _read(log).count(f"SCHEDULE-RUN id={sids['other']}")
            await log_until(log, f"SCHEDULE-RUN id={sids['other']}", runs + 3)
            after = await exchange_ids(http, daemon)
            stopped = [sids["bot"], sids["sus"]]
            assert theirs(after - settled, stopped, [alerts["bot"], alerts["sus"]]) == set()
            assert action_client_id(alerts["other"]) in after  # the third principal kept trading

    # a restart: a new simulator; the schedules' catch-up and a new action alert come due again
    async with running_daemon(ARGS, data_dir=tmp_path, env=ENV) as daemon, aiohttp.ClientSession() as http:
        await price(http, daemon, 65000)
        async with mcp_client(daemon.mcp_url, sus_token) as sus, mcp_client(daemon.mcp_url, other_token) as other:
            failed, answer = await call(sus, "set_alert", above(65100))  # no new action alert for it
            assert failed and SUSPENDED_MESSAGE in str(answer), answer
            other_alert = (await ok(other, "set_alert", above(65100)))["alert_id"]
            runs = _read(log).count(f"SCHEDULE-RUN id={sids['other']}")
            refused = _read(log).count(f"SCHEDULE-REFUSED id={sids['sus']}")
            await price(http, daemon, 65200)
            await log_until(log, f"ALERT_ACTION id={other_alert}")
            await log_until(log, f"SCHEDULE-REFUSED id={sids['sus']}", refused + 2)
            await log_until(log, f"SCHEDULE-RUN id={sids['other']}", runs + 2)
            everything = await exchange_ids(http, daemon)
            assert theirs(everything, stopped, [alerts["bot"], alerts["sus"]]) == set()
            assert action_client_id(other_alert) in everything
            await ok(other, "cancel_schedule", {"schedule_id": sids["other"]})
            await ok(sus, "cancel_schedule", {"schedule_id": sids["sus"]})
