"""External programs some tests drive (Chromium, Node-based MCP tools): find them, or skip —
except under CI (``CHARTGEN_CI=1``, set by ``.ci/run``), where a missing one fails the test so
that a broken install step can never pass as a skipped test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE_TOOLS = ROOT / "tests" / "conformance" / "node_modules"


def required(what: str, found: Path | None, how: str) -> Path:
    """``found`` if it exists; otherwise fail under CI and skip elsewhere, saying how to install it."""
    if found is not None and found.exists():
        return found
    message = f"{what} is not installed ({how})"
    if os.environ.get("CHARTGEN_CI") == "1":
        pytest.fail(message)
    pytest.skip(message)


def chromium() -> tuple[Path, Path]:
    """(chromium, chromedriver) from Debian's packages."""
    how = "apt-get install chromium chromium-driver; .ci/run does this"
    browser = required("Chromium", which("chromium"), how)
    driver = required("ChromeDriver", which("chromedriver"), how)
    return browser, driver


def node_tool(name: str) -> tuple[Path, Path]:
    """(node 22, the tool's entry script) from tests/conformance's npm install."""
    how = "make node-tools (npm ci in tests/conformance)"
    node = required("Node.js 22", NODE_TOOLS / ".bin" / "node", how)
    entry = {
        "conformance": NODE_TOOLS / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
        "inspector": NODE_TOOLS / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js",
    }[name]
    return node, required(f"npm package for {name}", entry, how)


def which(name: str) -> Path | None:
    path = shutil.which(name)
    return Path(path) if path else None


async def stop_process_group(proc: asyncio.subprocess.Process, *, grace_s: float = 15.0) -> None:
    """SIGTERM the server's own process group (and SIGCONT, so a paused one handles it), wait up to
    ``grace_s``, then SIGKILL; returns once it has exited."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGCONT)
    try:
        async with asyncio.timeout(grace_s):
            await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
