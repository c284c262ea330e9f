"""What a channel says about a fired alert: the short text (Telegram, ntfy), its title and tags,
and the webhook signature.

The text is plain (no Markdown or HTML parse mode), so nothing in a note or symbol needs
escaping: symbol and interval, the condition in words, the value, the time (UTC), the note, the
alert action's order outcome when there is one, and the notification id on the last line
(Telegram and ntfy have no idempotency header; a re-delivery shows as a second message with
the same id).  The signature is ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">``.

A digest (:func:`digest_text`: the notifications a channel's rate held back, as one message) says
how many, then one line per notification — symbol, interval, condition, value, time, the note's
first :data:`DIGEST_NOTE_CHARS` characters, the order outcome and the id — so none is lost and the
whole message stays within Telegram's 4,096 characters (the sender caps a text digest's rows).
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime
from typing import Any

SIGNATURE_HEADER = "X-Chartgen-Signature"


def _number(value: Any) -> str:
    """A price as people read it: thousands separated, no float noise."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    if x == int(x) and abs(x) >= 1:
        return f"{int(x):,}"
    digits = 2 if abs(x) >= 1 else 8
    return f"{x:,.{digits}f}".rstrip("0").rstrip(".")


def condition_words(condition: dict[str, Any]) -> str:
    """``{"type": "price_above", "threshold": 70000}`` → "price above 70,000"."""
    kind = str(condition.get("type", ""))
    if kind == "indicator_signal":
        return f"{condition.get('indicator')} signal {condition.get('signal')}"
    if kind in ("price_above", "price_below"):
        return f"price {kind.removeprefix('price_')} {_number(condition.get('threshold'))}"
    return kind or "alert"


def _when(stamp: Any) -> str:
    try:
        t = datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def outcome_words(action: dict[str, Any]) -> str:
    """The order outcome line: "Order Filled 0.01 @ 70,012.3 (id …)" / "Order refused: reason"."""
    status = str(action.get("status"))
    if status == "Refused":
        return f"Order refused: {action.get('reason')}"
    line = f"Order {status}"
    if action.get("filled_quantity") not in (None, "0", 0):
        line += f" {action['filled_quantity']}"
        if action.get("fill_price") is not None:
            line += f" @ {_number(action['fill_price'])}"
    if action.get("reason"):
        line += f": {action['reason']}"
    if action.get("order_id"):
        line += f" (id {action['order_id']})"
    return line


def title(params: dict[str, Any]) -> str:
    return f"{params.get('symbol')} {condition_words(params.get('condition') or {})}"


def text(frame: dict[str, Any]) -> str:
    """The short message of a push frame (``notifications/alert_triggered``)."""
    p = frame.get("params") or {}
    lines = [
        f"{p.get('symbol')} {p.get('interval')}: {condition_words(p.get('condition') or {})}",
        f"value {_number(p.get('value'))} at {_when(p.get('triggered_at'))}",
    ]
    if p.get("note"):
        lines.append(f"note: {p['note']}")
    if isinstance(p.get("action"), dict):
        lines.append(outcome_words(p["action"]))
    lines.append(f"id: {p.get('alert_id')}")
    return "\n".join(lines)


DIGEST_NOTE_CHARS = 40
DIGEST_LINE_CHARS = 150


def digest_title(count: int) -> str:
    return f"{count} more alerts fired"


def digest_line(params: dict[str, Any]) -> str:
    """One notification of a digest, on one line of at most :data:`DIGEST_LINE_CHARS` characters."""
    when = _when(params.get("triggered_at"))
    line = (
        f"{params.get('symbol')} {params.get('interval')}: {condition_words(params.get('condition') or {})}"
        f" = {_number(params.get('value'))} at {when.split(' ', 1)[-1].removesuffix(' UTC')}"
    )
    note = params.get("note")
    if note:
        short = str(note).replace("\n", " ")
        line += f" ({short[:DIGEST_NOTE_CHARS]}{'…' if len(short) > DIGEST_NOTE_CHARS else ''})"
    if isinstance(params.get("action"), dict):
        line += f"; {outcome_words(params['action'])}"
    tail = f" id {params.get('alert_id')}"
    return line[: DIGEST_LINE_CHARS - len(tail)] + tail


def digest_text(frames: list[dict[str, Any]], per_minute: int) -> str:
    """The digest of ``frames`` (push frames in firing order): "37 more alerts fired: …" and one line each."""
    head = f"{digest_title(len(frames))} (this channel sends at most {per_minute} messages a minute):"
    return "\n".join([head, *(digest_line(f.get("params") or {}) for f in frames)])


def tags(params: dict[str, Any]) -> str:
    """ntfy tags (emoji short codes) by condition."""
    kind = (params.get("condition") or {}).get("type")
    by_kind = {"price_above": "chart_with_upwards_trend", "price_below": "chart_with_downwards_trend"}
    return by_kind.get(kind, "bell") if isinstance(kind, str) else "bell"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify_signature(secret: str, header: str, body: bytes, now: float, tolerance_s: float = 300.0) -> bool:
    """True when ``header`` signs ``body`` with ``secret`` and its timestamp is within ``tolerance_s`` of now."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        stamp = int(parts["t"])
        given = parts["v1"]
    except (ValueError, KeyError):
        return False
    if abs(now - stamp) > tolerance_s:
        return False
    expected = signature(secret, stamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, given)
