"""Versioned schema steps, shared by both storages (SQLite ``storage/sqlite.py`` and PostgreSQL
``storage/postgres.py``): what a package's history looks like and the refusal of a database
whose schema is newer than this code.

Both storages keep the same story: every package owns its tables and ships its steps; steps are
applied at start, each once, in a transaction, recorded in ``schema_migrations (package,
version)``; a database in which any package is at a version this code does not know is refused
before anything is applied, with one line naming each such package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage.errors import DatabaseError


@dataclass(frozen=True, slots=True)
class Migrations:
    """One package's schema history: ``steps`` are (version, SQL script), versions ascending from 1."""

    package: str
    steps: tuple[tuple[int, str], ...]

    def __post_init__(self) -> None:
        versions = [v for v, _ in self.steps]
        if versions != list(range(1, len(versions) + 1)):
            raise ValueError(f"{self.package}: migration versions must be 1, 2, 3, ... in order; got {versions}")


def refuse_newer(where: str, packages: Iterable[Migrations], applied: Mapping[str, set[int]]) -> None:
    """Raise :class:`DatabaseError` if any package's applied version exceeds the steps this code has.

    A downgraded daemon would otherwise run on tables whose meaning changed under it."""
    newer = [
        (mig.package, max(applied[mig.package]), len(mig.steps))
        for mig in packages
        if applied.get(mig.package) and max(applied[mig.package]) > len(mig.steps)
    ]
    if newer:
        schemas = "; ".join(f"{p} at version {at}, this chartgen knows up to {known}" for p, at, known in newer)
        raise DatabaseError(
            f"database {where} was written by a newer chartgen ({schemas}): run that version, or"
            " restore the data directory from a backup taken before the upgrade — nothing was changed"
        )


def statements(script: str) -> list[str]:
    """Split a migration script on ``;`` at line ends (our scripts hold no semicolons in literals)."""
    return [s.strip() for s in script.split(";\n") if s.strip() and s.strip() != ";"]
