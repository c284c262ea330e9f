"""Configuration: the Settings model and how it is loaded (CLI > env > TOML > defaults)."""

from config.channels import (
    ANY_SUBSCRIBER,
    ChannelSettings,
    NtfyChannel,
    TelegramChannel,
    WebhookChannel,
    is_private_address,
)
from config.private_files import PRIVATE_FILE_MODE, PRIVATE_UMASK, secure_data_dir, secure_private_file, tighten_private
from config.settings import Settings, is_loopback_host, load_settings, resolve_data_dir, settings_problems
from config.toml_source import ConfigFileError

__all__ = [
    "ANY_SUBSCRIBER",
    "PRIVATE_FILE_MODE",
    "PRIVATE_UMASK",
    "ChannelSettings",
    "ConfigFileError",
    "NtfyChannel",
    "Settings",
    "TelegramChannel",
    "WebhookChannel",
    "is_loopback_host",
    "is_private_address",
    "load_settings",
    "resolve_data_dir",
    "secure_data_dir",
    "secure_private_file",
    "settings_problems",
    "tighten_private",
]
