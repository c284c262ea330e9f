"""Property tests: no argument object makes a charting tool fail with an internal error."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import ChartService, InlineRenderer
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import Services
from testkit.strategies import json_scalars as shared_json_scalars
from testkit.strategies import json_values as shared_json_values

ROUTER = ToolRouter(Services(charts=ChartService(None, InlineRenderer()), max_bars=300))

json_scalars = shared_json_scalars(finite=False)
json_values = shared_json_values(finite=False)
indicator_items = st.one_of(
    st.sampled_from(["rsi", "macd", "bb", "cipher_b", "supertrend", "vp", "nope", ""]),
    st.fixed_dictionaries(
        {"name": st.sampled_from(["rsi", "macd", "bbands", "stoch", "volume_profile", "session_vp"])},
        optional={
            "length": json_scalars,
            "period": json_scalars,
            "fast": json_scalars,
            "bins": json_scalars,
            "session": json_scalars,
            "std_dev": json_scalars,
            "bogus": json_scalars,
        },
    ),
    json_values,
)
chart_args = st.fixed_dictionaries(
    {"format": st.sampled_from(["summary", "series", "SUMMARY", "pdf"])},
    optional={
        "indicators": st.one_of(st.lists(indicator_items, max_size=4), json_values),
        "panels": st.lists(indicator_items, max_size=3),
        "bars": st.one_of(st.integers(min_value=-10, max_value=400), json_scalars),
        "width": json_scalars,
        "height": json_scalars,
        "timeframe": st.one_of(st.sampled_from(["1h", "4h", "1wk"]), json_scalars),
        "all_signals": json_scalars,
        "source": json_scalars,
    },
)


def _call(name: str, args: dict[str, Any]) -> Any:
    return asyncio.run(ROUTER.call(name, args))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chart_args)
def test_generate_chart_answers_every_argument_object_without_internal_errors(args: dict[str, Any]) -> None:
    result = _call("generate_chart", args)
    text = result.content[-1].text if result.content and result.content[-1].type == "text" else ""
    assert "Internal error" not in text
    if result.is_error:
        assert 0 < len(text) < 400


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["symbol", "ticker", "indicators", "interval", "bars"]), json_values, max_size=5)
)
def test_get_indicators_rejects_bad_arguments_with_a_clear_message(args: dict[str, Any]) -> None:
    # No market data source is configured, so anything that passes validation fails to fetch.
    result = _call("get_indicators", args)
    assert result.is_error
    text = result.content[0].text
    assert "Internal error" not in text or "no market data source" in text
