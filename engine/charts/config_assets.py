"""Which market a sentence names, for construct_chart_config: pairs, names, tickers, unknown words.

Read in this order, each match consuming its words: explicit pairs (``SOL/USDT``, ``EUR/USD``,
``ETHBTC``), asset names (Bitcoin, Apple, S&P 500), tickers (BTC, AAPL; tickers that are
English words count only in capitals), then any other word written in capitals as a ticker
nobody listed (kept, with a warning).  A capitalised or misspelt word close to a known
name, when nothing else named an asset, is an :class:`UnknownAsset` with the closest names.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from engine.charts.config_vocabulary import (
    CRYPTO_QUOTES,
    CRYPTO_TICKERS_ANY_CASE,
    FIAT,
    STOCK_TICKERS,
    STOCKS,
    STOP_WORDS,
    crypto_names,
)
from engine.market_data.symbol_search import ASSET_NAMES

_ANY_CASE_STOCKS = frozenset({"AAPL", "TSLA", "MSFT", "NVDA", "AMZN", "GOOGL", "NFLX", "INTC", "MSTR", "PLTR", "QQQ"})
_CRYPTO_BASES = frozenset(b for b in ASSET_NAMES if b not in {"USDT", "USDC", "FDUSD", "BUSD", "DAI", "EUR", "USD"})


class Scan:
    """A sentence being read: its lower-case copy and which characters earlier matches consumed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.low = text.lower()
        self._used = bytearray(len(text))

    def free(self, start: int, end: int) -> bool:
        return not any(self._used[start:end])

    def consume(self, start: int, end: int) -> None:
        self._used[start:end] = b"\x01" * (end - start)

    def take(
        self,
        pattern: re.Pattern[str],
        text: str | None = None,
        *,
        keep: Callable[[re.Match[str]], bool] | None = None,
        consume: bool = True,
    ) -> list[re.Match[str]]:
        """Matches of ``pattern`` (in the lower-case copy unless ``text``) over unread characters."""
        out = []
        for m in pattern.finditer(self.low if text is None else text):
            if m.end() == m.start() or not self.free(m.start(), m.end()) or (keep is not None and not keep(m)):
                continue
            if consume:
                self.consume(m.start(), m.end())
            out.append(m)
        return out


class UnknownAsset(ValueError):
    """The sentence names an asset we do not know; the message lists the closest known names."""


@dataclass(frozen=True, slots=True)
class Asset:
    """A market: the ticker generate_chart takes, its source and its trading calendar."""

    ticker: str
    source: str
    """binance or yahoo"""
    calendar: str
    """crypto (24/7), fx (24 h, 5 days) or stock (6.5 h, 5 days)"""
    label: str
    words: str
    """The words it was read from."""
    verified: bool = True
    crypto_base: str | None = None
    quote: str = "USDT"


def crypto(base: str, words: str, quote: str = "USDT") -> Asset:
    name = ASSET_NAMES.get(base, base)
    return Asset(f"{base}{quote}", "binance", "crypto", f"{name} ({base}/{quote}, Binance)", words, True, base, quote)


def yahoo(symbol: str, label: str, words: str, verified: bool = True) -> Asset:
    calendar = "fx" if symbol.endswith(("=X", "=F")) else ("crypto" if symbol.endswith("-USD") else "stock")
    return Asset(symbol, "yahoo", calendar, f"{label} ({symbol}, Yahoo)", words, verified)


def _phrase_regex(phrases: list[str]) -> re.Pattern[str]:
    alts = "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))
    return re.compile(rf"(?<![a-z0-9^&])(?:{alts})(?![a-z0-9])")


_NAMES: dict[str, tuple[str, str]] = {n: ("crypto", b) for n, b in crypto_names().items()}
_NAMES |= {n: ("stock", n) for n in STOCKS}
NAME_RE = _phrase_regex(list(_NAMES))
PAIR_SLASH = re.compile(r"(?<![\w^/])([A-Za-z0-9]{2,10})\s*/\s*([A-Za-z]{3,5})(?![\w/])")
PAIR_JOINED = re.compile(r"(?<![\w^])([A-Za-z0-9]{2,10}?)(" + "|".join(CRYPTO_QUOTES) + r")(?![\w])", re.IGNORECASE)
TOKEN = re.compile(r"(?<![\w^/&])(\^?[A-Za-z][A-Za-z0-9]{0,5}(?:[.\-][A-Za-z])?(?:=[XF])?)(?![\w/])")
WORD = re.compile(r"(?<![\w'])([A-Za-z][a-z]{2,})(?![\w'])")


def known_names() -> list[str]:
    """Every asset name and ticker the builder knows (for suggestions)."""
    return sorted({*(_n.title() for _n in _NAMES), *_CRYPTO_BASES, *STOCK_TICKERS})


def read_pair(base: str, quote: str, words: str) -> tuple[Asset | None, str | None]:
    """An explicit pair as a market, and a warning when it had to be adapted."""
    b, q = base.upper(), quote.upper()
    if q in CRYPTO_QUOTES:
        return crypto(b, words, q), None
    if b in FIAT and q in FIAT:
        return yahoo(f"{b}{q}=X", f"{b}/{q}", words), None
    if q == "USD" and b in _CRYPTO_BASES:
        return crypto(b, words), f"'{words}': Binance quotes {b} in USDT, so {b}USDT is charted"
    return None, None


