"""The words construct_chart_config understands: assets, indicator phrases, sizes, formats, stop words.

Pure data, read by :mod:`engine.charts.config_builder`.  Every indicator phrase maps to a
name of the indicator registry (tests resolve each one), so the builder never invents an
indicator.  Crypto assets are Binance base assets quoted in USDT; stocks, indices,
commodities and currencies are Yahoo symbols.
"""

from __future__ import annotations

from engine.market_data.symbol_search import ASSET_NAMES

CRYPTO_QUOTES = ("USDT", "FDUSD", "USDC", "BUSD", "BTC", "ETH", "BNB")
"""Quote assets an explicit pair (``SOL/USDT``, ``ETHBTC``) may end in (Binance)."""

FIAT = ("USD", "EUR", "GBP", "JPY", "CHF", "AUD", "CAD", "NZD", "CNY", "HKD", "SEK", "NOK")
"""Currencies: a pair of two of them is a Yahoo forex symbol (``EUR/USD`` → ``EURUSD=X``)."""

CRYPTO_EXTRA_NAMES: dict[str, str] = {
    "bitcoin": "BTC",
    "ether": "ETH",
    "ethereum": "ETH",
    "ripple": "XRP",
    "binance coin": "BNB",
    "doge": "DOGE",
    "shiba": "SHIB",
    "polkadot": "DOT",
    "chainlink": "LINK",
    "avalanche": "AVAX",
    "tron": "TRX",
    "near protocol": "NEAR",
    "toncoin": "TON",
    "bitcoin cash": "BCH",
    "ethereum classic": "ETC",
}

CRYPTO_TICKERS_ANY_CASE = frozenset(
    "BTC ETH SOL BNB XRP ADA DOGE AVAX LTC TRX SHIB APT XLM BCH ETC FIL INJ PEPE SUI".split()
)
"""Tickers matched in any case; the others (LINK, DOT, NEAR, TON, UNI, ATOM, ARB, OP) are
English words too and count only when written in capitals."""

NOT_CRYPTO_NAMES = frozenset({"tetherus", "usd coin", "first digital usd", "busd", "dai", "euro", "us dollar"})
NOT_CRYPTO_NAMES |= frozenset({"optimism", "stellar", "cosmos"})
"""Names that are currencies, or English words too common to read as an asset."""


def crypto_names() -> dict[str, str]:
    """Lower-case name → base asset (from ASSET_NAMES plus extra spellings)."""
    out = {name.lower(): base for base, name in ASSET_NAMES.items() if name.lower() not in NOT_CRYPTO_NAMES}
    out.pop("bnb", None)
    out.pop("xrp", None)
    return out | CRYPTO_EXTRA_NAMES


STOCKS: dict[str, tuple[str, str]] = {
    # name → (Yahoo symbol, display name)
    "apple": ("AAPL", "Apple"),
    "tesla": ("TSLA", "Tesla"),
    "microsoft": ("MSFT", "Microsoft"),
    "nvidia": ("NVDA", "Nvidia"),
    "amazon": ("AMZN", "Amazon"),
    "google": ("GOOGL", "Alphabet"),
    "alphabet": ("GOOGL", "Alphabet"),
    "meta": ("META", "Meta Platforms"),
    "facebook": ("META", "Meta Platforms"),
    "netflix": ("NFLX", "Netflix"),
    "amd": ("AMD", "AMD"),
    "intel": ("INTC", "Intel"),
    "microstrategy": ("MSTR", "MicroStrategy"),
    "palantir": ("PLTR", "Palantir"),
    "berkshire hathaway": ("BRK-B", "Berkshire Hathaway"),
    "jpmorgan": ("JPM", "JPMorgan Chase"),
    "s&p 500": ("^GSPC", "S&P 500"),
    "s&p500": ("^GSPC", "S&P 500"),
    "s&p": ("^GSPC", "S&P 500"),
    "sp500": ("^GSPC", "S&P 500"),
    "spx": ("^GSPC", "S&P 500"),
    "nasdaq 100": ("^NDX", "Nasdaq 100"),
    "nasdaq": ("^IXIC", "Nasdaq Composite"),
    "dow jones": ("^DJI", "Dow Jones Industrial Average"),
    "dow": ("^DJI", "Dow Jones Industrial Average"),
    "russell 2000": ("^RUT", "Russell 2000"),
    "vix": ("^VIX", "CBOE Volatility Index"),
    "ftse 100": ("^FTSE", "FTSE 100"),
    "ftse": ("^FTSE", "FTSE 100"),
    "dax": ("^GDAXI", "DAX"),
    "nikkei": ("^N225", "Nikkei 225"),
    "gold": ("GC=F", "Gold futures"),
    "silver": ("SI=F", "Silver futures"),
    "crude oil": ("CL=F", "Crude oil futures"),
    "oil": ("CL=F", "Crude oil futures"),
}
"""ETFs that track an index, for when generate_chart refuses tickers starting with ``^``."""

