"""The typed hot-path decoder of combined-stream klines agrees with the general (orjson) decoder.

``decode_stream_kline`` must hand the sink exactly what ``decode_kline(orjson.loads(raw)["data"])``
hands it for every kline message Binance can send, and must decline (False, sink not called)
everything else, so the general path still reports it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.feed.messages import decode_kline, decode_stream_kline

INTERVALS = ["1m", "3m", "5m", "15m", "1h", "4h", "1d", "1w", "1M"]

decimal_text = st.one_of(
    st.decimals(min_value=0, max_value=Decimal("1e12"), places=8, allow_nan=False, allow_infinity=False).map(str),
    st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False).map(repr),
    st.integers(min_value=0, max_value=10**15).map(str),
    st.sampled_from(["0", "0.00000000", "1e-8", "1E+3", "123456789.12345678", "0.1", "2.675"]),
)


@st.composite
def kline_messages(draw: st.DrawFn) -> bytes:
    symbol = draw(st.from_regex(r"[A-Z0-9]{2,12}", fullmatch=True))
    k: dict[str, Any] = {
        "t": draw(st.integers(min_value=0, max_value=2**53 - 1)),
        "T": draw(st.integers(min_value=0, max_value=2**53 - 1)),
        "s": symbol,
        "i": draw(st.sampled_from(INTERVALS)),
        "f": 100,
        "L": 200,
        "o": draw(decimal_text),
        "c": draw(decimal_text),
        "h": draw(decimal_text),
        "l": draw(decimal_text),
        "v": draw(decimal_text),
        "n": draw(st.integers(min_value=0, max_value=10**9)),
        "x": draw(st.booleans()),
        "q": draw(decimal_text),
        "V": "0",
        "Q": "0",
        "B": "0",
    }
    keys = draw(st.permutations(list(k)))
    data: dict[str, Any] = {"e": "kline", "s": symbol, "k": {key: k[key] for key in keys}}
    if draw(st.booleans()):
        data["E"] = draw(st.integers(min_value=0, max_value=2**53 - 1))
    return orjson.dumps({"stream": f"{symbol.lower()}@kline_{k['i']}", "data": data})


def _collect() -> tuple[list[tuple[Any, ...]], Any]:
    got: list[tuple[Any, ...]] = []
    return got, lambda *fields: got.append(fields)


@settings(max_examples=500, deadline=None)
@given(kline_messages())
def test_the_fast_path_hands_the_sink_what_the_general_path_does(raw: bytes) -> None:
    fast, into_fast = _collect()
    general, into_general = _collect()
    assert decode_stream_kline(raw, into_fast) is True
    decode_kline(orjson.loads(raw)["data"], into_general)
    assert fast == general
    assert [type(x) for x in fast[0]] == [type(x) for x in general[0]]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"result":null,"id":1}',
        b'{"code":2,"msg":"Invalid request","id":3}',
        b'{"stream":"x","data":{"e":"serverShutdown","E":1}}',
        b'{"stream":"btcusdt@trade","data":{"e":"trade","E":1,"s":"BTCUSDT"}}',
        b'{"e":"kline","E":1,"s":"BTCUSDT","k":{"t":0,"s":"BTCUSDT","i":"1m","o":"1","h":"1","l":"1","c":"1","v":"1","x":false}}',
        b'{"stream":"x","data":{"e":"kline","E":1,"k":{"t":0,"s":"B","i":"1m","o":"abc","h":"1","l":"1","c":"1","v":"1","x":false}}}',
        b'{"stream":"x","data":{"e":"kline","E":1,"k":{"t":0,"s":"B","i":"1m","h":"1","l":"1","c":"1","v":"1","x":false}}}',
        b'{"stream":"x","data":{"e":"kline","E":1}}',
        b'{"stream":"x","data":[1,2]}',
        b"[1,2,3]",
        b"not json",
        b"",
    ],
)
def test_anything_else_is_left_to_the_general_path(raw: bytes) -> None:
    got, into = _collect()
    assert decode_stream_kline(raw, into) is False
    assert got == []
