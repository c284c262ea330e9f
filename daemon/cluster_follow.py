"""``chartgen cluster follow | unfollow SYMBOL… -i INTERVAL…`` and ``chartgen cluster followed``: the
markets the operator has the cluster follow (cluster/followed.py), checked before they are written.

Each symbol must be listed on the exchange the workers follow (``binance_rest_url``'s
``exchangeInfo``; an unknown one is refused with the closest listed names) and each interval a
Binance interval; nothing is written unless every one is valid.  Unfollowing needs no check.
"""

from __future__ import annotations

import aiohttp

from cluster.followed import FollowedMarkets
from config import Settings
from config.postgres import PostgresDatabase
from engine.market_data.binance_rest import BinanceRest
from engine.market_data.errors import MarketDataError
from engine.market_data.intervals import to_binance
from engine.market_data.symbol_directory import SymbolDirectory


class FollowError(ValueError):
    """A symbol or interval that cannot be followed (the message names it and the fix)."""


async def checked_markets(
    settings: Settings, symbols: list[str], intervals: list[str], *, listed: bool
) -> list[tuple[str, str]]:
    """(SYMBOL, Binance interval) for every pair; ``listed``: each symbol must be on the exchange."""
    try:
        names = [to_binance(i) for i in intervals]
    except MarketDataError as exc:
        raise FollowError(str(exc)) from exc
    upper = [s.strip().upper() for s in symbols]
    if listed:
        async with aiohttp.ClientSession() as session:
            directory = SymbolDirectory(
                BinanceRest(session, settings.binance_rest_url, timeout_s=settings.http_timeout_s)
            )
            for symbol in upper:
                try:
                    problem = await directory.check(symbol)
                except MarketDataError as exc:
                    raise FollowError(f"cannot check {symbol} on {settings.binance_rest_url}: {exc}") from exc
                if problem is not None:
                    raise FollowError(problem)
    return [(s, i) for s in upper for i in names]


async def run_follow(
    db: PostgresDatabase, settings: Settings, action: str, symbols: list[str], intervals: list[str]
) -> str:
    """Carry out ``action`` (follow, unfollow, followed); the line to print."""
    followed = FollowedMarkets(db)
    if action == "followed":
        markets = await followed.all()
        return "\n".join(f"{s} {i}" for s, i in markets) if markets else "no markets followed by the operator"
    markets = await checked_markets(settings, symbols, intervals, listed=action == "follow")
    if action == "follow":
        added = await followed.follow(markets)
        return f"following {len(markets)} markets ({added} new); their owners take them within a heartbeat"
    removed = await followed.unfollow(markets)
    return f"unfollowed {removed} of {len(markets)} markets (kept while an armed alert or a worker's settings need one)"