STOCK_TICKERS = frozenset({"AAPL", "TSLA", "MSFT", "NVDA", "AMZN", "GOOGL", "GOOG", "META", "NFLX", "INTC", "MSTR"})
STOCK_TICKERS |= frozenset({"PLTR", "JPM", "SPY", "QQQ", "IWM", "DIA", "COIN", "BRK-B", "BRK.B"})
"""Tickers matched in any case (AMD is also a name above)."""

INDICATOR_PHRASES: dict[str, str] = {
    "bollinger bands": "bbands",
    "bollinger band": "bbands",
    "bollinger": "bbands",
    "bbands": "bbands",
    "bb": "bbands",
    "relative strength index": "rsi",
    "relative strength": "rsi",
    "rsi": "rsi",
    "macd": "macd",
    "exponential moving averages": "ema_stack",
    "exponential moving average": "ema_stack",
    "simple moving averages": "ema_stack",
    "simple moving average": "ema_stack",
    "moving averages": "ema_stack",
    "moving average": "ema_stack",
    "ema stack": "ema_stack",
    "ema ribbon": "ema_stack",
    "emas": "ema_stack",
    "ema": "ema_stack",
    "smas": "ema_stack",
    "sma": "ema_stack",
    "market cipher b": "cipher_b",
    "market cipher": "cipher_b",
    "cipher b": "cipher_b",
    "cipher": "cipher_b",
    "slow stochastic": "stoch",
    "stochastic": "stoch",
    "stoch": "stoch",
    "session volume profile": "session_vp",
    "volume profile": "volume_profile",
    "vpvr": "volume_profile",
    "high volume nodes": "hvn_lvn",
    "volume nodes": "hvn_lvn",
    "hvn": "hvn_lvn",
    "lvn": "hvn_lvn",
    "naked poc": "naked_poc",
    "naked pocs": "naked_poc",
    "npoc": "naked_poc",
    "market profile": "tpo",
    "tpo": "tpo",
    "on-balance volume": "obv",
    "on balance volume": "obv",
    "obv": "obv",
    "cumulative volume delta": "cvd",
    "volume delta": "cvd",
    "cvd": "cvd",
    "kalman volume": "kalman_volume",
    "kalman": "kalman_volume",
    "vwap bands": "vwap_bands",
    "vwap": "vwap",
    "ichimoku cloud": "ichimoku",
    "ichimoku": "ichimoku",
    "keltner channels": "keltner",
    "keltner": "keltner",
    "donchian channels": "donchian",
    "donchian": "donchian",
    "supertrend": "supertrend",
    "super trend": "supertrend",
    "parabolic sar": "sar",
    "psar": "sar",
    "heikin ashi": "heikin_ashi",
    "heiken ashi": "heikin_ashi",
    "pivot points": "pivot",
    "pivots": "pivot",
    "wavetrend": "wavetrend",
    "wave trend": "wavetrend",
    "average true range": "atr",
    "atr": "atr",
    "commodity channel index": "cci",
    "cci": "cci",
    "rate of change": "roc",
    "roc": "roc",
    "chaikin money flow": "cmf",
    "cmf": "cmf",
    "money flow index": "mfi",
    "money flow": "mfi",
    "mfi": "mfi",
    "williams %r": "williams_r",
    "williams r": "williams_r",
    "williams": "williams_r",
    "average directional index": "adx",
    "adx": "adx",
    "accumulation/distribution": "ad",
    "accumulation distribution": "ad",
    "a/d line": "ad",
    "historical volatility": "histvol",
    "rsi mfi stoch": "rsi_mfi_stoch",
    "rsi/mfi/stoch": "rsi_mfi_stoch",
    "funding rate": "funding",
    "funding": "funding",
    "open interest": "oi",
    "long/short ratio": "long_short",
    "long short ratio": "long_short",
    "fear and greed": "fear_greed",
    "fear & greed": "fear_greed",
    "fear greed": "fear_greed",
}
"""Lower-case phrase → registry name (longest phrases are tried first)."""

