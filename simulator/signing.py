"""Binance's signed-request checks: API key, HMAC-SHA256 signature, timestamp and recvWindow.

The signature covers ``totalParams`` — the query string concatenated with the request body,
exactly as sent (minus the ``signature`` parameter) — so any client that signs what it sends
is accepted, and a tampered or re-ordered request is not.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl

from aiohttp import web

from simulator.accounts import OrderError


def _strip_signature(raw: str) -> tuple[str, str | None]:
    kept, signature = [], None
    for part in raw.split("&") if raw else []:
        if part.startswith("signature="):
            signature = part[len("signature=") :]
        elif part:
            kept.append(part)
    return "&".join(kept), signature


async def signed_params(request: web.Request, *, api_key: str, api_secret: str, server_ms: int) -> dict[str, str]:
    """The request's parameters after every check passes; raises OrderError with Binance's code otherwise."""
    if request.headers.get("X-MBX-APIKEY") != api_key:
        raise OrderError(-2015, "Invalid API-key, IP, or permissions for action.", status=401)
    query, q_sig = _strip_signature(request.query_string)
    body_raw = (await request.read()).decode() if request.can_read_body else ""
    body, b_sig = _strip_signature(body_raw)
    signature = b_sig or q_sig
    if not signature:
        raise OrderError(-1102, "Mandatory parameter 'signature' was not sent, was empty/null, or malformed.")
    total = query + body
    expected = hmac.new(api_secret.encode(), total.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature.lower()):
        raise OrderError(-1022, "Signature for this request is not valid.")
    params = dict(parse_qsl(query, keep_blank_values=True))
    params.update(parse_qsl(body, keep_blank_values=True))
    check_time(params, server_ms)
    return params


def check_time(params: dict[str, str], server_ms: int) -> None:
    """Binance's rule: ``timestamp < serverTime + 1000`` and ``serverTime - timestamp <= recvWindow``."""
    try:
        timestamp = int(params["timestamp"])
    except (KeyError, ValueError):
        raise OrderError(-1102, "Mandatory parameter 'timestamp' was not sent, was empty/null, or malformed.") from None
    try:
        window = int(float(params.get("recvWindow", "5000")))
    except ValueError:
        raise OrderError(-1100, "Illegal characters found in parameter 'recvWindow'.") from None
    if window > 60000:
        raise OrderError(-1131, "recvWindow must be less than 60000")
    if timestamp >= server_ms + 1000 or server_ms - timestamp > window:
        raise OrderError(-1021, "Timestamp for this request is outside of the recvWindow.")
