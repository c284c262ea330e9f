"""Configuration: the Settings model and how it is loaded (CLI > env > TOML > defaults)."""

from config.settings import Settings, is_loopback_host, load_settings, resolve_data_dir
from config.toml_source import ConfigFileError

__all__ = ["ConfigFileError", "Settings", "is_loopback_host", "load_settings", "resolve_data_dir"]