INDICATOR_CAPS: dict[str, str] = {"MA": "ema_stack", "CB": "cipher_b", "VP": "volume_profile", "SAR": "sar"}
INDICATOR_CAPS |= {"OI": "oi", "HV": "histvol", "AD": "ad"}
"""Abbreviations that are English words or too short: counted only when written in capitals."""

VOLUME_WORDS = ("volume",)
"""Plain "volume": the bars are drawn under every chart's candles, no indicator is added."""

EMA_STACK_LENGTHS = (8, 21, 50, 200)
"""The EMAs ema_stack draws (its registry description names them; a test checks it)."""

SIZES: dict[str, tuple[int, int]] = {
    "4k": (3840, 2160),
    "uhd": (3840, 2160),
    "2k": (2560, 1440),
    "1440p": (2560, 1440),
    "1080p": (1920, 1080),
    "full hd": (1920, 1080),
    "fhd": (1920, 1080),
    "720p": (1280, 720),
    "hd": (1280, 720),
    "square": (1080, 1080),
    "mobile": (1080, 1920),
    "phone": (1080, 1920),
    "portrait": (1080, 1920),
    "twitter": (1200, 675),
    "thumbnail": (640, 360),
    "small": (800, 450),
    "large": (2560, 1440),
}

FORMAT_PHRASES: dict[str, str] = {
    "image and summary": "both",
    "chart and summary": "both",
    "with summary": "both",
    "data only": "summary",
    "numbers only": "summary",
    "text only": "summary",
    "no image": "summary",
    "summary": "summary",
    "digest": "summary",
    "json": "summary",
    "every bar": "series",
    "full series": "series",
    "raw data": "series",
    "series": "series",
}

THEME_WORDS: dict[str, str] = {"dark mode": "dark", "dark": "dark", "light mode": "light", "light": "light"}
THEME_WORDS |= {"white background": "light", "white": "light"}

INTERVAL_WORDS: dict[str, str] = {
    "hourly": "1h",
    "daily": "1d",
    "weekly": "1w",
    "monthly": "1M",
}

NUMBER_WORDS: dict[str, int] = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "twelve": 12,
}

EXCHANGE_WORDS: dict[str, str] = {"binance": "BINANCE", "yahoo": "YAHOO", "yahoo finance": "YAHOO"}

STOP_WORDS = frozenset(
    """show me draw plot chart charts graph give display make create generate get render please can could you i
    want need would like a an the of for with and or on in over at to from by vs versus plus also add using use
    including include last past previous this that these data price prices candles candle candlestick
    candlesticks bars bar image picture png dark light mode theme my our it its some daily weekly hourly monthly
    timeframe interval analysis technical indicators indicator overlay overlays panel panels trend crypto stock
    stocks market markets hi hello hey quick nice big small today yesterday week weeks month months year years
    day days hour hours minute minutes what how is are be view see look see let lets let's along together period
    so as up down all any both only then now recent latest current chart's performance action movement moves
    binance yahoo finance exchange ytd utc json summary square mobile phone portrait twitter size resolution
    pixels px wide tall high low close open against compare compared between versus""".split()
)
"""Words that are never read as an unknown asset name."""

EXAMPLE_PHRASES: tuple[str, ...] = (
    "Bitcoin with Bollinger Bands and RSI for the last 7 days",
    "Apple daily chart with MACD and RSI 21 over the last year",
    "ETH/BTC 4h with ichimoku cloud, 1200x675",
    "Solana summary with cipher b for the past month",
    "S&P 500 weekly with EMA 50 and 200 and volume profile, square",
)
"""Phrases whose construct_chart_config answers are the documentation's examples."""
