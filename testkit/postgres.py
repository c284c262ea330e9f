"""Debian's PostgreSQL server for the storage tests and benches: a private cluster on loopback.

:func:`postgres_server` runs ``initdb`` in a fresh temporary directory and ``pg_ctl start -w``
(which waits until the server accepts connections: no polling here), listening on a free
loopback port with its Unix socket in the same directory; on exit ``pg_ctl stop -m fast`` and
the directory is removed.  PostgreSQL refuses to run as root, so under root (CI containers)
the cluster belongs to ``nobody`` and its programs run as that user (``subprocess``'s
``user=``).  :meth:`PostgresServer.new_database` gives each test a database of its own.

The binaries are Debian's (``apt-get install postgresql``; ``.ci/run`` does this): found on
PATH or in ``/usr/lib/postgresql/<version>/bin``.  Missing: skipped locally, a failure under CI
(:mod:`testkit.external`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from testkit.external import required, which
from testkit.nginx import free_port

SUPERUSER = "chartgen"


def _bindir() -> Path:
    how = "apt-get install postgresql; .ci/run does this"
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    found = versions[-1] if versions else which("initdb")
    return required("PostgreSQL (initdb, pg_ctl)", found, how).parent


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    directory: Path
    bindir: Path
    owner: str | None = None
    options: str = ""

    def stop(self) -> None:
        """Stop the server (fast shutdown); :meth:`start` brings it back on the same port and data."""
        _run_as(
            self.owner,
            [str(self.bindir / "pg_ctl"), "-D", str(self.directory / "data"), "-m", "fast", "-w", "stop"],
            cwd=str(self.directory),
        )

    def start(self) -> None:
        _run_as(
            self.owner,
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.directory / "data"),
                "-l",
                str(self.directory / "server.log"),
                "-w",
                "-t",
                "60",
                "-o",
                self.options,
                "start",
            ],
            cwd=str(self.directory),
        )

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    async def new_database(self) -> str:
        """Create an empty database and return its DSN."""
        name = "t_" + uuid.uuid4().hex[:16]
        conn = await asyncpg.connect(self.dsn())
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
        return self.dsn(name)


def _run_as(owner: str | None, args: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, check=True, capture_output=True, user=owner, **kwargs)  # type: ignore[call-overload,no-any-return]


@contextlib.contextmanager
def postgres_server(*, fsync: bool = True, settings: dict[str, str] | None = None) -> Iterator[PostgresServer]:
    """A running cluster (see the module docstring); ``fsync=False`` only for benches that say so."""
    bindir = _bindir()
    owner = "nobody" if os.geteuid() == 0 else None
    top = Path(tempfile.mkdtemp(prefix="chartgen-pg-"))
    data = top / "data"
    if owner is not None:
        entry = pwd.getpwnam(owner)
        os.chown(top, entry.pw_uid, entry.pw_gid)
    port = free_port()
    try:
        _run_as(
            owner,
            [str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"],
            cwd=str(top),
        )
        options = {
            "listen_addresses": "127.0.0.1",
            "port": str(port),
            "unix_socket_directories": str(top),
            "fsync": "on" if fsync else "off",
            "max_connections": "200",
            **(settings or {}),
        }
        opts = " ".join(f"-c {k}={v}" for k, v in options.items())
        server = PostgresServer("127.0.0.1", port, top, bindir, owner, opts)
        server.start()
        try:
            yield server
        finally:
            server.stop()
    except subprocess.CalledProcessError as exc:
        log = (top / "server.log").read_text(errors="replace") if (top / "server.log").exists() else ""
        raise RuntimeError(f"PostgreSQL failed: {exc.stderr.decode(errors='replace')}\n{log[-2000:]}") from exc
    finally:
        shutil.rmtree(top, ignore_errors=True)
