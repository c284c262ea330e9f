"""The TOML configuration file as a settings source (top-level keys are field names).

:func:`config.settings.load_settings` names the file for the duration of one ``Settings()``
build through :data:`toml_path`; a missing or malformed file is a :class:`ConfigFileError`.
"""

from __future__ import annotations

import contextvars
import tomllib
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

toml_path: contextvars.ContextVar[Path | None] = contextvars.ContextVar("chartgen_toml_path", default=None)


class ConfigFileError(ValueError):
    """The TOML configuration file is missing or malformed."""


class TomlSource(PydanticBaseSettingsSource):
    """Settings from the TOML file chosen by load_settings."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        path = toml_path.get()
        self._data: dict[str, Any] = {}
        if path is not None:
            try:
                with path.open("rb") as fh:
                    self._data = tomllib.load(fh)
            except FileNotFoundError as exc:
                raise ConfigFileError(f"config file {path} does not exist") from exc
            except tomllib.TOMLDecodeError as exc:
                raise ConfigFileError(f"config file {path} is not valid TOML: {exc}") from exc

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)
