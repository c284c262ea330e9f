"""systemd's notify protocol, spoken directly (no extra package): READY, STATUS, WATCHDOG, STOPPING.

Messages go as datagrams to the socket in ``$NOTIFY_SOCKET`` (an abstract socket when the
path starts with ``@``).  Outside systemd the variable is absent and every call is a no-op.
:func:`watchdog_interval_s` reads ``$WATCHDOG_USEC`` (set by ``WatchdogSec=``); the daemon
pings at half that interval from a task that only runs while the event loop is responsive,
so a hung loop gets the service restarted.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class Notifier:
    """A connection to systemd's notify socket (or nothing, outside systemd)."""

    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self._sock: socket.socket | None = None
        self._address: str | bytes | None = None
        if address:
            self._address = "\0" + address[1:] if address.startswith("@") else address
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, *fields: str) -> bool:
        if self._sock is None or self._address is None:
            return False
        try:
            self._sock.sendto("\n".join(fields).encode(), self._address)
            return True
        except OSError as exc:
            log.warning("sd_notify_failed", error=str(exc))
            return False

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={status}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def watchdog_interval_s() -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds (when systemd's watchdog is on for this process)."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    return int(usec) / 2_000_000


async def keep_alive(notifier: Notifier, status: Callable[[], str], interval_s: float) -> None:
    """Ping the watchdog and refresh STATUS= every ``interval_s`` (runs only while the loop is healthy)."""
    last = ""
    while True:
        notifier.watchdog()
        text = status()
        if text != last:
            notifier.status(text)
            last = text
        await asyncio.sleep(interval_s)  # a heartbeat schedule, not synchronisation
