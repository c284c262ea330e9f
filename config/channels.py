"""Notification channel settings: the ``[channels.NAME]`` tables of the TOML file.

Three kinds, told apart by ``kind``: a signed JSON webhook, a Telegram bot chat, an ntfy topic.
Secrets (the webhook's HMAC key, the Telegram bot token, the ntfy access token) may come from
the file, or from the systemd credentials ``channel_NAME_secret`` / ``channel_NAME_token``
(which win, so a unit can keep them out of the file).  :func:`resolve_channels` is called at
start-up and turns every problem into a :class:`ChannelSettingsError` naming the key to fix.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator

from config.credentials import read_credential

CHANNEL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
TELEGRAM_API_URL = "https://api.telegram.org"


def _http_url(value: str, key: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{key} must be an http:// or https:// URL, got {value!r}")
    return value.rstrip("/") if key == "api_url" else value


class _Channel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(default=10.0, gt=0, le=120)
    """How long one delivery request may take before it counts as failed and is retried."""

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
    for name in notify_all:
        if name not in out:
            known = ", ".join(sorted(out)) or "none are configured"
            raise ChannelSettingsError(
                f"notify_all_channels names {name!r}, which is not a [channels.{name}] table ({known})"
            )
    return out
