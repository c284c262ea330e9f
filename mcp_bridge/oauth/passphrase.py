"""The operator passphrase that approves OAuth consents: scrypt hashing and checking.

Format: ``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>``.  Checking runs in a worker thread
(scrypt is deliberately slow: ~50 ms with n=2**15), never on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets

N, R, P = 2**15, 8, 1
MIN_LENGTH = 12


class PassphraseError(ValueError):
    """A passphrase that may not be used (too short)."""


def hash_passphrase(passphrase: str, *, n: int = N, r: int = R, p: int = P) -> str:
    if len(passphrase) < MIN_LENGTH:
        raise PassphraseError(f"the passphrase must have at least {MIN_LENGTH} characters")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(passphrase.encode(), salt=salt, n=n, r=r, p=p, maxmem=128 * n * r * 2, dklen=32)
    return f"scrypt${n}${r}${p}${salt.hex()}${digest.hex()}"


def check_passphrase(passphrase: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        n_, r_, p_ = int(n), int(r), int(p)
        got = hashlib.scrypt(
            passphrase.encode(), salt=bytes.fromhex(salt), n=n_, r=r_, p=p_, maxmem=128 * n_ * r_ * 2, dklen=32
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got.hex(), digest)


async def check_passphrase_async(passphrase: str, stored: str) -> bool:
    return await asyncio.to_thread(check_passphrase, passphrase, stored)
