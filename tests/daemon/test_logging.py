"""The daemon's log format: JSON lines, and tracebacks that carry no local variables (they
hold signed queries, API keys and tokens — found by the suite's log scan)."""

from __future__ import annotations

import io
import json
import logging

import structlog

from daemon.logging import configure_logging


def test_json_tracebacks_carry_no_local_variables() -> None:
    out = io.StringIO()
    try:
        configure_logging("info", "json", stream=out)
        log = structlog.get_logger("test")

        def send(api_key: str) -> None:
            params = {"apiKey": api_key, "signature": "f" * 64}
            raise RuntimeError(f"request failed ({len(params)} params)")

        try:
            send("a-secret-api-key-value")
        except RuntimeError:
            log.exception("request_failed")
        line = json.loads(out.getvalue().strip().splitlines()[-1])
        assert line["event"] == "request_failed" and line["level"] == "error"
        frames = line["exception"][0]["frames"]
        assert frames and all("locals" not in f or not f["locals"] for f in frames)
        assert "a-secret-api-key-value" not in out.getvalue()
    finally:
        logging.getLogger().handlers.clear()
        structlog.reset_defaults()
