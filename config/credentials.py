"""systemd credentials (``LoadCredential=``): the one reader of ``$CREDENTIALS_DIRECTORY/NAME``.

Used for exchange keys (``binance_api_key``, ``ccxt_api_secret``, …), channel secrets
(``channel_NAME_secret`` / ``channel_NAME_token``) and the cluster's ``postgres_dsn``; a
credential wins over the settings file.
"""

from __future__ import annotations

import os
from pathlib import Path


def read_credential(name: str) -> str | None:
    """The stripped content of credential ``name``, or None when there is none (or it is empty)."""
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if not creds:
        return None
    path = Path(creds) / name
    if not path.is_file():
        return None
    return path.read_text().strip() or None


def key_pair(key: str | None, secret: str | None, prefix: str) -> tuple[str, str] | None:
    """(key, secret), each replaced by the ``{prefix}_api_key`` / ``{prefix}_api_secret`` credential
    when one exists; None unless both are known."""
    key = read_credential(f"{prefix}_api_key") or key
    secret = read_credential(f"{prefix}_api_secret") or secret
    return (key, secret) if key and secret else None
