"""Notification channel settings: the ``[channels.NAME]`` tables of the TOML file.

Three kinds, told apart by ``kind``: a signed JSON webhook, a Telegram bot chat, an ntfy topic.
Secrets (the webhook's HMAC key, the Telegram bot token, the ntfy access token) may come from
the file, or from the systemd credentials ``channel_NAME_secret`` / ``channel_NAME_token``
(which win, so a unit can keep them out of the file).  :func:`resolve_channels` is called at
start-up and turns every problem into a :class:`ChannelSettingsError` naming the key to fix.

Every channel also says who may route notifications to it (``subscribers``: token or OAuth
client names, or ``"*"``; none by default, so only ``notify_all_channels`` reaches it), how many
messages it takes a minute (``max_per_minute``, defaults that respect each service: past it the
sender coalesces a principal's waiting notifications into one digest message), and whether its
URL may be on a loopback, link-local or private address (``allow_private_address``: refused at
start unless set — a literal address or a local name here; a name that resolves to one is
refused when the sender connects, alerts/channels/http1.py).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator

from config.credentials import read_credential

CHANNEL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
TELEGRAM_API_URL = "https://api.telegram.org"
ANY_SUBSCRIBER = "*"

DEFAULT_MAX_PER_MINUTE = {"webhook": 60, "telegram": 20, "ntfy": 12}
"""Per kind, the messages a channel sends a minute before it coalesces into digests.  Telegram: the
Bot FAQ (core.telegram.org/bots/faq, "My bot is hitting limits") asks for at most one message a
second in one chat and 20 a minute in a group — 20 respects both.  ntfy: its server's default
visitor request limit (docs.ntfy.sh/config/#rate-limiting, ntfy.sh's too) is a burst of 60 then one
request every 5 s — 12 a minute.  Webhooks: one a second."""

LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def is_private_address(address: str) -> bool:
    """A loopback, link-local, private (RFC 1918, ULA), unspecified or reserved IP address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_link_local or ip.is_private or ip.is_unspecified or ip.is_reserved


def is_private_host(host: str) -> bool:
    """A URL host that is a private address (:func:`is_private_address`) or a local name (localhost …)."""
    name = host.strip("[]").rstrip(".").lower()
    return name in LOCAL_NAMES or name.endswith(".localhost") or is_private_address(name)


def _http_url(value: str, key: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{key} must be an http:// or https:// URL, got {value!r}")
    return value.rstrip("/") if key == "api_url" else value


class _Channel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(default=10.0, gt=0, le=120)
    """How long one delivery request may take before it counts as failed and is retried."""
    subscribers: list[str] = Field(default_factory=list)
    """Who may route its own notifications here with subscribe_notifications: token names
    (``chartgen token create NAME``), OAuth client names or ids (``chartgen oauth list``), principal
    ids, or ``"*"`` for every principal.  Default: nobody (only ``notify_all_channels`` reaches it)."""
    max_per_minute: int | None = Field(default=None, ge=1, le=60_000)
    """Messages a minute (a burst of ten seconds' worth, then one every 60/max_per_minute s); past it a
    principal's waiting notifications go as one digest message.  Default by kind: webhook 60,
    telegram 20, ntfy 12 (:data:`DEFAULT_MAX_PER_MINUTE`)."""
    allow_private_address: bool = False
    """Allow a URL on a loopback, link-local or private address (a receiver on this host or network)."""

    @property
    def rate_per_minute(self) -> int:
        """``max_per_minute``, or the kind's default."""
        return self.max_per_minute or DEFAULT_MAX_PER_MINUTE[str(getattr(self, "kind", "webhook"))]

    @property
    def url_field(self) -> str:
        """The name of the setting holding the URL the sender connects to."""
        return "api_url" if hasattr(self, "api_url") else "url"

    def may_subscribe(self, principal: str, names: frozenset[str] = frozenset()) -> bool:
        """Whether ``principal`` (known also by ``names``: its token or OAuth client names) is a subscriber."""
        granted = set(self.subscribers)
        return ANY_SUBSCRIBER in granted or principal in granted or bool(granted & names)

    @field_validator("subscribers")
    @classmethod
    def _subscribers(cls, v: list[str]) -> list[str]:
        for entry in v:
            if not entry.strip():
                raise ValueError('an empty name in subscribers; list token or OAuth client names, or "*"')
        return v

    @field_validator("url", "api_url", check_fields=False)
    @classmethod
    def _urls(cls, v: str, info: ValidationInfo) -> str:
        return _http_url(v, str(info.field_name))


class WebhookChannel(_Channel):
    """A JSON POST of the push frame, signed with ``secret`` (``X-Chartgen-Signature``)."""

    kind: Literal["webhook"]
    url: str
    """Where the notifications are POSTed."""
    secret: SecretStr | None = None
    """HMAC-SHA256 key of the signature (or the systemd credential channel_NAME_secret). Required."""


class TelegramChannel(_Channel):
    """A message to ``chat_id`` through the Telegram Bot API (sendMessage)."""

    kind: Literal["telegram"]
    bot_token: SecretStr | None = None
    """The bot's token from @BotFather (or the systemd credential channel_NAME_token). Required."""
    chat_id: str
    """The chat (user, group or channel id, or @channelname) the bot writes to."""
    api_url: str = TELEGRAM_API_URL
    """Bot API origin; /bot<token>/sendMessage is appended (a local Bot API server, or a test receiver)."""

    @field_validator("chat_id", mode="before")
    @classmethod
    def _chat(cls, v: object) -> object:
        return str(v) if isinstance(v, int) else v


class NtfyChannel(_Channel):
    """A message published to an ntfy topic URL (title, priority and tags set)."""

    kind: Literal["ntfy"]
    url: str
    """The topic URL, e.g. https://ntfy.sh/my-chartgen-alerts."""
    token: SecretStr | None = None
    """Access token for a protected topic (or the systemd credential channel_NAME_token). Optional."""
    priority: int = Field(default=4, ge=1, le=5)
    """ntfy priority of alert notifications (1 min … 5 max)."""


ChannelSettings = Annotated[WebhookChannel | TelegramChannel | NtfyChannel, Field(discriminator="kind")]


class ChannelSettingsError(ValueError):
    """A channel setting that cannot work; the message names the key and the fix."""


def _secret(
    name: str, credential: str, value: SecretStr | None, *, required: str | None = None, key: str | None = None
) -> str | None:
    """A channel's secret: the systemd credential ``channel_NAME_<credential>`` first, else the file's
    value; a ``required`` one that is missing raises, naming the key to set."""
    found = read_credential(f"channel_{name}_{credential}") or (value.get_secret_value() if value else None)
    if not found and required is not None:
        field = key or credential
        raise ChannelSettingsError(
            f"channels.{name}.{field} is required for {required}: set it, or the systemd credential "
            f"channel_{name}_{credential}"
        )
    return found


def resolve_channels(channels: dict[str, ChannelSettings], notify_all: list[str]) -> dict[str, ChannelSettings]:
    """The channels with their secrets filled in from systemd credentials; every problem raised, naming its key."""
    out: dict[str, ChannelSettings] = {}
    for name, channel in channels.items():
        if not CHANNEL_NAME.match(name):
            raise ChannelSettingsError(
                f"channels.{name}: a channel name may use letters, digits, '_' and '-' (at most 40); rename the table"
            )
        if isinstance(channel, WebhookChannel):
            secret = _secret(name, "secret", channel.secret, required="a webhook")
            out[name] = channel.model_copy(update={"secret": SecretStr(secret or "")})
        elif isinstance(channel, TelegramChannel):
            token = _secret(name, "token", channel.bot_token, required="telegram", key="bot_token")
            out[name] = channel.model_copy(update={"bot_token": SecretStr(token or "")})
        else:
            token = _secret(name, "token", channel.token)
            out[name] = channel.model_copy(update={"token": SecretStr(token) if token else None})
        host = urlparse(str(getattr(channel, channel.url_field))).hostname or ""
        if not channel.allow_private_address and is_private_host(host):
            raise ChannelSettingsError(
                f"channels.{name}.{channel.url_field} is on a loopback, link-local or private address ({host}); "
                f"use a public URL, or set channels.{name}.allow_private_address = true for a receiver you run"
            )
    for name in notify_all:
        if name not in out:
            known = ", ".join(sorted(out)) or "none are configured"
            raise ChannelSettingsError(
                f"notify_all_channels names {name!r}, which is not a [channels.{name}] table ({known})"
            )
    return out
