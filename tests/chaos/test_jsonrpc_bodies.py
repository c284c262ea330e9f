"""Hostile HTTP bodies against a running ``chartgen --serve``: never a 5xx, always a clear error, still alive.

Malformed JSON, arbitrary JSON values, JSON-RPC envelopes with wrong types, 5 MB bodies,
deep nesting and batches, with and without a valid bearer token.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.daemon_proc import clean_env
from testkit.secret_scan import daemon_log_file

# one module-scoped daemon, and the last test checks it survived every earlier one: the file runs on
# one xdist worker, in order
pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.xdist_group("jsonrpc_bodies")]

ALLOWED = {200, 202, 400, 401, 404, 406, 413, 429}


class Daemon:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, token: str) -> None:
        self.proc, self.url, self.token = proc, url, token
        self.http = httpx2.Client(timeout=30)

    def post(self, content: bytes, *, auth: bool = True, **headers: str) -> httpx2.Response:
        h = {"content-type": "application/json", **headers}
        if auth:
            h["authorization"] = f"Bearer {self.token}"
        return self.http.post(self.url, content=content, headers=h)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    data = tmp_path_factory.mktemp("chaos")
    token = (
        subprocess.run(
            [sys.executable, "-m", "daemon", "token", "--data-dir", str(data), "create", "chaos"],
            env=clean_env(),
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    with daemon_log_file("chaos") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "--serve", "--port", "0", "--data-dir", str(data)],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=log,
        )
    assert proc.stdout is not None
    url = ""
    for _ in range(20):
        line = proc.stdout.readline().decode()
        if m := re.match(r"MCP server listening on (\S+)", line):
            url = m.group(1)
            break
    assert url, "the daemon did not start"
    d = Daemon(proc, url, token)
    try:
        yield d
    finally:
        d.http.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        proc.stdout.close()


def check(resp: httpx2.Response) -> None:
    assert resp.status_code in ALLOWED, (resp.status_code, resp.text[:300])
    if resp.status_code >= 400 and resp.content:
        body = resp.json() if "json" in resp.headers.get("content-type", "") else None
        if isinstance(body, dict) and "error" in body:
            assert body["error"].get("message"), body


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30))
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=10), c, max_size=5),
    max_leaves=20,
)
methods = st.sampled_from(
    ["tools/call", "tools/list", "initialize", "ping", "prompts/list", "resources/list", "nope", "", "notifications/x"]
)
envelopes = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0", 2, None]), "method": st.one_of(methods, json_scalars)},
    optional={
        "id": st.one_of(st.integers(), st.text(max_size=10), st.none(), st.booleans(), st.lists(st.integers())),
        "params": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {"name": st.sampled_from(["list_indicators", "generate_chart", "set_alert", "place_order", "x"])},
                optional={"arguments": json_values},
            ),
        ),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(json_values, envelopes, st.lists(envelopes, max_size=4)), auth=st.booleans())
def test_any_json_body_gets_a_clear_answer(daemon: Daemon, body: Any, auth: bool) -> None:
    check(daemon.post(json.dumps(body).encode(), auth=auth))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_bytes_that_are_not_json_get_a_parse_error(daemon: Daemon, raw: bytes) -> None:
    resp = daemon.post(raw)
    check(resp)
    try:
        json.loads(raw)
    except ValueError:
        assert resp.status_code == 400 and resp.json()["error"]["code"] == -32700


def test_huge_deep_and_batched_bodies(daemon: Daemon) -> None:
    five_mb = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "set_alert", "arguments": {"symbol": "B" * (5 * 1024 * 1024), "condition": {}}},
    }
    check(daemon.post(json.dumps(five_mb).encode()))
    check(daemon.post(b"[" * 200_000 + b"]" * 200_000))
    check(daemon.post(b'{"a":' * 50_000 + b"1" + b"}" * 50_000))
    check(daemon.post(b"x" * (20 * 1024 * 1024)))  # over the body limit
    batch = [{"jsonrpc": "2.0", "id": i, "method": "tools/list"} for i in range(50)]
    check(daemon.post(json.dumps(batch).encode()))
    ok = daemon.post(
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "list_indicators"}}).encode()
    )
    assert ok.status_code == 200 and "indicators" in ok.json()["result"]["content"][0]["text"]
    assert daemon.proc.poll() is None, "the daemon died"


def test_the_daemon_survived_everything(daemon: Daemon) -> None:
    resp = daemon.http.get(daemon.url.removesuffix("/mcp") + "/healthz")
    assert resp.status_code == 200 and daemon.proc.poll() is None
