"""Push announcements over NATS JetStream (``bus = "nats"``): a worker's :class:`PushAnnouncer`
and a front's :class:`BusPushListener`, and :func:`connect_bus` which both roles use.

What travels.  A worker's firing transaction queues push frames in PostgreSQL (alerts/pg_store.py);
the fronts must learn that a principal has new frames so that a stream open there gets them.  With
``bus = "local"`` the transaction's ``NOTIFY`` says so (alerts/pg_push.py).  With ``bus = "nats"``
the store calls :meth:`PushAnnouncer.announce` after the commit, and the announcer publishes
``pushed PRINCIPAL FIRST LAST`` (the same text as the ``NOTIFY``) on the principal's subject
``chartgen.notify.<principal>`` of the ``CHARTGEN_NOTIFY`` stream, with a message id made of the
principal and the numbers, so a publish repeated after a lost acknowledgement is stored once.  Every
front's listener hands it to its :class:`~alerts.pg_push.PushRelay`, which reads the frames from
PostgreSQL.  PostgreSQL stays the record: the frames, their order and their delivery marks are
there; NATS only carries "look again", and the database stops fanning out one ``NOTIFY`` per firing
to every front's connection.

NATS away.  The announcer keeps, per principal, the range not yet acknowledged (a few bytes each,
merged as firings go on) and publishes it again every :data:`RETRY_S` until NATS takes it; its
readiness says degraded meanwhile.  A front's listener is a plain subscription (not a JetStream
consumer: nothing to clean up on the server when a front goes away); a front disconnected from NATS
misses announcements, so when the connection comes back (:attr:`cluster.bus.Bus.reconnects` grew)
its relay re-reads every principal with a stream open there.  The relay's periodic sweep (every
15 s, daemon/front/runtime.py) catches what both could still miss — a worker that lost NATS and died
before it came back.  Writes (alerts set, cancelled, fired; notifications polled) go to PostgreSQL
and carry on while NATS is away: nothing a client does needs NATS, so nothing is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping

import structlog
from pydantic import ValidationError

from alerts import pushed_payload
from cluster import SUBJECT_ROOT, Bus, BusError, BusLimits, Subscription, encode_token, notify_subject
from config import Settings

log = structlog.get_logger(__name__)

RETRY_S = 0.5
"""While NATS does not take an announcement, the announcer tries again this often."""
NOTIFY_FILTER = f"{SUBJECT_ROOT}.notify.>"


class BusSettingsError(ValueError):
    """The bus settings cannot work (the message names the setting and the fix)."""


async def connect_bus(settings: Settings, name: str, *, ensure_streams: bool) -> Bus:
    """Connect to ``nats_url`` with ``bus_limits`` applied; create or update the streams if asked.

    :class:`BusSettingsError` for limits that do not validate; :class:`~cluster.bus.BusError` (naming
    ``nats_url``) when NATS cannot be reached within 10 s."""
    if not settings.nats_url:
        raise BusSettingsError('bus = "nats" needs nats_url (e.g. nats://127.0.0.1:4222)')
    try:
        limits = BusLimits.model_validate(settings.bus_limits)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'bus_limits'}: {e['msg']}" for e in exc.errors())
        raise BusSettingsError(f"bus_limits: {problems} (the keys are cluster/bus_streams.py BusLimits)") from exc
    bus = await Bus.connect(settings.nats_url, name=name, limits=limits, connect_timeout_s=10.0)
    if ensure_streams:
        try:
            await bus.ensure_streams()
        except BaseException:
            await bus.close()
            raise
    return bus


class PushAnnouncer:
    """A worker's publisher of push announcements (see the module docstring)."""

    def __init__(self, bus: Bus, *, retry_s: float = RETRY_S) -> None:
        self.bus = bus
        self.retry_s = retry_s
        self.pending: dict[str, tuple[int, int]] = {}
        """Per principal, the frame numbers announced to nobody yet (first, last)."""
        self.published = 0
        self.failing_since: float | None = None
        """Monotonic time of the first failed publish of the current outage (None: NATS takes them)."""
        self._wake = asyncio.Event()

    def announce(self, seqs: Mapping[str, Iterable[int]]) -> None:
        """The store's hook, after a commit: note each principal's new frame numbers; the runner publishes."""
        for principal, numbers in seqs.items():
            ordered = sorted(numbers)
            if not ordered:
                continue
            was = self.pending.get(principal)
            first, last = ordered[0], ordered[-1]
            self.pending[principal] = (first, last) if was is None else (min(was[0], first), max(was[1], last))
        if self.pending:
            self._wake.set()

    async def publish_pending(self) -> int:
        """Publish every pending range once; what NATS acknowledged leaves :attr:`pending`.  Returns
        how many are still pending (raises nothing: a refusal keeps the range for the next try)."""
        for principal, (first, last) in list(self.pending.items()):
            try:
                await self.bus.publish(
                    notify_subject(principal),
                    pushed_payload(principal, first, last).encode(),
                    msg_id=f"pushed-{encode_token(principal)}-{first}-{last}",
                )
            except BusError as exc:
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                    log.warning("push_announce_failed", error=str(exc), pending=len(self.pending))
                return len(self.pending)
            if self.pending.get(principal) == (first, last):  # not widened while the publish was in flight
                del self.pending[principal]
            self.published += 1
        if self.failing_since is not None:
            log.info("push_announce_recovered", after_s=round(time.monotonic() - self.failing_since, 1))
            self.failing_since = None
        return len(self.pending)

    async def run(self) -> None:
        """Background task (supervised): publish whenever something is pending; retry every ``retry_s``."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            if await self.publish_pending():
                await asyncio.sleep(self.retry_s)  # NATS away: back off, then try again
                self._wake.set()

    def readiness(self) -> tuple[bool, list[str]]:
        status = self.bus.status()
        if not status.connected:
            return False, [f"NATS unavailable since {status.since:%H:%M:%S} UTC: {status.reason}"]
        if self.failing_since is not None:
            away = time.monotonic() - self.failing_since
            return False, [f"{len(self.pending)} push announcement(s) not taken by NATS for {away:.0f} s"]
        return True, []

    def status(self) -> dict[str, object]:
        return {
            "bus": "nats",
            "bus_connected": self.bus.status().connected,
            "announcements_pending": len(self.pending),
            "announcements_published": self.published,
        }


class BusPushListener:
    """A front's source of push announcements on ``bus = "nats"``: the same face as the PostgreSQL
    listener it replaces (:class:`storage.postgres.Listener`: ``connected``, ``connects``,
    ``ensure``, ``close``, ``problem``), so the front treats both alike."""

    def __init__(self, bus: Bus, on_payload: Callable[[str], None]) -> None:
        self.bus = bus
        self._on_payload = on_payload
        self._subscription: Subscription | None = None

    @property
    def connected(self) -> bool:
        return self._subscription is not None and self.bus.status().connected

    @property
    def connects(self) -> int:
        """Grows when the subscription is made and on every reconnect (announcements may have been missed)."""
        return 0 if self._subscription is None else 1 + self.bus.reconnects

    @property
    def problem(self) -> str:
        status = self.bus.status()
        return f"NATS unavailable since {status.since:%H:%M:%S} UTC: {status.reason or 'not subscribed yet'}"

    def _deliver(self, _subject: str, data: bytes) -> None:
        self._on_payload(data.decode("utf-8", "replace"))

    async def ensure(self) -> bool:
        if self._subscription is None:
            try:
                self._subscription = await self.bus.subscribe(NOTIFY_FILTER, self._deliver)
            except BusError as exc:
                log.info("push_subscription_down", error=str(exc))
                return False
        return self.connected

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.close()
        await self.bus.close()
