"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``, on Node 22)
against ``chartgen --serve --trade --sim``, and the MCP Inspector CLI over HTTP and stdio.

Scenario list — the conformance suite's server scenarios that apply to chartgen. The others
call the suite's own fixture tools, prompts and resources (``test_simple_text``,
``test_simple_prompt``, ``test://…`` resources, sampling/elicitation round-trips) that only its
reference "everything" server has, or optional capabilities chartgen does not declare
(logging/setLevel, completion/complete, resources); they cannot pass against a real product
server and say nothing about it.

The runner cannot send a bearer token, so it talks to a loopback proxy that adds the daemon's
token; the daemon runs with its authentication on (the DNS-rebinding scenario goes through the
proxy with its hostile Host/Origin headers unchanged).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from mcp_bridge import TOOL_NAMES
from testkit.bearer_proxy import BearerProxy
from testkit.daemon_proc import DaemonProc, clean_env, start_daemon
from testkit.external import node_tool

# one daemon for the whole module: its start-up (simulator, warm-up) dominates otherwise
pytestmark = [
    pytest.mark.process,
    pytest.mark.timeout(300),
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.xdist_group("conformance"),  # one module-scoped daemon: the whole file on one xdist worker
]

SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def daemon(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DaemonProc]:
    proc = await start_daemon(["--serve", "--trade", "--sim"], data_dir=tmp_path_factory.mktemp("daemon"))
    try:
        await proc.wait_ready()
        yield proc
    finally:
        await proc.stop()


async def run(cmd: list[str], cwd: Path, timeout_s: float = 120.0) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        cwd=str(cwd),
        env=clean_env({"NO_COLOR": "1", "CI": "1"}),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def checks_of(results: Path) -> list[dict[str, Any]]:
    found = sorted(results.glob("*/checks.json"))
    assert len(found) == 1, f"expected one result folder in {results}: {found}"
    checks: list[dict[str, Any]] = json.loads(found[0].read_text())
    return checks


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_conformance_scenario(daemon: DaemonProc, tmp_path: Path, scenario: str) -> None:
    node, conformance = node_tool("conformance")
    assert daemon.token is not None
    results = tmp_path / "results"
    async with BearerProxy(daemon.base, daemon.token) as proxy:
        code, out = await run(
            [
                str(node),
                str(conformance),
                "server",
                "--url",
                f"{proxy.url}/mcp",
                "--scenario",
                scenario,
                "-o",
                str(results),
            ],
            cwd=tmp_path,
        )
    checks = checks_of(results)
    failed = [c for c in checks if c["status"] == "FAILURE"]
    assert not failed, json.dumps(failed, indent=1)[:4000]
    assert any(c["status"] == "SUCCESS" for c in checks), out[-3000:]
    assert code == 0, out[-3000:]


async def inspector(args: list[str], cwd: Path) -> Any:
    node, launcher = node_tool("inspector")
    code, out = await run([str(node), str(launcher), "--cli", *args], cwd=cwd)
    assert code == 0, out[-3000:]
    # the answer is the last pretty-printed JSON document (a line that is just "{")
    starts = [m.start() for m in re.finditer(r"^\{$", out, flags=re.M)]
    assert starts, out[-3000:]
    answer, _ = json.JSONDecoder().raw_decode(out[starts[-1] :])
    return answer


async def test_inspector_cli_over_http(daemon: DaemonProc, tmp_path: Path) -> None:
    auth = f"Authorization: Bearer {daemon.token}"
    tools = await inspector([daemon.mcp_url, "--method", "tools/list", "--header", auth], tmp_path)
    assert len(tools["tools"]) == len(TOOL_NAMES)
    prompts = await inspector([daemon.mcp_url, "--method", "prompts/list", "--header", auth], tmp_path)
    assert {p["name"] for p in prompts["prompts"]} == {"trading_analysis", "portfolio_risk"}
    answer = await inspector(
        [
            daemon.mcp_url,
            "--method",
            "tools/call",
            "--tool-name",
            "get_indicators",
            "--tool-arg",
            "symbol=BTCUSDT",
            "--tool-arg",
            "interval=4h",
            "--tool-arg",
            'indicators=["rsi"]',
            "--header",
            auth,
        ],
        tmp_path,
    )
    assert not answer.get("isError"), answer
    payload = json.loads(answer["content"][0]["text"])
    assert payload["symbol"] == "BTCUSDT" and "rsi" in payload["indicators"]


async def test_inspector_cli_over_stdio(tmp_path: Path) -> None:
    # the Inspector waits 15 s for a stdio server by default; a daemon's start (imports, first font cache)
    # takes longer than that while four test workers share two cores
    chartgen = ["--connect-timeout", "120000", sys.executable, "-m", "daemon", "--mcp", "--log-level", "error"]
    chartgen += ["--data-dir", str(tmp_path / "d")]
    tools = await inspector([*chartgen, "--method", "tools/list"], tmp_path)
    assert len(tools["tools"]) == len(TOOL_NAMES)
    listed = await inspector([*chartgen, "--method", "tools/call", "--tool-name", "list_indicators"], tmp_path)
    assert not listed.get("isError") and "rsi" in listed["content"][0]["text"]
