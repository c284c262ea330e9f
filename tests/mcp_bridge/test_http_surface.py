"""chartgen's HTTP surface (contract §1.4) on our Streamable HTTP app."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from mcp_bridge.tools.catalog import TOOL_NAMES

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def post(
    url: str, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None
) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as s:
        data = raw if raw is not None else json.dumps(body).encode()
        base = {"Content-Type": "application/json"}
        async with s.post(url, data=data, headers={**base, **(headers or {})}) as r:
            text = await r.text()
            try:
                payload = json.loads(text) if text else None
            except ValueError:
                payload = text
            return r.status, dict(r.headers), payload


async def test_initialize_negotiates_2025_03_26_when_the_client_asks_for_it(mcp_url: str) -> None:
    status, headers, body = await post(f"{mcp_url}/mcp", INIT, {"Accept": "application/json"})
    assert status == 200
    assert body["result"]["protocolVersion"] == "2025-03-26"
    assert body["result"]["serverInfo"]["name"] == "chartgen"
    assert headers.get("mcp-session-id")


async def test_tools_list_without_accept_header_or_session_is_answered_as_json(mcp_url: str) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{mcp_url}/mcp", data=json.dumps(LIST), skip_auto_headers=["Accept", "Content-Type"]) as r:
            assert r.status == 200
            assert r.headers["content-type"].startswith("application/json")
            body = await r.json()
    names = [t["name"] for t in body["result"]["tools"]]
    assert names[:3] == ["generate_chart", "list_indicators", "get_indicators"]
    assert len(names) == len(TOOL_NAMES)


@pytest.mark.parametrize("path", ["/", "/message", "/mcp"])
async def test_post_aliases_serve_the_same_json_rpc_handler(mcp_url: str, path: str) -> None:
    status, _, body = await post(f"{mcp_url}{path}", LIST, {"Accept": "application/json"})
    assert status == 200
    assert len(body["result"]["tools"]) == len(TOOL_NAMES)


@pytest.mark.parametrize("accept", ["text/event-stream", "text/plain", "application/json;q=0"])
async def test_accept_without_json_gets_406_with_chartgens_body(mcp_url: str, accept: str) -> None:
    status, _, body = await post(f"{mcp_url}/mcp", LIST, {"Accept": accept})
    assert status == 406
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Not Acceptable: server returns application/json"},
    }


@pytest.mark.parametrize(
    "accept", ["*/*", "application/*", "application/json, text/event-stream", "application/json;q=0.9"]
)
async def test_accept_with_json_is_served(mcp_url: str, accept: str) -> None:
    status, _, _ = await post(f"{mcp_url}/mcp", LIST, {"Accept": accept})
    assert status == 200


async def test_malformed_body_gets_400_parse_error(mcp_url: str) -> None:
    status, _, body = await post(f"{mcp_url}/mcp", None, raw=b"{not json")
    assert status == 400
    assert body["error"]["code"] == -32700
    assert body["error"]["message"].startswith("Parse error")


async def test_session_id_from_initialize_is_honoured_on_later_requests(mcp_url: str) -> None:
    _, headers, _ = await post(f"{mcp_url}/mcp", INIT)
    sid = headers["mcp-session-id"]
    status, _, _ = await post(
        f"{mcp_url}/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, {"Mcp-Session-Id": sid}
    )
    assert status == 202
    status, headers2, body = await post(f"{mcp_url}/mcp", LIST, {"Mcp-Session-Id": sid})
    assert status == 200
    assert headers2.get("mcp-session-id") == sid
    assert len(body["result"]["tools"]) == len(TOOL_NAMES)


async def test_unknown_session_id_is_404_so_clients_reinitialize(mcp_url: str) -> None:
    status, _, _ = await post(f"{mcp_url}/mcp", LIST, {"Mcp-Session-Id": "deadbeef"})
    assert status == 404


async def test_health_route_reports_chartgens_document(mcp_url: str) -> None:
    async with aiohttp.ClientSession() as s, s.get(f"{mcp_url}/") as r:
        body = await r.json()
    assert body == {
        "name": "chartgen",
        "version": "0.1.0",
        "protocol": "MCP",
        "protocolVersion": "2025-03-26",
        "status": "ok",
    }


async def test_tools_call_without_session_works_like_chartgen(mcp_url: str) -> None:
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_indicators", "arguments": {}}}
    status, _, body = await post(f"{mcp_url}/mcp", call)
    assert status == 200
    payload = json.loads(body["result"]["content"][0]["text"])
    assert payload["total"] == 38


async def test_unknown_tool_is_an_is_error_result(mcp_url: str) -> None:
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}
    _, _, body = await post(f"{mcp_url}/mcp", call)
    assert body["result"]["isError"] is True
    assert body["result"]["content"][0]["text"] == "Unknown tool: nope"


@pytest.mark.parametrize(
    "params",
    [
        {"name": "list_indicators", "arguments": {}},
        {"name": "list_indicators"},
        {"name": "generate_chart", "arguments": {"bars": 30, "indicators": ["rsi"], "format": "summary"}},
        {"name": "generate_chart", "arguments": {"bars": 0}},
        {"name": "get_orders", "arguments": {}},
        {"name": "no_such_tool", "arguments": {}},
        {"name": "list_indicators", "arguments": "not an object"},
    ],
)
async def test_the_session_less_fast_path_answers_exactly_as_the_sdk(
    mcp_url: str, direct_url: str, params: dict[str, Any]
) -> None:
    """chartgen clients' bare tools/call: the daemon's direct answer equals the SDK's stateless answer."""
    body = {"jsonrpc": "2.0", "id": "r1", "method": "tools/call", "params": params}
    via_sdk = await post(f"{mcp_url}/mcp", body)
    direct = await post(f"{direct_url}/mcp", body)
    assert (direct[0], direct[2]) == (via_sdk[0], via_sdk[2])


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
async def test_the_fast_path_shapes_results_per_protocol_version_like_the_sdk(
    mcp_url: str, direct_url: str, version: str
) -> None:
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "get_orders", "arguments": {}}}
    headers = {"mcp-protocol-version": version}
    via_sdk = await post(f"{mcp_url}/mcp", body, headers)
    direct = await post(f"{direct_url}/mcp", body, headers)
    assert (direct[0], direct[2]) == (via_sdk[0], via_sdk[2])
