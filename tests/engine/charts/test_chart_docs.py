"""fetch_chart_documentation's catalogue: generated from the registry, complete, and its examples valid."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.charts.chart_docs import KINDS, documentation, family_of, indicator_doc
from engine.indicators.registry import all_indicators, resolve
from mcp_bridge import FORMATS, MAX_INDICATORS, surface, validate

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
FAMILIES = {"Volume", "Volatility", "Momentum", "Trend", "Support/Resistance", "Sentiment", "Derivatives", None}


def test_every_registry_indicator_is_documented_with_every_parameter() -> None:
    doc = documentation(surface(5000), "indicators", NOW)
    by_name = {i["name"]: i for i in doc["indicators"]}
    assert list(by_name) == [d.name for d in all_indicators()]
    for d in all_indicators():
        entry = by_name[d.name]
        assert entry["category"] == d.kind in KINDS
        assert entry["aliases"] == list(d.aliases)
        assert entry["signals"] == list(d.signals)
        assert list(entry["inputs"]) == [p.name for p in d.params]
        for p in d.params:
            got = entry["inputs"][p.name]
            assert (got["type"], got["default"]) == (p.type, p.default)
            assert got.get("min") == p.minimum and got.get("max") == p.maximum
            assert got.get("choices", []) == list(p.choices)
            assert got["description"]


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("rsi", "Momentum"),
        ("stoch", "Momentum"),
        ("cipher_b", "Momentum"),
        ("bbands", "Volatility"),
        ("atr", "Volatility"),
        ("obv", "Volume"),
        ("volume_profile", "Volume"),
        ("supertrend", "Trend"),
        ("adx", "Trend"),
        ("pivot", "Support/Resistance"),
        ("fear_greed", "Sentiment"),
        ("funding", "Derivatives"),
    ],
)
def test_families_are_read_from_the_registry_descriptions(name: str, family: str) -> None:
    assert family_of(resolve(name)) == family


def test_every_family_is_one_of_the_documented_ones() -> None:
    assert {indicator_doc(d)["family"] for d in all_indicators()} <= FAMILIES


def test_parameters_come_from_generate_charts_schema() -> None:
    doc = documentation(surface(1234), "parameters", NOW)
    params, limits = doc["chartParameters"], doc["limits"]
    assert params["themes"] == ["dark"]
    assert params["formatOrder"] == list(FORMATS)
    assert params["bars"] == {"min": 1, "max": 1234, "default": 200}
    assert (params["width"]["min"], params["width"]["max"]) == (200, 4096)
    assert (params["height"]["min"], params["height"]["max"]) == (150, 4096)
    assert "4h" in params["intervals"]["binance"] and "1d" in params["intervals"]["yahoo"]
    assert limits["maxBars"] == 1234 and limits["maxIndicatorsPerRequest"] == MAX_INDICATORS


def test_every_example_is_a_valid_generate_chart_config() -> None:
    examples = documentation(surface(5000), "all", NOW)["examples"]
    assert len(examples) >= 5
    for example in examples:
        result = validate(example["config"], 5000)
        assert result.valid, (example, result.errors)