def find_assets(scan: Scan, original: str) -> list[tuple[int, Asset, str | None]]:
    """Every market named, with its position and any warning; ``scan`` consumes the words it reads."""
    found: list[tuple[int, Asset, str | None]] = []
    for m in scan.take(PAIR_SLASH, original):
        asset, note = read_pair(m.group(1), m.group(2), m.group(0))
        if asset is not None:
            found.append((m.start(), asset, note))
    for m in scan.take(PAIR_JOINED, original, keep=_joined_ok):
        found.append((m.start(), crypto(m.group(1).upper(), m.group(0), m.group(2).upper()), None))
    for m in scan.take(NAME_RE):
        kind, key = _NAMES[m.group(0)]
        if kind == "crypto":
            found.append((m.start(), crypto(key, m.group(0)), None))
        else:
            symbol, label = STOCKS[key]
            found.append((m.start(), yahoo(symbol, label, m.group(0)), None))
    for m in scan.take(TOKEN, original, keep=_ticker_ok):
        token = m.group(1)
        up = token.upper()
        if up in _CRYPTO_BASES:
            found.append((m.start(), crypto(up, token), None))
        elif up in STOCK_TICKERS:
            found.append((m.start(), yahoo(up.replace(".", "-"), up, token), None))
        else:
            note = f"'{token}' is not a ticker this tool knows: charted as Yahoo's {up} (check with get_symbols)"
            found.append((m.start(), yahoo(up, up, token, verified=False), note))
    return sorted(found, key=lambda f: f[0])


def _joined_ok(m: re.Match[str]) -> bool:
    token, base = m.group(0), m.group(1).upper()
    if token.upper() in STOCK_TICKERS or len(base) < 2:
        return False
    return token.isupper() or base in _CRYPTO_BASES


def _ticker_ok(m: re.Match[str]) -> bool:
    token = m.group(1)
    up = token.upper()
    if token.startswith("^") or up.endswith(("=X", "=F")):
        return True
    if up in CRYPTO_TICKERS_ANY_CASE or up in _ANY_CASE_STOCKS:
        return True
    if not token.isupper() or len(token) < 2:
        return False
    return up.lower() not in STOP_WORDS and up not in FIAT


def unknown_asset(scan: Scan, original: str) -> UnknownAsset | None:
    """An unread word that looks like an asset name (capitalised, or close to a known one)."""
    names = [n.lower() for n in known_names()]
    for m in scan.take(WORD, original, keep=lambda m: m.group(1).lower() not in STOP_WORDS, consume=False):
        word = m.group(1)
        close = difflib.get_close_matches(word.lower(), names, n=3, cutoff=0.75)
        if word[0].isupper() or close:
            nearest = close or difflib.get_close_matches(word.lower(), names, n=3, cutoff=0.4)
            shown = ", ".join(_show(n) for n in nearest) or "Bitcoin (BTCUSDT), Apple (AAPL), S&P 500 (^GSPC)"
            return UnknownAsset(
                f"unknown asset {word!r}: closest known names: {shown}. Name a known asset, write a ticker "
                "in capitals (AAPL, SOLUSDT), or pass symbol (find one with get_symbols)"
            )
    return None


def _show(name: str) -> str:
    entry = _NAMES.get(name)
    if entry is None:
        up = name.upper()
        return f"{up} ({up}USDT)" if up in _CRYPTO_BASES else up
    kind, key = entry
    return f"{name.title()} ({key}USDT)" if kind == "crypto" else f"{name.title()} ({STOCKS[key][0]})"


def from_symbol(symbol: str) -> Asset:
    """The market of the symbol argument (``BTCUSDT``, ``BINANCE:BTCUSDT``, ``YAHOO:AAPL``, ``^GSPC``)."""
    venue, _, ticker = symbol.strip().rpartition(":")
    ticker = ticker.strip().upper()
    if venue.upper() == "YAHOO":
        return yahoo(ticker, ticker, symbol)
    source = "binance" if venue.upper() == "BINANCE" else None
    for q in ("USDT", "FDUSD", "USDC", "BUSD", "BTC", "ETH", "BNB"):
        if ticker.endswith(q) and len(ticker) > len(q) and (source or not ticker.startswith("^")):
            return crypto(ticker[: -len(q)], symbol, q)
    if source:
        return Asset(ticker, "binance", "crypto", f"{ticker} (Binance)", symbol)
    return yahoo(ticker, ticker, symbol)


def on_venue(asset: Asset, venue: str | None, why: list[str], warn: list[str]) -> Asset:
    """``asset`` as charted when an exchange was named (Yahoo's BTC-USD for YAHOO; a note otherwise)."""
    if venue is None:
        return asset
    if venue == "YAHOO" and asset.source == "binance" and asset.crypto_base:
        moved = yahoo(f"{asset.crypto_base}-{'USD' if asset.quote.startswith('USD') else asset.quote}", "", "")
        why.append(f"exchange YAHOO: {asset.ticker} charted as Yahoo's {moved.ticker}")
        return Asset(moved.ticker, "yahoo", "crypto", moved.ticker, asset.words)
    if venue == "BINANCE" and asset.source == "yahoo":
        warn.append(f"{asset.ticker} is not on Binance: charted from Yahoo")
        return asset
    if venue not in ("BINANCE", "YAHOO"):
        warn.append(
            f"exchange {venue}: charts read Binance (crypto) and Yahoo (stocks) only, so {asset.ticker} is "
            f"charted from {asset.source.title()}; {venue} serves the live engine (--exchange {venue})"
        )
    return asset
