"""A request signed at a time chosen by the caller: python-binance's AsyncClient with a pinnable
``timestamp``.

Why: the cluster's order leader (cluster/orders.py) may send only while its lease is live, and
the exchange knows nothing of our leases.  What the exchange does enforce is Binance's
``recvWindow`` rule — a signed request whose ``timestamp`` is more than ``recvWindow`` ms older than
the server's time is refused (-1021).  So the leader takes the timestamp at the moment it checks
its lease and signs the order with *that* time: if the process is paused between the check and
the request leaving (GC, SIGSTOP, swapping), the request arrives stale and is refused, instead of
being placed after another leader has taken over.  python-binance stamps every signed request with
the current time inside ``_get_request_kwargs`` just before signing, with no parameter to keep a
given one; :class:`PinnableClient` overrides ``_generate_signature`` (called right after the
stamp, on the same dict) to put the pinned time back before the signature is computed.  It relies
on that private method of python-binance 1.0.x (the version pyproject pins);
tests/cluster/test_order_leader.py checks that a pinned stale request is refused by the
exchange simulator, which applies Binance's rule.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from binance import AsyncClient

_PINNED_MS: ContextVar[int | None] = ContextVar("binance_pinned_timestamp_ms", default=None)


def pinned_timestamp() -> int | None:
    """The timestamp pinned for signed requests of the current task, if any."""
    return _PINNED_MS.get()


@contextlib.contextmanager
def signed_at(timestamp_ms: int) -> Iterator[None]:
    """Signed requests made by the current task inside this block carry ``timestamp_ms``."""
    token = _PINNED_MS.set(timestamp_ms)
    try:
        yield
    finally:
        _PINNED_MS.reset(token)


class PinnableClient(AsyncClient):  # type: ignore[misc]  # python-binance ships no types: AsyncClient is Any
    """AsyncClient whose signed requests use the pinned timestamp when one is set (:func:`signed_at`)."""

    def _generate_signature(self, data: dict[str, Any], uri_encode: bool = True) -> str:
        pinned = _PINNED_MS.get()
        if pinned is not None and "timestamp" in data:
            data["timestamp"] = pinned
        return str(super()._generate_signature(data, uri_encode))
