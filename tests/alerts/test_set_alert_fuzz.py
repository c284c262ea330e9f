"""Bad set_alert arguments (hypothesis): a clear isError naming the field, no crash, nothing stored."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.evaluator import AlertEvaluator
from alerts.push import PushHub
from alerts.service import AlertService
from alerts.store import AlertStore
from daemon import ALL_MIGRATIONS
from mcp_bridge import Services, ToolRouter
from storage import Database
from testkit.null_market import NullMarket


async def _listed(symbol: str) -> str | None:
    return None if symbol in ("BTCUSDT", "ETHUSDT") else f"symbol {symbol!r} is not listed on the exchange"


@pytest.fixture
async def stack() -> AsyncIterator[tuple[ToolRouter, AlertStore]]:
    db = await Database.open(":memory:")
    await db.migrate(ALL_MIGRATIONS)
    store = AlertStore(db)
    hub = PushHub()
    evaluator = AlertEvaluator(store, NullMarket(), hub)
    service = AlertService(store, evaluator, hub, default_interval="4h", check_symbol=_listed)
    router = ToolRouter(Services(charts=None, alerts=service, push=hub, engine=object()))  # type: ignore[arg-type]
    try:
        yield router, store
    finally:
        await db.close()


FIELDS = (
    "symbol",
    "condition",
    "price_above",
    "price_below",
    "indicator",
    "signal",
    "interval",
    "trigger",
    "expires_at",
    "note",
    "params",
    "unknown argument",
    "indicator_signal",
    "listed",
    "emits no signals",
)

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.just("Z" * 10_000),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
bad_number = st.one_of(
    st.just(math.nan),
    st.just(math.inf),
    st.just(-math.inf),
    st.just(0),
    st.just(-5.0),
    st.just(1e300),
    st.just(True),
    st.just("abc"),
    st.just(None),
    st.lists(st.integers(), max_size=2),
)
bad_condition = st.one_of(
    junk,
    st.fixed_dictionaries({"price_above": bad_number}),
    st.fixed_dictionaries({"price_below": bad_number}),
    st.fixed_dictionaries(
        {
            "indicator_signal": st.fixed_dictionaries(
                {
                    "indicator": st.sampled_from(["cipher_b", "rsi", "nope", ""]),
                    "signal": st.sampled_from(["green_dot", "flip_up", "", "x" * 10_000]),
                }
            )
        }
    ),
    st.dictionaries(
        st.sampled_from(["price_above", "price_below", "indicator_signal", "other"]), junk, min_size=2, max_size=3
    ),
)
bad_args = st.one_of(
    st.fixed_dictionaries({"symbol": st.sampled_from(["BTCUSDT"]), "condition": bad_condition}),
    st.fixed_dictionaries({"symbol": junk, "condition": st.just({"price_above": 70000})}),
    st.fixed_dictionaries(
        {"symbol": st.just("BTCUSDT"), "condition": st.just({"price_above": 70000})},
        optional={
            "interval": junk,
            "trigger": junk,
            "expires_at": junk,
            "note": st.one_of(st.text(min_size=501, max_size=600), st.just("n" * 10_000)),
            "params": junk,
            "bogus": junk,
        },
    ).filter(lambda d: len(d) > 2),
)


def _in_30_days() -> str:
    return datetime.fromtimestamp(time.time() + 30 * 86400, UTC).isoformat()


def _is_valid(args: dict[str, Any]) -> bool:
    """The rare generated dict that is in fact a valid request (e.g. trigger='touch')."""
    extra = {k: v for k, v in args.items() if k not in ("symbol", "condition")}
    optional_ok = all(
        (k in ("interval", "expires_at", "note") and v is None) or (k == "trigger" and v in ("touch", "close"))
        for k, v in extra.items()
    )
    return args.get("symbol") == "BTCUSDT" and args.get("condition") == {"price_above": 70000} and optional_ok


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=bad_args)
async def test_bad_set_alert_arguments_get_a_clear_error_and_store_nothing(
    stack: tuple[ToolRouter, AlertStore], args: dict[str, Any]
) -> None:
    """Every malformed request → isError whose text names a field; the store stays empty."""
    router, store = stack
    if _is_valid(args):
        return
    result = await router.call("set_alert", args, "fuzz")
    text = result.content[0].text
    assert result.is_error, f"accepted {args!r}"
    assert "Internal error" not in text, text
    assert any(word in text for word in FIELDS), text
    assert len(text) < 2000
    assert await store.count_of("fuzz") == 0


async def test_valid_requests_are_stored(stack: tuple[ToolRouter, AlertStore]) -> None:
    """The validator is not simply refusing everything: good requests of each kind are stored."""
    router, store = stack
    good = [
        {"symbol": "btcusdt", "condition": {"price_above": "70000.5"}, "trigger": "close", "interval": "1h"},
        {"symbol": "ETHUSDT", "condition": {"price_below": 3000}, "note": "buy the dip", "expires_at": _in_30_days()},
        {"symbol": "BTCUSDT", "condition": {"indicator_signal": {"indicator": "cb", "signal": "gold_buy"}}},
        {
            "symbol": "BTCUSDT",
            "condition": {
                "indicator_signal": {
                    "indicator": "rsi_mfi_stoch",
                    "signal": "stoch_oversold",
                    "params": {"rsi_length": 10},
                }
            },
        },
    ]
    for args in good:
        result = await router.call("set_alert", args, "fuzz")
        assert not result.is_error, result.content[0].text
    assert await store.count_of("fuzz") == len(good)
