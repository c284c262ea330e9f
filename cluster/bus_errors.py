"""The event bus's errors: what NATS failures and a bad ``nats_url`` setting tell the caller and the operator.

Every nats-py exception is turned into :class:`BusError` (configuration, refusals) or
:class:`BusUnavailable` (NATS cannot be reached or did not answer in time) by :func:`translated`
before it leaves a public method of :class:`cluster.bus.Bus` and its consumers.  The
``nats_url`` setting is checked by :func:`nats_servers` (a :class:`BusError` naming the setting
and the expected form), and :func:`redacted_url` keeps credentials out of every message and log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlsplit

import nats.errors
import nats.js.errors

URL_SETTING = "nats_url"
"""The setting that names the NATS server(s); error messages name it so an operator knows what to fix."""


class BusError(RuntimeError):
    """NATS is misconfigured, refused an operation, or the bus was used wrongly."""


class BusUnavailable(BusError):
    """NATS cannot be reached (or did not answer in time): the operation did not happen, or was not confirmed."""


_UNREACHABLE: tuple[type[BaseException], ...] = (
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.errors.NoServersError,
    nats.errors.UnexpectedEOF,
    OSError,
)


@contextlib.contextmanager
def translated(doing: str, timeout_s: float) -> Iterator[None]:
    """Re-raise nats-py's exceptions (and socket errors) raised while ``doing`` as BusError / BusUnavailable."""
    try:
        yield
    except BusError:
        raise
    except TimeoutError as exc:  # nats.errors.TimeoutError and nats.js.errors.FetchTimeoutError derive from it
        raise BusUnavailable(f"NATS did not answer {doing} within {timeout_s:g} s") from exc
    except nats.js.errors.ServiceUnavailableError as exc:  # also what a server without JetStream answers
        raise BusUnavailable(
            f"JetStream is not available ({doing}): is it enabled on the NATS server (nats-server -js)?"
        ) from exc
    except _UNREACHABLE as exc:
        raise BusUnavailable(f"NATS is unreachable ({doing}): {exc!r}") from exc
    except (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError) as exc:
        raise BusError(
            f"no JetStream stream answered {doing}: create the streams (Bus.ensure_streams) on a server with JetStream"
        ) from exc
    except nats.js.errors.APIError as exc:
        raise BusError(
            f"NATS refused {doing}: {exc.description} (code {exc.code}, JetStream error {exc.err_code})"
        ) from exc
    except nats.errors.Error as exc:
        raise BusError(f"NATS failed {doing}: {exc!r}") from exc


def redacted_url(url: str) -> str:
    """``url`` without user, password or token (for logs and messages)."""
    out = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        host = parts.hostname or ""
        try:
            port = parts.port
        except ValueError:
            port = None
        netloc = f"{host}:{port}" if port else host
        out.append(f"{parts.scheme}://{netloc}" if parts.scheme else netloc)
    return ",".join(out)


def nats_servers(url: str) -> list[str]:
    """The server URLs of the ``nats_url`` setting (comma-separated ``nats://`` / ``tls://``), or BusError."""
    servers = [one.strip() for one in url.split(",") if one.strip()]
    if not servers:
        raise BusError(f"{URL_SETTING} is empty: set it to the NATS server, e.g. nats://127.0.0.1:4222")
    for one in servers:
        try:
            parts = urlsplit(one)
            port = parts.port
        except ValueError as exc:
            raise BusError(f"{URL_SETTING} {redacted_url(one)!r} is not a URL: use nats://HOST:PORT") from exc
        if parts.scheme not in ("nats", "tls") or not parts.hostname or parts.path not in ("", "/") or port == 0:
            raise BusError(
                f"{URL_SETTING} {redacted_url(one)!r} is not a NATS URL: use nats://HOST:PORT or tls://HOST:PORT"
            )
    return servers
