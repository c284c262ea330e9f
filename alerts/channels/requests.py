"""One HTTP request per delivery, by channel kind (webhook, Telegram Bot API, ntfy).

The webhook body is the outbox payload's bytes unchanged (what the signature covers); Telegram
gets ``sendMessage`` JSON with the plain text; ntfy gets the text with Title/Priority/Tags
headers (ntfy's documented publishing headers) and a bearer token for a protected topic.
Every request carries ``Idempotency-Key: <notification id>``.

A digest (:func:`build_digest`, several notifications as one message when the channel's rate is
exceeded) is, for a webhook, a signed ``notifications/alerts_digest`` JSON-RPC notification whose
``params.notifications`` are the push frames' params in firing order (each with its ``alert_id``,
the receiver's idempotency key per notification); for Telegram and ntfy, the digest text.  Its
``Idempotency-Key`` is ``digest-`` and a hash of the notification ids it covers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from alerts.channels import messages
from config import ChannelSettings, NtfyChannel, TelegramChannel, WebhookChannel

USER_AGENT = "chartgen"


@dataclass(frozen=True, slots=True)
class ChannelRequest:
    url: str
    headers: dict[str, str]
    body: bytes


def build(channel: ChannelSettings, notification_id: str, payload: str, now: float) -> ChannelRequest:
    """The request delivering ``payload`` (a push frame's JSON text) on ``channel``."""
    headers = {"Idempotency-Key": notification_id, "User-Agent": USER_AGENT}
    if isinstance(channel, WebhookChannel):
        body = payload.encode()
        assert channel.secret is not None  # resolve_channels guarantees it
        headers["Content-Type"] = "application/json"
        headers[messages.SIGNATURE_HEADER] = messages.signature(channel.secret.get_secret_value(), int(now), body)
        return ChannelRequest(channel.url, headers, body)
    frame = orjson.loads(payload)
    if isinstance(channel, TelegramChannel):
        assert channel.bot_token is not None
        body = orjson.dumps(
            {"chat_id": channel.chat_id, "text": messages.text(frame), "disable_web_page_preview": True}
        )
        headers["Content-Type"] = "application/json"
        url = f"{channel.api_url}/bot{channel.bot_token.get_secret_value()}/sendMessage"
        return ChannelRequest(url, headers, body)
    assert isinstance(channel, NtfyChannel)
    params = frame.get("params") or {}
    headers |= {
        "Title": messages.title(params),
        "Priority": str(channel.priority),
        "Tags": messages.tags(params),
        "Content-Type": "text/plain; charset=utf-8",
    }
    if channel.token is not None:
        headers["Authorization"] = f"Bearer {channel.token.get_secret_value()}"
    return ChannelRequest(channel.url, headers, messages.text(frame).encode())


DIGEST_METHOD = "notifications/alerts_digest"


def digest_key(notification_ids: Sequence[str]) -> str:
    """The idempotency key of a digest: the same notifications, the same key."""
    return "digest-" + hashlib.sha256("\n".join(notification_ids).encode()).hexdigest()[:32]


def build_digest(
    channel: ChannelSettings, items: Sequence[tuple[str, str]], now: float, per_minute: int
) -> ChannelRequest:
    """One request delivering several notifications (``items``: (notification id, payload) in firing order)."""
    frames = [orjson.loads(payload) for _, payload in items]
    headers = {"Idempotency-Key": digest_key([nid for nid, _ in items]), "User-Agent": USER_AGENT}
    if isinstance(channel, WebhookChannel):
        body = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "method": DIGEST_METHOD,
                "params": {
                    "count": len(frames),
                    "max_per_minute": per_minute,
                    "notifications": [f.get("params") or {} for f in frames],
                },
            }
        )
        assert channel.secret is not None
        headers["Content-Type"] = "application/json"
        headers[messages.SIGNATURE_HEADER] = messages.signature(channel.secret.get_secret_value(), int(now), body)
        return ChannelRequest(channel.url, headers, body)
    text = messages.digest_text(frames, per_minute)
    if isinstance(channel, TelegramChannel):
        assert channel.bot_token is not None
        body = orjson.dumps({"chat_id": channel.chat_id, "text": text, "disable_web_page_preview": True})
        headers["Content-Type"] = "application/json"
        return ChannelRequest(f"{channel.api_url}/bot{channel.bot_token.get_secret_value()}/sendMessage", headers, body)
    assert isinstance(channel, NtfyChannel)
    headers |= {
        "Title": messages.digest_title(len(frames)),
        "Priority": str(channel.priority),
        "Tags": "bell",
        "Content-Type": "text/plain; charset=utf-8",
    }
    if channel.token is not None:
        headers["Authorization"] = f"Bearer {channel.token.get_secret_value()}"
    return ChannelRequest(channel.url, headers, text.encode())
