"""The log scan of the fault-tolerance suite: every log line the test suite's daemons wrote is
searched for secrets — bearer and OAuth tokens, API keys and secrets, passphrases.

Daemons started by the tests write their stderr (the structlog stream) into one folder per
test session (``daemon_log_file``); at the end of the session ``tests/conftest.py`` scans that
folder and every ``*.log`` file under the session's temporary directory (trades logs) and fails
the run if anything is found.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LOG_DIR_ENV = "CG_TEST_LOG_DIR"

# Shapes that are secrets wherever they appear: our token formats and an Authorization value.
SECRET_SHAPES = (
    re.compile(rb"cg_(?:pat|oat|ort)_[A-Za-z0-9_-]{16,}"),
    re.compile(rb"(?i)bearer\s+[A-Za-z0-9._~+/=-]{16,}"),
    re.compile(
        rb"(?i)\b(?:client_secret|code_verifier|passphrase|api_?secret|apikey|api_key)[\"']?\s*[=:]\s*[\"']?(?!\*)[A-Za-z0-9._~+/-]{8,}"
    ),
)
# Values the test suite uses as secrets (the simulator's keys, the operator passphrases).
KNOWN_SECRETS = (
    b"sim-api-secret",
    b"sim-api-key",
    b"correct horse battery staple",
    b"not the operator passphrase",
    b"not the passphrase at all",
)


@dataclass(frozen=True)
class Finding:
    path: Path
    line_no: int
    excerpt: str


def log_dir() -> Path:
    """This session's folder for daemon logs (created on first use, shared with child processes)."""
    path = os.environ.get(LOG_DIR_ENV)
    if not path:
        path = tempfile.mkdtemp(prefix="chartgen-test-logs-")
        os.environ[LOG_DIR_ENV] = path
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def daemon_log_file(name: str = "daemon") -> IO[bytes]:
    """A new file in the session's log folder for one daemon's stderr."""
    fd, _ = tempfile.mkstemp(prefix=f"{name}-", suffix=".log", dir=log_dir())
    return os.fdopen(fd, "ab")


def scan_file(path: Path) -> tuple[int, list[Finding]]:
    """(lines scanned, findings) of one file."""
    findings: list[Finding] = []
    lines = 0
    with path.open("rb") as f:
        for line_no, line in enumerate(f, 1):
            lines += 1
            hit = next((m.group(0) for shape in SECRET_SHAPES if (m := shape.search(line))), None)
            if hit is None:
                hit = next((s for s in KNOWN_SECRETS if s in line), None)
            if hit is not None:
                findings.append(Finding(path, line_no, hit[:40].decode(errors="replace") + "…"))
    return lines, findings


def scan(paths: list[Path]) -> tuple[int, int, list[Finding]]:
    """(files scanned, lines scanned, findings) over ``paths``."""
    files = lines = 0
    findings: list[Finding] = []
    for path in paths:
        if not path.is_file():
            continue
        n, found = scan_file(path)
        files += 1
        lines += n
        findings.extend(found)
    return files, lines, findings
