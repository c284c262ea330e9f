"""The 12 agent tools' error results are valid for every client: an invalid-argument call on each,
through the official SDK client over HTTP, is an isError result whose text carries the message,
and its structuredContent conforms to the tool's own published outputSchema (jsonschema, and the
SDK's own validator — the check the MCP Inspector and the TypeScript SDK make on error results
too, which showed "data must have required property 'data'" instead of the message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mcp_bridge.tools.catalog import CATALOG
from testkit.daemon_proc import create_token, mcp_client, running_daemon

pytestmark = pytest.mark.timeout(180)

AGENT_TOOLS = [u.name for u in CATALOG if u.listing().output_schema is not None]


def test_there_are_twelve_and_each_schema_is_a_valid_object_schema() -> None:
    assert len(AGENT_TOOLS) == 12
    for unit in CATALOG:
        schema = unit.listing().output_schema
        if schema is None:
            continue
        assert schema["type"] == "object"  # what the Inspector's and the SDKs' Tool types require
        jsonschema.Draft202012Validator.check_schema(schema)
        answer = {"tool_call_id": "x", "data": {"source_refs": ["x"]}}
        error = {"tool_call_id": "x", "error": {"code": "INVALID_ARGUMENT", "message": "m"}}
        validator = jsonschema.Draft202012Validator(schema)
        assert validator.is_valid(error), unit.name
        assert not validator.is_valid({**error, "data": answer["data"]}), unit.name  # one of the two, not both
        assert not validator.is_valid({"tool_call_id": "x"}), unit.name


@pytest.mark.process
async def test_an_invalid_argument_on_each_agent_tool_is_a_valid_error_result(tmp_path: Path) -> None:
    token = await create_token(tmp_path, "agent", "charts,alerts,trade")
    async with running_daemon(["--serve"], data_dir=tmp_path) as daemon:
        async with mcp_client(daemon.mcp_url, token) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            for name in AGENT_TOOLS:
                schema: dict[str, Any] = listed[name].output_schema
                result = await client.call_tool(name, {"bogus_argument": 1, "tool_call_id": f"bad_{name}"})
                assert result.is_error, (name, result.content[0].text)
                text = result.content[0].text
                assert "bogus_argument" in text and "does not take this argument" in text, (name, text)
                body = result.structured_content
                assert body is not None and json.loads(text) == body
                assert body["tool_call_id"] == f"bad_{name}" and body["error"]["code"] == "INVALID_ARGUMENT"
                jsonschema.validate(body, schema)
                await client.session.validate_tool_result(name, result)  # the SDK skips it on errors; it passes
