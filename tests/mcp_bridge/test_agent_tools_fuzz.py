"""Property test: argument objects drawn from each agent tool's own input schema (plus hostile
values and unknown keys) never give an internal error, and every answer — result or error —
carries the tool_call_id. In process, without market data or an order service (those tools then
answer NOT_AVAILABLE after their arguments are read); the daemon-level fuzz over HTTP is
tests/chaos/test_tool_argument_fuzz.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import ChartService, InlineRenderer
from mcp_bridge.scopes import ALL_SCOPES
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import Services
from mcp_bridge.tools.catalog import CATALOG
from testkit.strategies import json_values as shared_json_values

ROUTER = ToolRouter(Services(charts=ChartService(None, InlineRenderer()), max_bars=300))
AGENT = [u.listing() for u in CATALOG if u.listing().output_schema is not None]
json_values = shared_json_values(finite=True)


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return root.get("$defs", {}).get(ref.split("/")[-1], {})
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key, []) if o.get("type") != "null"]
        if options:
            return _resolve(options[0], root)
    return schema


def value_for(schema: dict[str, Any], root: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """A value that fits ``schema`` most of the time, anything JSON otherwise."""
    s = _resolve(schema, root)
    fitting: st.SearchStrategy[Any]
    if "enum" in s:
        fitting = st.sampled_from(s["enum"])
    elif s.get("type") == "string":
        fitting = st.one_of(st.sampled_from(["BTCUSDT", "AAPL", "1y", "1d", "BINANCE", "rsi and macd"]), st.text())
    elif s.get("type") in ("number", "integer"):
        fitting = st.one_of(st.integers(-5, 10_000), st.floats(allow_nan=False, allow_infinity=False))
    elif s.get("type") == "boolean":
        fitting = st.booleans()
    elif s.get("type") == "array" and depth < 3:
        fitting = st.lists(value_for(s.get("items", {}), root, depth + 1), max_size=4)
    elif s.get("type") == "object" and depth < 3 and s.get("properties"):
        props = s["properties"]
        fitting = st.fixed_dictionaries(
            {k: value_for(v, root, depth + 1) for k, v in props.items() if k in s.get("required", [])},
            optional={k: value_for(v, root, depth + 1) for k, v in props.items() if k not in s.get("required", [])},
        )
    else:
        fitting = json_values
    return st.one_of(fitting, fitting, json_values)


def arguments_for(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props = schema.get("properties", {})
    known = st.fixed_dictionaries(
        {k: value_for(v, schema) for k, v in props.items() if k in schema.get("required", [])},
        optional={k: value_for(v, schema) for k, v in props.items() if k not in schema.get("required", [])},
    )
    extra = st.dictionaries(st.sampled_from(["x", "symbol", "trades", "Tool_Call_Id"]), json_values, max_size=1)
    return st.one_of(known, known, st.builds(lambda a, b: {**b, **a}, known, extra))


calls = st.one_of([st.tuples(st.just(t.name), arguments_for(t.input_schema)) for t in AGENT])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(call=calls)
def test_no_agent_tool_argument_object_causes_an_internal_error(call: tuple[str, dict[str, Any]]) -> None:
    name, arguments = call
    result = asyncio.run(ROUTER.call(name, arguments, principal="fuzz", scopes=ALL_SCOPES))
    body = json.loads(result.content[0].text)
    assert body == result.structured_content, name
    assert isinstance(body["tool_call_id"], str) and body["tool_call_id"], (name, arguments, body)
    if result.is_error:
        assert body["error"]["code"] != "INTERNAL_ERROR", (name, arguments, body)
        assert body["error"]["message"], (name, arguments, body)
    else:
        assert body["data"]["source_refs"][0] == body["tool_call_id"], (name, arguments, body)
