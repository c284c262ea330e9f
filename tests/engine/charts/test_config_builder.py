"""construct_chart_config's reader: a table of phrasings with the configs expected, the rules behind
them (ranges → interval and bars, sizes, formats, themes, parameters), and that every answer is a
config generate_chart's own parser accepts and the renderer draws (simulator data, inline renderer)."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pytest
from PIL import Image

from engine.charts.config_builder import DEFAULT_BARS, DEFAULT_INTERVAL, DEFAULT_SIZE, UnknownAsset, build
from engine.charts.config_vocabulary import EMA_STACK_LENGTHS, EXAMPLE_PHRASES, INDICATOR_CAPS, INDICATOR_PHRASES
from engine.charts.service import ChartService
from engine.indicators.registry import lookup, resolve
from mcp_bridge import chart_request, parse_chart, validate, wire

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
W, H = DEFAULT_SIZE


def cfg(
    ticker: str,
    timeframe: str,
    bars: int,
    *,
    ind: list[Any] | None = None,
    fmt: str = "png",
    size: tuple[int, int] | None = (W, H),
    source: str | None = None,
) -> dict[str, Any]:
    """The config construct_chart_config answers (keys in its order)."""
    out: dict[str, Any] = {"ticker": ticker, "timeframe": timeframe, "bars": bars}
    if ind is not None:
        out["indicators"] = ind
    if size is not None:
        out["width"], out["height"] = size
    out["format"] = fmt
    if source is not None:
        out["source"] = source
    return out


TABLE: list[tuple[str, dict[str, Any]]] = [
    ("Show Bitcoin with Bollinger Bands and RSI for the last 7 days", cfg("BTCUSDT", "1h", 168, ind=["bbands", "rsi"])),
    ("BTC past week", cfg("BTCUSDT", "1h", 168)),
    ("ethereum last month with macd", cfg("ETHUSDT", "4h", 180, ind=["macd"])),
    ("ETH today", cfg("ETHUSDT", "1h", 24)),
    ("Solana 30 days", cfg("SOLUSDT", "4h", 180)),
    ("sol/usdt last 3 months with cipher b", cfg("SOLUSDT", "4h", 540, ind=["cipher_b"])),
    ("ETHBTC daily for the last year", cfg("ETHBTC", "1d", 365)),
    ("BNB 4h chart with stochastic", cfg("BNBUSDT", "4h", 200, ind=["stoch"])),
    ("XRP ytd", cfg("XRPUSDT", "1d", 327)),
    ("Cardano past 2 weeks with ichimoku", cfg("ADAUSDT", "4h", 84, ind=["ichimoku"])),
    ("dogecoin last 4 hours with vwap", cfg("DOGEUSDT", "5m", 48, ind=["vwap"])),
    ("Polkadot DOT last 12 hours", cfg("DOTUSDT", "15m", 48)),
    ("Apple daily with RSI 21", cfg("AAPL", "1d", 200, ind=[{"name": "rsi", "length": 21}])),
    ("AAPL last 3 months", cfg("AAPL", "4h", 128)),
    (
        "Tesla past week with macd 12 26 9",
        cfg("TSLA", "1h", 35, ind=[{"name": "macd", "fast": 12, "slow": 26, "signal": 9}]),
    ),
    ("Microsoft last year weekly", cfg("MSFT", "1w", 53)),
    (
        "nvidia 6 months with bollinger 20 2",
        cfg("NVDA", "1d", 129, ind=[{"name": "bbands", "period": 20, "std_dev": 2.0}]),
    ),
    ("S&P 500 last 5 years", cfg("^GSPC", "1w", 261)),
    ("nasdaq past month", cfg("^IXIC", "4h", 42)),
    ("EUR/USD last 7 days", cfg("EURUSD=X", "1h", 120)),
    ("gold 1 year", cfg("GC=F", "1d", 261)),
    ("BTC with RSI 21", cfg("BTCUSDT", "4h", 200, ind=[{"name": "rsi", "length": 21}])),
    ("ETH with EMA 50 and 200", cfg("ETHUSDT", "4h", 200, ind=["ema_stack"])),
    ("bitcoin with moving average", cfg("BTCUSDT", "4h", 200, ind=["ema_stack"])),
    ("btc with sma", cfg("BTCUSDT", "4h", 200, ind=["ema_stack"])),
    ("eth with obv and cvd and money flow index", cfg("ETHUSDT", "4h", 200, ind=["obv", "cvd", "mfi"])),
    ("sol with supertrend and parabolic sar", cfg("SOLUSDT", "4h", 200, ind=["supertrend", "sar"])),
    ("bnb with volume profile and tpo", cfg("BNBUSDT", "4h", 200, ind=["volume_profile", "tpo"])),
    ("btc with fear and greed and funding rate", cfg("BTCUSDT", "4h", 200, ind=["fear_greed", "funding"])),
    ("eth with williams %r and cci 20", cfg("ETHUSDT", "4h", 200, ind=["williams_r", {"name": "cci", "period": 20}])),
    ("btc 1200x675", cfg("BTCUSDT", "4h", 200, size=(1200, 675))),
    ("eth in 4k", cfg("ETHUSDT", "4h", 200, size=(3840, 2160))),
    ("btc square chart", cfg("BTCUSDT", "4h", 200, size=(1080, 1080))),
    ("sol for mobile", cfg("SOLUSDT", "4h", 200, size=(1080, 1920))),
    ("btc summary", cfg("BTCUSDT", "4h", 200, fmt="summary", size=None)),
    ("eth data only", cfg("ETHUSDT", "4h", 200, fmt="summary", size=None)),
    ("bitcoin json", cfg("BTCUSDT", "4h", 200, fmt="summary", size=None)),
    ("btc image and summary", cfg("BTCUSDT", "4h", 200, fmt="both")),
    ("btc in dark mode", cfg("BTCUSDT", "4h", 200)),
    ("ethereum light theme", cfg("ETHUSDT", "4h", 200)),
    ("btc 500 bars 1h", cfg("BTCUSDT", "1h", 500)),
    ("BTC/USD last week", cfg("BTCUSDT", "1h", 168)),
    ("200-day moving average on tesla", cfg("TSLA", "4h", 200, ind=["ema_stack"])),
    ("Bitcoin and Ethereum last week", cfg("BTCUSDT", "1h", 168)),
    ("heikin ashi on btc 15m", cfg("BTCUSDT", "15m", 200, ind=["heikin_ashi"])),
    ("Show BTC with MACD on the 1 hour chart for the last 3 days", cfg("BTCUSDT", "1h", 72, ind=["macd"])),
    ("BTC 4 hour candles last 2 months with EMA ribbon", cfg("BTCUSDT", "4h", 360, ind=["ema_stack"])),
    (
        "Plot Apple with RSI(14) and MACD(12,26,9)",
        cfg(
            "AAPL",
            "4h",
            200,
            ind=[{"name": "rsi", "length": 14}, {"name": "macd", "fast": 12, "slow": 26, "signal": 9}],
        ),
    ),
    ("eth on the 15m for the past day", cfg("ETHUSDT", "15m", 96)),
]


def test_the_table_has_at_least_40_phrasings() -> None:
    assert len(TABLE) >= 40


@pytest.mark.parametrize(("phrase", "expected"), TABLE, ids=[p for p, _ in TABLE])
def test_phrase_gives_the_expected_config(phrase: str, expected: dict[str, Any]) -> None:
    assert build(phrase, now=NOW).config == expected


@pytest.mark.parametrize("phrase", [p for p, _ in TABLE] + list(EXAMPLE_PHRASES))
def test_every_constructed_config_passes_generate_charts_parser(phrase: str) -> None:
    config = build(phrase, now=NOW).config
    request = parse_chart(config, 5000)
    assert request.symbol == config["ticker"]
    assert validate(config, 5000).valid


def test_defaults_are_generate_charts_own() -> None:
    props = wire("generate_chart")["wire_schema"]["properties"]
    assert props["timeframe"]["default"] == DEFAULT_INTERVAL
    assert props["bars"]["default"] == DEFAULT_BARS
    assert (props["width"]["default"], props["height"]["default"]) == DEFAULT_SIZE


def test_every_indicator_phrase_names_a_registry_indicator() -> None:
    for phrase, name in {**INDICATOR_PHRASES, **INDICATOR_CAPS}.items():
        assert lookup(name) is not None, phrase
        assert lookup(name).name == name, phrase  # canonical names, not aliases


def test_ema_stack_lengths_are_the_ones_the_registry_describes() -> None:
    assert "/".join(map(str, EMA_STACK_LENGTHS)) in resolve("ema_stack").description


def test_reasoning_names_the_words_read() -> None:
    built = build("Show Bitcoin with Bollinger Bands and RSI for the last 7 days", now=NOW)
    text = " ".join(built.reasoning)
    for words in ("'bitcoin'", "'bollinger bands'", "'rsi'", "'for the last 7 days'", "1–7 days → 1h"):
        assert words in text
    assert built.warnings == []


@pytest.mark.parametrize(
    ("phrase", "interval", "bars"),
    [
        ("btc last 2 hours", "5m", 24),
        ("btc last 4 hours", "5m", 48),
        ("btc last 6 hours", "15m", 24),
        ("btc today", "1h", 24),
        ("btc last 3 days", "1h", 72),
        ("btc last 7 days", "1h", 168),
        ("btc last 2 weeks", "4h", 84),
        ("btc last 3 months", "4h", 540),
        ("btc last 6 months", "1d", 180),
        ("btc last 2 years", "1d", 730),
        ("btc last 5 years", "1w", 261),
        ("btc ytd", "1d", 327),
        ("btc year to date", "1d", 327),
        ("btc last fortnight", "4h", 84),
        ("btc two weeks", "4h", 84),
    ],
)
def test_the_seeds_interval_rule_and_bars_per_range(phrase: str, interval: str, bars: int) -> None:
    config = build(phrase, now=NOW).config
    assert (config["timeframe"], config["bars"]) == (interval, bars)


def test_stocks_count_trading_time() -> None:
    assert build("AAPL last 7 days", now=NOW).config["bars"] == 35  # 5 sessions × 7 hourly bars
    assert build("AAPL last year", now=NOW).config["bars"] == 261  # trading days
    assert build("EUR/USD last 7 days", now=NOW).config["bars"] == 120  # 5 days × 24 h


def test_bars_are_capped_at_max_bars_with_a_warning() -> None:
    built = build("btc last 2 years hourly", now=NOW, max_bars=1000)
    assert built.config["bars"] == 1000
    assert any("max_bars 1000" in w for w in built.warnings)


def test_parameters_are_validated_by_the_registry() -> None:
    built = build("btc with rsi 0", now=NOW)
    assert built.config["indicators"] == ["rsi"]
    assert any("length" in w for w in built.warnings)


def test_ema_lengths_outside_the_stack_are_a_warning() -> None:
    built = build("eth with ema 100", now=NOW)
    assert built.config["indicators"] == ["ema_stack"]
    assert any("EMA 100 cannot be drawn" in w for w in built.warnings)


def test_a_range_before_an_indicator_is_not_its_parameter() -> None:
    config = build("btc last 30 days rsi", now=NOW).config
    assert config["indicators"] == ["rsi"] and config["bars"] == 180


def test_unknown_asset_is_an_error_with_the_closest_names() -> None:
    with pytest.raises(UnknownAsset, match="Bitcoin"):
        build("Show Bitcorn with RSI", now=NOW)
    with pytest.raises(UnknownAsset, match="Microsoft"):
        build("microsft last week", now=NOW)


def test_no_asset_and_no_range_are_warnings_with_defaults() -> None:
    built = build("a chart with rsi", now=NOW)
    assert built.config["ticker"] == "BTCUSDT" and built.config["bars"] == DEFAULT_BARS
    assert any("no asset named" in w for w in built.warnings)
    assert any("no time range" in w for w in built.warnings)


def test_an_uppercase_ticker_nobody_listed_is_kept_with_a_warning() -> None:
    built = build("PLTX last month", now=NOW)
    assert built.config["ticker"] == "PLTX"
    assert any("get_symbols" in w for w in built.warnings)


def test_preferences_override_the_text() -> None:
    prefs = {"theme": "light", "resolution": "800x600", "interval": "15m", "range": "1D"}
    built = build("btc last month 4k", now=NOW, preferences=prefs)
    assert built.config | {} == {
        "ticker": "BTCUSDT",
        "timeframe": "15m",
        "bars": 96,
        "width": 800,
        "height": 600,
        "format": "png",
    }
    assert any("dark" in w for w in built.warnings)


def test_symbol_and_exchange_arguments() -> None:
    assert build("apple last week", symbol="BINANCE:SOLUSDT", now=NOW).config["ticker"] == "SOLUSDT"
    on_yahoo = build("bitcoin last week", exchange="YAHOO", now=NOW).config
    assert (on_yahoo["ticker"], on_yahoo["source"]) == ("BTC-USD", "yahoo")
    ccxt = build("bitcoin last week", exchange="kraken", now=NOW)
    assert ccxt.config["ticker"] == "BTCUSDT"
    assert any("kraken" in w and "Binance" in w for w in ccxt.warnings)


def test_sizes_outside_the_bounds_are_clamped() -> None:
    built = build("btc 5000x100", now=NOW)
    assert (built.config["width"], built.config["height"]) == (4096, 150)
    assert built.warnings


@pytest.mark.parametrize(
    "phrase",
    [
        "Show Bitcoin with Bollinger Bands and RSI for the last 7 days",
        "ETH daily with ichimoku and macd 12 26 9, 1200x675",
        "SOL past 2 weeks with cipher b and volume profile, square",
        "BNB last 3 days with supertrend 10 3 and stochastic 14 3 3 in 4k",
        "ethereum last month summary with rsi 21",
    ],
)
async def test_constructed_configs_render(phrase: str, charts: ChartService) -> None:
    config = build(phrase, now=NOW).config
    out = await charts.chart(parse_chart(config, 5000))
    if config["format"] == "png":
        assert out.png is not None
        with Image.open(io.BytesIO(out.png)) as img:
            assert img.size == (config["width"], config["height"])
    else:
        assert out.text and config["ticker"] in out.text


def test_indices_are_charted_by_their_yahoo_ticker() -> None:
    built = build("S&P 500 last year", now=NOW)
    assert built.config["ticker"] == "^GSPC"
    chart_request(built.config, 5000)
