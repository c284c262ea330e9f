"""The log scan itself: it finds each kind of secret, and leaves ordinary log lines alone
(the scan over the whole session runs in tests/conftest.py at the end of every run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.secret_scan import scan

pytestmark = pytest.mark.slow

CLEAN = [
    '{"event": "tool_call", "tool": "get_indicators", "request_id": "5f2c0a9b7e1d4c3a", "token_name": "bench"}',
    '{"event": "oauth_token_issued", "client_id": "3b1d7f0e-58a2-4e54-9a0e-0f6f2e2a7c11"}',
    '{"event": "order_placed", "symbol": "BTCUSDT", "client_order_id": "cg-7a1e44c0b6"}',
    '{"event": "http_error", "error": "401 invalid token", "authorization": "Bearer ***"}',
]
LEAKS = [
    '{"event": "auth", "token": "cg_pat_YhEzvO8vA9-niges1icgu0-YmktK4JkZPVer7GR60V4"}',
    '{"event": "token", "access": "cg_oat_x8Qh3S0m2oKdTfPq7vVwW1yZ5aB6cD7eF8gH9iJ0kL"}',
    '{"event": "refresh", "value": "cg_ort_x8Qh3S0m2oKdTfPq7vVwW1yZ5aB6cD7eF8gH9iJ0kL"}',
    "GET /mcp authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc",
    "POST /token grant_type=authorization_code&code_verifier=Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fE",
    '{"event": "register", "client_secret": "4f1c9a0b6e2d8f7a5c3b1e9d0a8c6f4e"}',
    "X-MBX-APIKEY: sim-api-key",
    '{"event": "consent", "passphrase": "correct horse battery staple"}',
]


@pytest.mark.parametrize("line", LEAKS)
def test_each_kind_of_secret_is_found(tmp_path: Path, line: str) -> None:
    log = tmp_path / "sample.txt"  # not *.log: the session scan would find these
    log.write_text("\n".join([*CLEAN, line, *CLEAN]) + "\n")
    files, lines, findings = scan([log])
    assert (files, lines) == (1, 2 * len(CLEAN) + 1)
    assert [f.line_no for f in findings] == [len(CLEAN) + 1]


def test_ordinary_log_lines_pass(tmp_path: Path) -> None:
    log = tmp_path / "sample.txt"  # not *.log: the session scan would find these
    log.write_text("\n".join(CLEAN) + "\n")
    assert scan([log])[2] == []
