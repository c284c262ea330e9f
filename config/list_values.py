"""List settings given as a comma list or a list (``symbols = "BTCUSDT,ETHUSDT"`` or a TOML array):
split, stripped, de-duplicated in order, upper-cased where the setting is a ticker."""

from __future__ import annotations

from typing import Any


def split_list(v: Any, *, upper: bool) -> Any:
    """The items of ``v`` (anything else is returned as is, for pydantic to refuse by name)."""
    items: list[str]
    if isinstance(v, str):
        items = [v]
    elif isinstance(v, (list, tuple)):
        items = [str(x) for x in v]
    else:
        return v
    out: list[str] = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if part:
                part = part.upper() if upper else part
                if part not in out:
                    out.append(part)
    return out
