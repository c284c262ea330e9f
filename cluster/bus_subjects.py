"""The event bus's subject names (design.md §11): building them and reading them back.

Subject tokens.  Principals, symbols and intervals are data: they may contain ``.`` (the token
separator), ``*`` and ``>`` (wildcards), whitespace or any Unicode.  Each is therefore encoded
as one token by :func:`encode_token`: the UTF-8 bytes (surrogates passed through, so any Python
``str`` round-trips) in RFC 4648 base32, lowercase, without ``=`` padding — only ``a-z`` and
``2-7``, always a single valid token, 1.6 bytes per byte.  :func:`decode_token` reverses it.
The empty string has no token (it would be an empty token): :func:`encode_token` refuses it.
Market kinds and command names are chartgen's own vocabulary and appear as plain tokens, so
filters such as ``chartgen.market.bar.>`` work.

The streams that store these subjects are in :mod:`cluster.bus_streams`; the connection that
publishes and consumes them is :class:`cluster.bus.Bus`.  This module imports nothing of NATS.
"""

from __future__ import annotations

import base64
import re

SUBJECT_ROOT = "chartgen"
MARKET_KINDS = ("tick", "bar", "indicator")
"""What the engine workers publish on ``chartgen.market.<kind>.<symbol>.<interval>``."""
NO_INTERVAL = "_"
"""The interval token of a tick (ticks have no interval); ``_`` is outside base32's alphabet."""

PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""Command names and durable consumer names: one plain token."""
_BAD_SUBJECT_CHARS = re.compile(r"[\s*>]")


def encode_token(text: str) -> str:
    """``text`` as one subject token: base32 of its UTF-8, lowercase, unpadded (module docstring)."""
    if not text:
        raise ValueError("an empty string has no subject token")
    return _base32(text.encode("utf-8", "surrogatepass"))


def decode_token(token: str) -> str:
    """The text :func:`encode_token` made ``token`` from; ``ValueError`` for anything it cannot have made."""
    if not token or not re.fullmatch(r"[a-z2-7]+", token):
        raise ValueError(f"not an encoded subject token: {token!r}")
    padded = token.upper() + "=" * (-len(token) % 8)
    try:
        raw = base64.b32decode(padded)
    except ValueError as exc:  # binascii.Error: a length base32 never produces
        raise ValueError(f"not an encoded subject token: {token!r}") from exc
    if _base32(raw) != token:
        raise ValueError(f"not an encoded subject token: {token!r}")  # non-canonical trailing bits
    return raw.decode("utf-8", "surrogatepass")


def _base32(raw: bytes) -> str:
    return base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def notify_subject(principal: str) -> str:
    """``chartgen.notify.<principal token>``: where a principal's fired notifications go."""
    return f"{SUBJECT_ROOT}.notify.{encode_token(principal)}"


def market_subject(kind: str, symbol: str, interval: str | None) -> str:
    """``chartgen.market.<kind>.<symbol token>.<interval token>``; a tick has no interval (``None``)."""
    if kind not in MARKET_KINDS:
        raise ValueError(f"market kind must be one of {', '.join(MARKET_KINDS)}, not {kind!r}")
    if (kind == "tick") != (interval is None):
        raise ValueError("a tick has no interval; bars and indicator updates have one")
    interval_token = NO_INTERVAL if interval is None else encode_token(interval)
    return f"{SUBJECT_ROOT}.market.{kind}.{encode_token(symbol)}.{interval_token}"


def command_subject(name: str) -> str:
    """``chartgen.cmd.<name>``; ``name`` is one of chartgen's command names (letters, digits, ``_``, ``-``)."""
    if not PLAIN_NAME.fullmatch(name):
        raise ValueError(f"command name must be 1-64 of [A-Za-z0-9_-], not {name!r}")
    return f"{SUBJECT_ROOT}.cmd.{name}"


def principal_of(subject: str) -> str:
    """The principal of a :func:`notify_subject`."""
    parts = subject.split(".")
    if len(parts) != 3 or parts[:2] != [SUBJECT_ROOT, "notify"]:
        raise ValueError(f"not a notification subject: {subject!r}")
    return decode_token(parts[2])


def market_of(subject: str) -> tuple[str, str, str | None]:
    """(kind, symbol, interval) of a :func:`market_subject`."""
    parts = subject.split(".")
    if len(parts) != 5 or parts[:2] != [SUBJECT_ROOT, "market"] or parts[2] not in MARKET_KINDS:
        raise ValueError(f"not a market subject: {subject!r}")
    interval = None if parts[4] == NO_INTERVAL else decode_token(parts[4])
    return parts[2], decode_token(parts[3]), interval


def check_subject(subject: str, *, wildcards: bool) -> None:
    """``ValueError`` unless ``subject`` is a valid subject under ``chartgen.`` (``wildcards``: a subject filter)."""
    tokens = subject.split(".")
    bad = (
        not subject.startswith(f"{SUBJECT_ROOT}.")
        or any(not t for t in tokens)
        or re.search(r"\s", subject) is not None
        or (not wildcards and _BAD_SUBJECT_CHARS.search(subject) is not None)
        or (wildcards and any(("*" in t and t != "*") or (">" in t and t != ">") for t in tokens))
        or (wildcards and ">" in tokens[:-1])
    )
    if bad:
        what = "subject filter" if wildcards else "subject"
        raise ValueError(f"not a valid {what} under {SUBJECT_ROOT}.: {subject!r}")
