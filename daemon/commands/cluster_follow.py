"""``chartgen cluster follow | unfollow SYMBOL… -i INTERVAL…`` and ``chartgen cluster followed``: the
markets the operator has the cluster follow (cluster/followed.py), checked before they are written.

Each symbol must be listed on the exchange the workers follow (``binance_rest_url``'s
``exchangeInfo``; an unknown one is refused with the closest listed names) and each interval a
Binance interval; nothing is written unless every one is valid.  Unfollowing needs no check.
With ``bus = "nats"`` a command then tells every worker to look at once (cluster/bus_commands.py);
otherwise the workers find the change at their next heartbeat.
"""

from __future__ import annotations

import os
import socket

import aiohttp

from cluster import BusError, Command, CommandName, FollowedMarkets, send_command
from config import Settings
from daemon.parts.push_bus import BusSettingsError, connect_bus
from engine import BinanceRest, MarketDataError, SymbolDirectory, to_binance
from storage import PostgresDatabase


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
        when = await _tell_workers(settings, "follow", markets)
        return f"following {len(markets)} markets ({added} new); their owners take them {when}"
    removed = await followed.unfollow(markets)
    when = await _tell_workers(settings, "unfollow", markets)
    return (
        f"unfollowed {removed} of {len(markets)} markets, dropped {when}"
        " (kept while an armed alert or a worker's settings need one)"
    )


async def _tell_workers(settings: Settings, name: CommandName, markets: list[tuple[str, str]]) -> str:
    """With ``bus = "nats"``, the command that wakes every worker (cluster/bus_commands.py), sent after
    the change was committed; when the workers act on the change, as the line to print.  NATS not
    taking the command changes nothing but that: the change is in PostgreSQL, which every heartbeat reads."""
    if settings.bus != "nats":
        return "within a heartbeat"
    by = f"cli-{socket.gethostname()}-{os.getpid()}"
    try:
        bus = await connect_bus(settings, by, ensure_streams=False)
        try:
            await send_command(bus, Command.of(name, markets, by))
        finally:
            await bus.close()
    except (BusError, BusSettingsError) as exc:
        return f"within a heartbeat (the command to the workers was not sent: {exc})"
    return "now (a command went to every worker over NATS)"
