"""Push announcements over a real nats-server (daemon/parts/push_bus.py): the worker's announcer publishes
each principal's new frame numbers after a commit, a front's listener hands them to its relay; with
NATS stopped the announcer keeps them, says why it is not ready and publishes them once NATS is
back, and the listener's connection count grows so the front's relay re-reads.  Settings that
cannot work are refused naming the setting."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.bus import Bus
from cluster.bus_streams import NOTIFY_STREAM, BusLimits
from config import load_settings
from daemon import BusPushListener, BusSettingsError, PushAnnouncer, connect_bus
from storage import PostgresDatabase
from testkit.daemon_proc import clean_env
from testkit.nats import SMALL_BUS_LIMITS, NatsServer, nats_server_binary
from testkit.nginx import free_port
from testkit.workers import until

pytestmark = [pytest.mark.servers, pytest.mark.process]

DEPLOY_NATS_CONF = Path(__file__).resolve().parents[2] / "deploy" / "cluster" / "nats-server.conf"


async def _bus(server: NatsServer, name: str) -> Bus:
    settings = load_settings({"bus": "nats", "nats_url": server.url, "bus_limits": SMALL_BUS_LIMITS})
    bus = await connect_bus(settings, name, ensure_streams=True)
    assert bus.limits == BusLimits(**SMALL_BUS_LIMITS)
    return bus


async def test_announcements_reach_the_fronts_listener_and_survive_a_nats_outage(nats_server: NatsServer) -> None:
    worker_bus = await _bus(nats_server, "worker")
    front_bus = await _bus(nats_server, "front")
    heard: list[str] = []
    listener = BusPushListener(front_bus, heard.append)
    announcer = PushAnnouncer(worker_bus, retry_s=0.1)
    runner = asyncio.create_task(announcer.run())
    try:
        assert not listener.connected and listener.connects == 0
        assert await listener.ensure() and listener.connects == 1
        odd = "bob.*> x"  # a principal is data: dots, wildcards and spaces travel as one subject token
        announcer.announce({"alice": [3, 1, 2], odd: [7], "nobody": []})
        await until(lambda: _heard(heard, 2), 10, explain=lambda: _state(announcer, listener, heard))
        assert sorted(heard) == ["pushed alice 1 3", f"pushed {odd} 7 7"]
        assert announcer.pending == {} and announcer.published == 2
        assert await worker_bus.stream_messages(NOTIFY_STREAM) == 2
        assert announcer.readiness() == (True, [])

        await nats_server.stop()
        announcer.announce({"alice": [4]})
        announcer.announce({"alice": [6, 5]})  # ranges merge while NATS is away
        await until(lambda: _async(announcer.failing_since is not None), 10)
        ready, reasons = announcer.readiness()
        assert not ready and "NATS" in reasons[0]
        assert announcer.pending == {"alice": (4, 6)}
        await until(lambda: _async(not listener.connected), 10)
        assert "NATS unavailable" in listener.problem

        await nats_server.start()
        await until(lambda: _async(not announcer.pending), 20)  # published again by itself
        await until(lambda: _async(listener.connected), 20)
        assert listener.connects == 2  # the front's relay re-reads after this
        assert announcer.readiness() == (True, []) and announcer.failing_since is None
        # the front may have resubscribed after the announcer's publish: PostgreSQL's frames are the record,
        # the relay's re-read on the reconnect covers that; what did arrive is the merged range
        assert set(heard) <= {"pushed alice 1 3", f"pushed {odd} 7 7", "pushed alice 4 6"}
        announcer.announce({"carol": [9]})
        await until(lambda: _async("pushed carol 9 9" in heard), 10)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await listener.close()
        await worker_bus.close()


async def test_a_range_widened_during_its_publish_stays_pending(nats_server: NatsServer) -> None:
    bus = await _bus(nats_server, "worker")
    announcer = PushAnnouncer(bus)
    real_publish = bus.publish

    async def publish_while_firing(*args: object, **kwargs: object) -> object:
        announcer.announce({"alice": [9]})  # a firing committed while this publish was in flight
        return await real_publish(*args, **kwargs)  # type: ignore[arg-type]

    try:
        announcer.announce({"alice": [1]})
        bus.publish = publish_while_firing  # type: ignore[method-assign]
        assert await announcer.publish_pending() == 1
        assert announcer.pending == {"alice": (1, 9)}
        bus.publish = real_publish  # type: ignore[method-assign]
        assert await announcer.publish_pending() == 0
    finally:
        await bus.close()


async def test_bus_settings_that_cannot_work_are_refused_by_name(nats_server: NatsServer) -> None:
    with pytest.raises(ValidationError, match="nats_url"):
        load_settings({"bus": "nats"})
    with pytest.raises(ValidationError, match="bus"):
        load_settings({"bus": "kafka"})
    settings = load_settings({"bus": "nats", "nats_url": nats_server.url, "bus_limits": {"notify_max_bytes": 10}})
    with pytest.raises(BusSettingsError, match=r"bus_limits: notify_max_bytes"):
        await connect_bus(settings, "front", ensure_streams=False)
    settings = load_settings({"bus": "nats", "nats_url": nats_server.url, "bus_limits": {"nonsense": 1}})
    with pytest.raises(BusSettingsError, match=r"bus_limits: nonsense"):
        await connect_bus(settings, "front", ensure_streams=False)


def _state(announcer: PushAnnouncer, listener: BusPushListener, heard: list[str]) -> str:
    return (
        f"heard={heard} published={announcer.published} pending={announcer.pending} "
        f"failing_since={announcer.failing_since} worker={announcer.bus.status()} "
        f"listener connected={listener.connected} connects={listener.connects}"
    )


async def _heard(heard: list[str], n: int) -> bool:
    return len(heard) >= n


async def _async(value: bool) -> bool:
    return value


async def test_the_deploy_example_nats_config_is_valid() -> None:
    proc = await asyncio.create_subprocess_exec(
        str(nats_server_binary()),
        "-c",
        str(DEPLOY_NATS_CONF),
        "-t",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0 and b"is valid" in out, out.decode()


async def test_roles_that_cannot_reach_nats_at_start_exit_naming_the_setting(
    cluster: tuple[str, PostgresDatabase],
) -> None:
    """A worker and a front with bus = "nats" and nobody at nats_url: exit 1 within the connect timeout."""
    dsn, _ = cluster
    env = clean_env(
        {"CHARTGEN_POSTGRES_DSN": dsn, "CHARTGEN_BUS": "nats", "CHARTGEN_NATS_URL": f"nats://127.0.0.1:{free_port()}"}
    )

    async def run(*args: str) -> tuple[int | None, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "daemon",
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            _, err = await proc.communicate()
        return proc.returncode, err.decode()

    for code, err in await asyncio.gather(run("worker"), run("--serve", "--cluster", "--port", "0")):
        assert code == 1 and "could not connect to NATS at nats_url=" in err, err
