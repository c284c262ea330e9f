"""OAuth test helpers shared by the protocol-level and the browser tests."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import sys
from pathlib import Path

from tests.support.daemon_proc import clean_env

PASSPHRASE = "correct horse battery staple"


async def set_passphrase(data_dir: Path, passphrase: str = PASSPHRASE) -> None:
    """``chartgen passphrase set`` with the passphrase on stdin."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon",
        "passphrase",
        "--data-dir",
        str(data_dir),
        "set",
        env=clean_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate((passphrase + "\n").encode())
    assert proc.returncode == 0, err.decode()


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge
