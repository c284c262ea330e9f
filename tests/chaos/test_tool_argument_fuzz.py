"""Hypothesis fuzzing of every tool's arguments against a real ``chartgen --serve --trade --sim``.

For each tool, argument objects are drawn from its own input schema — every
property present or absent, plausible values (enum members, symbols, edge numbers, huge and
tiny quantities) mixed with any JSON value, plus keys the schema does not know — and sent as
session-less ``tools/call`` requests. Whatever the arguments: HTTP 200, a JSON-RPC result (never
an internal error), an ``isError`` answer carries a message that is not "Internal error", and
the daemon stays up. Orders go to the simulator, under the daemon's safety limits.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mcp_bridge import CATALOG
from testkit.daemon_proc import clean_env
from testkit.secret_scan import daemon_log_file
from testkit.strategies import json_scalars as shared_json_scalars
from testkit.strategies import json_values as shared_json_values

# one module-scoped daemon: the file runs on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(600), pytest.mark.xdist_group("argument_fuzz")]

TOOLS = [u.listing() for u in CATALOG]
"""Every tool the daemon lists (all groups): chartgen's, ours and the agent tools."""
AGENT_TOOLS = {t.name for t in TOOLS if t.output_schema is not None}
"""The agent tools answer errors as {tool_call_id, error: {code, message}}."""

json_scalars = shared_json_scalars(finite=True)
json_values = shared_json_values(finite=True)
symbols = st.one_of(
    st.sampled_from(["BTCUSDT", "ETHUSDT", "SOLUSDT"]),
    st.sampled_from(["btcusdt", "BTC/USDT", "NOPEUSDT", "", "AAPL", "x" * 300]),
)
intervals = st.sampled_from(["1m", "5m", "1h", "4h", "1d", "1wk", "7m", "", "1M"])
numbers = st.one_of(
    st.sampled_from([0, -1, 1e-12, 0.00001, 0.5, 1, 95000.123456789, 1e12, 1e308]),
    st.decimals(allow_nan=False, allow_infinity=False, places=8).map(str),
    st.floats(allow_nan=False, allow_infinity=False),
)
conditions = st.one_of(
    st.dictionaries(st.sampled_from(["price_above", "price_below"]), numbers, min_size=1, max_size=1),
    st.fixed_dictionaries(
        {},
        optional={
            "price_above": numbers,
            "price_below": numbers,
            "signal": st.sampled_from(["bullish_cross", "rsi_oversold", "nope", ""]),
            "indicator": st.sampled_from(["rsi", "macd", "cipher_b", "nope"]),
            "type": st.sampled_from(["price_above", "price_below", "indicator_signal", "nope"]),
            "threshold": numbers,
        },
    ),
    json_values,
)


def plausible_value(name: str, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values a client could mean for one property (some still wrong: unknown symbols, zero)."""
    plausible: st.SearchStrategy[Any]
    if "enum" in schema:
        plausible = st.sampled_from([*schema["enum"], str(schema["enum"][0]).upper(), ""])
    elif name in ("symbol", "ticker"):
        plausible = symbols
    elif name in ("interval", "timeframe"):
        plausible = intervals
    elif name == "condition":
        plausible = conditions
    elif name in ("symbols", "alert_types"):
        plausible = st.lists(st.one_of(symbols, st.sampled_from(["price_above", "indicator_signal"])), max_size=3)
    elif name in ("indicators", "panels"):
        plausible = st.lists(st.sampled_from(["rsi", "macd", "cipher_b", "bb", "nope", ""]), max_size=4)
    elif schema.get("type") in ("number", "integer"):
        plausible = numbers
    elif name == "trades":
        leg = st.fixed_dictionaries(
            {"symbol": symbols, "action": st.sampled_from(["buy", "sell", "hold"]), "quantity": numbers},
            optional={
                "price": numbers,
                "stop_price": numbers,
                "order_type": st.sampled_from(["market", "limit", "stop", "nope"]),
            },
        )
        plausible = st.lists(leg, max_size=4)
    elif name in ("config", "data", "preferences"):
        plausible = st.dictionaries(st.sampled_from(["ticker", "bars", "indicators", "theme", "x"]), json_values)
    elif name == "expires_at":
        plausible = st.sampled_from(["2030-01-01T00:00:00Z", "2000-01-01T00:00:00Z", "tomorrow", ""])
    else:
        plausible = st.text(max_size=40)
    return plausible


def arguments_for(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Near-valid objects (required keys present, plausible values) and hostile ones (any key
    present or not, any JSON value, unknown keys)."""
    properties: dict[str, Any] = schema.get("properties", {})
    # chartgen's schemas mark few keys required; a near-valid call has what the tool needs
    required = set(schema.get("required", [])) | ({"symbol", "side", "quantity", "condition"} & set(properties))
    near_valid = st.fixed_dictionaries(
        {k: plausible_value(k, v) for k, v in properties.items() if k in required},
        optional={k: plausible_value(k, v) for k, v in properties.items() if k not in required},
    )
    known = st.fixed_dictionaries(
        {}, optional={k: st.one_of(plausible_value(k, v), json_values) for k, v in properties.items()}
    )
    extra = st.dictionaries(st.text(max_size=10), json_values, max_size=2)
    hostile = st.builds(lambda a, b: {**b, **a}, known, extra)
    return st.one_of(near_valid, hostile)


VALID_CALLS = [
    ("place_order", {"symbol": "BTCUSDT", "side": "buy", "type": "market", "quantity": 0.001}),
    ("place_order", {"symbol": "ETHUSDT", "side": "buy", "type": "limit", "quantity": 0.1, "price": 1000}),
    ("set_alert", {"symbol": "BTCUSDT", "condition": {"price_above": 1e9}}),
    ("subscribe_notifications", {"symbols": ["BTCUSDT"]}),
    ("get_orders", {"filter": "all"}),
]

calls = st.one_of(
    [st.tuples(st.just(tool.name), arguments_for(tool.input_schema)) for tool in TOOLS]  # type: ignore[arg-type]
)


class Daemon:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, token: str) -> None:
        self.proc, self.url, self.token = proc, url, token
        self.http = httpx2.Client(timeout=60)
        self.ids = itertools.count(1)

    def call(self, name: str, arguments: Any) -> httpx2.Response:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": "tools/call"}
        body["params"] = {"name": name, "arguments": arguments}
        return self.http.post(
            self.url,
            json=body,
            headers={"authorization": f"Bearer {self.token}", "accept": "application/json, text/event-stream"},
        )


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    import re

    data = tmp_path_factory.mktemp("fuzz")
    with daemon_log_file("fuzz") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "--serve", "--trade", "--sim", "--port", "0", "--data-dir", str(data)],
            env=clean_env({"CHARTGEN_TRADING_MAX_ORDER_NOTIONAL": "1000000"}),
            stdout=subprocess.PIPE,
            stderr=log,
        )
    assert proc.stdout is not None
    url = token = ""
    for _ in range(30):
        line = proc.stdout.readline().decode()
        if m := re.match(r"MCP server listening on (\S+)", line):
            url = m.group(1)
        if m := re.match(r"Demo bearer token \(this run only\): (\S+)", line):
            token = m.group(1)
        if url and token:
            break
    assert url and token, "the daemon did not start"
    d = Daemon(proc, url, token)
    try:
        yield d
    finally:
        d.http.close()
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        proc.stdout.close()


@pytest.mark.parametrize("call", VALID_CALLS, ids=[c[0] for c in VALID_CALLS])
def test_the_well_formed_calls_among_the_examples_succeed(daemon: Daemon, call: tuple[str, dict[str, Any]]) -> None:
    """The fuzz's explicit examples are real successes, so the happy path is part of the run."""
    answer = daemon.call(*call).json()
    assert not answer["result"].get("isError"), answer


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(call=calls)
@example(call=VALID_CALLS[0])
@example(call=VALID_CALLS[1])
@example(call=VALID_CALLS[2])
@example(call=VALID_CALLS[3])
@example(call=VALID_CALLS[4])
def test_no_tool_argument_object_causes_an_internal_error(daemon: Daemon, call: tuple[str, dict[str, Any]]) -> None:
    name, arguments = call
    r = daemon.call(name, arguments)
    assert r.status_code == 200, (name, arguments, r.status_code, r.text[:500])
    answer = r.json()
    assert "result" in answer, (name, arguments, answer)
    result = answer["result"]
    if result.get("isError"):
        text = result["content"][0]["text"]
        assert text and "Internal error" not in text, (name, arguments, text)
        if name in AGENT_TOOLS:
            body = json.loads(text)
            assert body["tool_call_id"] and body["error"]["code"] != "INTERNAL_ERROR", (name, arguments, body)
    elif name in AGENT_TOOLS:
        assert result["structuredContent"]["data"]["source_refs"][0] == result["structuredContent"]["tool_call_id"]
    assert daemon.proc.poll() is None


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from([t.name for t in TOOLS]), arguments=json_values)
def test_arguments_that_are_not_an_object_are_refused_clearly(daemon: Daemon, name: str, arguments: Any) -> None:
    r = daemon.call(name, arguments)
    assert r.status_code == 200, r.text[:500]
    answer = r.json()
    if "error" in answer:
        assert answer["error"]["code"] != -32603 and answer["error"]["message"], answer
    else:
        result = answer["result"]
        if result.get("isError"):
            assert "Internal error" not in result["content"][0]["text"], result
    assert daemon.proc.poll() is None
