"""What each channel sends: the signed webhook body, Telegram's plain text, ntfy's headers."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.channels.messages import signature, text, verify_signature
from alerts.channels.requests import build
from config import NtfyChannel, TelegramChannel, WebhookChannel

NOW = 1_800_000_000


def frame(condition: dict[str, Any], **params: Any) -> dict[str, Any]:
    body = {
        "alert_id": "a-1",
        "symbol": "BTCUSDT",
        "interval": "1h",
        "condition": condition,
        "value": 70123.5,
        "triggered_at": "2027-01-15T08:30:05+00:00",
        "bar_time": "2027-01-15T08:00:00+00:00",
        "note": None,
    }
    return {"jsonrpc": "2.0", "method": "notifications/alert_triggered", "params": body | params}


def test_the_webhook_body_is_the_frame_signed_with_a_timestamp() -> None:
    payload = orjson.dumps(frame({"type": "price_above", "threshold": 70000.0})).decode()
    hook = WebhookChannel(kind="webhook", url="https://h.example/x", secret="s3cret")
    req = build(hook, "a-1", payload, NOW)
    assert req.body == payload.encode()
    assert req.headers["Idempotency-Key"] == "a-1"
    header = req.headers["X-Chartgen-Signature"]
    assert header == signature("s3cret", NOW, req.body) and header.startswith(f"t={NOW},v1=")
    assert verify_signature("s3cret", header, req.body, NOW + 10)
    assert not verify_signature("s3cret", header, req.body + b" ", NOW)  # tampered body
    assert not verify_signature("other", header, req.body, NOW)  # wrong secret
    assert not verify_signature("s3cret", header, req.body, NOW + 301)  # replayed too late
    assert not verify_signature("s3cret", "garbage", req.body, NOW)


def test_telegram_text_is_short_and_readable() -> None:
    f = frame({"type": "price_below", "threshold": 60000.0}, note="buy the dip")
    f["params"]["action"] = {"type": "place_order", "order_id": "cg-a-1", "status": "Filled",
                             "filled_quantity": "0.01", "fill_price": 59990.5}  # fmt: skip
    tg = TelegramChannel(kind="telegram", bot_token="1:tok", chat_id="42")
    req = build(tg, "a-1", orjson.dumps(f).decode(), NOW)
    assert req.url == "https://api.telegram.org/bot1:tok/sendMessage"
    sent = orjson.loads(req.body)
    assert sent["chat_id"] == "42" and "parse_mode" not in sent
    assert sent["text"].splitlines() == [
        "BTCUSDT 1h: price below 60,000",
        "value 70,123.5 at 2027-01-15 08:30:05 UTC",
        "note: buy the dip",
        "Order Filled 0.01 @ 59,990.5 (id cg-a-1)",
        "id: a-1",
    ]


def test_indicator_and_refused_action_wording() -> None:
    f = frame({"type": "indicator_signal", "indicator": "rsi", "signal": "Oversold"})
    f["params"]["action"] = {"type": "place_order", "order_id": None, "status": "Refused", "reason": "halted"}
    lines = text(f).splitlines()
    assert lines[0] == "BTCUSDT 1h: rsi signal Oversold" and "Order refused: halted" in lines


def test_ntfy_sets_title_priority_tags_and_token() -> None:
    topic = NtfyChannel(kind="ntfy", url="https://ntfy.sh/t", token="tk_1", priority=5)
    req = build(topic, "a-1", orjson.dumps(frame({"type": "price_above", "threshold": 1.5})).decode(), NOW)
    assert req.headers["Title"] == "BTCUSDT price above 1.5"
    assert req.headers["Priority"] == "5" and req.headers["Tags"] == "chart_with_upwards_trend"
    assert req.headers["Authorization"] == "Bearer tk_1"
    assert req.body.decode().endswith("id: a-1")


@settings(max_examples=200, deadline=None)
@given(
    symbol=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=1, max_size=20),
    value=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(10**15), 10**15), st.none()),
    note=st.one_of(st.none(), st.text(max_size=200)),
    kind=st.sampled_from(["price_above", "price_below", "indicator_signal", "odd"]),
    action=st.one_of(st.none(), st.dictionaries(st.sampled_from(["status", "reason", "order_id", "fill_price"]),
                                                 st.one_of(st.none(), st.text(max_size=10), st.floats()))),
)  # fmt: skip
def test_any_frame_formats_without_error_and_names_its_symbol(
    symbol: str, value: Any, note: str | None, kind: str, action: dict[str, Any] | None
) -> None:
    f = frame(
        {"type": kind, "threshold": value, "indicator": "x", "signal": "y"}, symbol=symbol, value=value, note=note
    )
    if action is not None:
        f["params"]["action"] = action
    for channel in (
        TelegramChannel(kind="telegram", bot_token="1:t", chat_id="1"),
        NtfyChannel(kind="ntfy", url="https://ntfy.sh/t"),
    ):
        req = build(channel, "a-1", orjson.dumps(f).decode(), NOW)
        body = orjson.loads(req.body)["text"] if isinstance(channel, TelegramChannel) else req.body.decode()
        assert symbol in body


def test_the_readmes_verification_example_accepts_our_signature() -> None:
    """The 10-line receiver-side check in docs/channels.md verifies what the sender signs (and nothing else)."""
    import re
    import time
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "channels.md").read_text()
    code = re.search(r"```python\n(import hashlib, hmac, time\n.*?)```", readme, re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(code.group(1), namespace)  # the documentation's own example
    body = b'{"jsonrpc":"2.0"}'
    header = signature("s3cret", int(time.time()), body)
    assert namespace["verify"]("s3cret", header, body)
    assert not namespace["verify"]("s3cret", header, body + b" ")
    assert not namespace["verify"]("s3cret", signature("s3cret", int(time.time()) - 3600, body), body)
