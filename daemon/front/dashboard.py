"""The operator's dashboard (``/ui``) at a cluster front: the single node's pages over the cluster's
PostgreSQL and bus.

The dashboard's own code is the single node's (dashboard/); a front gives it what it has instead of
an engine and an order service (:class:`FrontPages`, its ``ClusterPages``):

- **sessions** in PostgreSQL (dashboard/pg_sessions.py): a sign-in at one front is a session at
  every front, a revocation holds at every front on the next request; the device-cookie key, the
  sign-in generation and one-time sign-in links are there too, so a device cookie issued at one
  front is trusted at every front (the attempt counts are each front's own, like ``attempts``);
- **markets**: the workers' universe (the armed alerts', the operator's followed markets, the
  configured ones) with each market's rendezvous owner among the live workers and its evaluation
  mark (cluster/marks.py): ``live`` once that owner wrote the market's mark (it took the market
  over), ``ready`` while the mark is under :data:`READY_LAG_S` behind (a market configured at this
  front but in no worker's settings has an owner and no mark: not live); the price is the newest
  tick from the workers on ``bus = "nats"`` (cluster/bus_prices.py), else none;
- **orders**: the leader's mirror of the account (cluster/account_mirror.py ``AccountView``: open
  orders and list legs, balances, positions, fills) — with the single node's keys, and an ``error``
  naming why when the mirror cannot be read (no leader, a stale snapshot, PostgreSQL away);
- **charts**: the front's chart service (REST history, as its generate_chart) with markers of fired
  alerts and the mirrored fills;
- **live events**: a job of the front's scheduler reads the newest fired alert's sequence number
  every :data:`FIRED_WATCH_S` (:class:`FiredWatch`: one backward scan of ``alert_events``' unique
  index, stopping at the first fired row) and, when it moved, sends ``notifications`` to the open
  pages — within that period of the commit.  Not an announcement from the workers: the push
  announcements (NOTIFY or NATS) cover principals with a push subscription only, and one more
  announcement per firing transaction would put a PostgreSQL ``NOTIFY`` — serialised at commit —
  back on every firing on ``bus = "nats"``.  On ``bus = "nats"`` the workers' ticks
  (cluster/bus_prices.py) go to open pages as ``tick`` events on each followed interval of the
  symbol, so prices and the forming bar move live; closed bars and indicator updates are not pushed
  (a page reloads a chart to see them).  On ``bus = "local"`` a front has no market data at all:
  prices and charts refresh when loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.routing import BaseRoute

from brokers import Actor, Fill, OrderInputError, fill_of
from cluster import UNIVERSE_SQL, AccountView, BusPrices, MarketMarks, Membership, TickMessage, owner_of
from config import Settings
from daemon.front.runtime import Front, quiet
from daemon.parts.dashboard import dashboard_setup
from daemon.scheduler import DaemonScheduler
from dashboard import fill_view
from engine import Tick, interval_seconds
from mcp_bridge import PassphraseAttempts, PgTokenStore, Services
from storage import PostgresDatabase, StorageUnavailable

FIRED_WATCH_S = 2.0
"""How often a front looks for new firings (for its open dashboard pages)."""

READY_LAG_S = 10.0
"""A market whose owner's evaluation mark is further behind than this is shown not ready."""

ADMIN = Actor(principal=None, admin=True)
FILLS_SHOWN = 100


class FrontPages:
    """What a front's dashboard shows (see the module docstring)."""

    def __init__(
        self,
        db: PostgresDatabase,
        view: AccountView,
        membership: Membership,
        *,
        configured: list[str],
        prices: BusPrices | None = None,
    ) -> None:
        self.db = db
        self.view = view
        self.membership = membership
        self.configured = configured
        """The front's configured markets (``SYMBOL interval``): the workers' settings should match."""
        self.prices = prices
        self.ticks: list[Callable[[Tick], None]] = []
        """The open pages' tick hooks (the workers' ticks on NATS, one per market of the symbol)."""
        self._intervals: dict[str, set[str]] = {}
        self._learn(configured)
        if prices is not None:
            prices.listeners.append(self.on_tick)

    def _learn(self, markets: list[str]) -> None:
        """The intervals each symbol is followed at (what a tick is shown on), as of the last listing."""
        intervals: dict[str, set[str]] = {}
        for market in markets:
            symbol, interval = market.split(" ", 1)
            intervals.setdefault(symbol, set()).add(interval)
        self._intervals = intervals

    def on_tick(self, tick: TickMessage) -> None:
        """A worker's tick: to every open page, on each followed interval of its symbol."""
        if not self.ticks:
            return
        for interval in sorted(self._intervals.get(tick.symbol, ())):
            step = interval_seconds(interval)
            shown = Tick(tick.symbol, interval, tick.price, tick.time_ms, tick.time_ms // 1000 // step * step)
            for listener in list(self.ticks):
                listener(shown)

    async def markets(self) -> list[dict[str, Any]]:
        rows = await self.db.fetch(UNIVERSE_SQL)
        universe = sorted(set(self.configured) | {f"{r['symbol']} {r['interval']}" for r in rows})
        self._learn(universe)
        workers = await self.membership.live("worker")
        marks = {m.market: m for m in await MarketMarks(self.db).all()}
        out = []
        for market in universe:
            symbol, interval = market.split(" ", 1)
            owner = owner_of(market, workers) if workers else None
            mark = marks.get(market)
            live = mark is not None and mark.member == owner  # its owner has taken it over and evaluates it
            fresh = live and mark is not None and mark.lag_s <= READY_LAG_S
            price = self.prices.last_price(symbol) if self.prices is not None else None
            out.append(
                {
                    "symbol": symbol,
                    "interval": interval,
                    "last_price": price,
                    "live": live,
                    "ready": fresh,
                    "worker": owner,
                    "lag_s": None if mark is None else round(mark.lag_s, 3),
                }
            )
        return out

    async def orders(self) -> dict[str, Any]:
        try:
            open_orders = await self.view.get_orders("open", actor=ADMIN)
            balance = await self.view.get_balance()
            positions = await self.view.get_positions()
        except (OrderInputError, StorageUnavailable) as exc:
            return {
                "open_orders": [], "order_lists": [], "fills": [], "positions": [], "balances": [],
                "broker": None, "error": f"the account's mirror cannot be read: {exc}",
            }  # fmt: skip
        lists: dict[str, dict[str, Any]] = {}
        for leg in open_orders:
            if leg.get("list_id"):
                entry = lists.setdefault(
                    leg["list_id"],
                    {"list_id": leg["list_id"], "kind": leg.get("list_kind"), "symbol": leg["symbol"], "legs": []},
                )
                entry["legs"].append({"order_id": leg["id"], "leg": leg.get("leg"), "status": leg["status"]})
        for entry in lists.values():
            entry["status"] = "EXECUTING"
        fills = await self._fills(None, FILLS_SHOWN)
        return {
            "open_orders": open_orders,
            "order_lists": [lists[k] for k in sorted(lists)],
            "fills": [fill_view(f) for f in fills],
            "positions": positions,
            "balances": [b for b in balance["balances"] if b["total"]],
            "broker": f"{balance['broker']} (account {self.view.account!r}, mirrored by its order leader)",
            "as_of": balance["as_of"],
        }

    async def fills(self, symbol: str) -> list[Fill]:
        return await self._fills(symbol, 1000)

    async def _fills(self, symbol: str | None, limit: int) -> list[Fill]:
        rows = await self.db.fetch(
            "SELECT trade_id, symbol, side, client_order_id, quantity, price, commission, commission_asset, time_ms"
            " FROM cluster_account_fills WHERE account = $1 AND ($2::text IS NULL OR symbol = $2)"
            " ORDER BY time_ms DESC LIMIT $3",
            self.view.account,
            symbol,
            limit,
        )
        fills = [fill_of(r) for r in rows]
        ours = await self.db.fetch(  # myTrades names the exchange's order id: show the client order id
            "SELECT client_order_id, answer::jsonb -> 'order' ->> 'exchange_order_id' AS xid FROM cluster_order_intents"
            " WHERE account = $1 AND kind = 'order' AND state = 'placed'"
            " AND answer::jsonb -> 'order' ->> 'exchange_order_id' = ANY($2::text[])",
            self.view.account,
            sorted({f.client_order_id for f in fills}),
        )
        named = {r["xid"]: r["client_order_id"] for r in ours}
        return [dataclasses.replace(f, client_order_id=named.get(f.client_order_id, f.client_order_id)) for f in fills]


class FiredWatch:
    """Tells the open dashboard pages (``listeners``: their streams' hooks) that alerts fired."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self.listeners: list[Callable[[], None]] = []
        self.newest: int | None = None
        """The newest fired alert's ``alert_events.seq`` (None: none fired yet)."""
        self.read = False

    async def check(self) -> None:
        """The scheduler's job: one read; the listeners told when it moved.  It reads with no page open
        too, so a page that opens just before a firing hears of it (its own load came before)."""
        newest = await self.db.fetchval(
            "SELECT seq FROM alert_events WHERE outcome = 'fired' ORDER BY seq DESC LIMIT 1"
        )
        if self.read and newest != self.newest:
            for listener in list(self.listeners):
                listener()
        self.newest, self.read = newest, True


def health_markets(markets: list[dict[str, Any]]) -> dict[str, Any]:
    """The health page's engine section from a front's markets (it runs no engine of its own)."""
    return {
        "markets": [
            {"symbol": m["symbol"], "interval": m["interval"], "bars": None, "live": m["live"], "warm": m["ready"],
             "synced": m["ready"], "last_bar_time": None, "worker": m["worker"]}
            for m in markets
        ],
        "connections": [],
    }  # fmt: skip


def front_status(
    status: Callable[[], Awaitable[dict[str, Any]]], pages: FrontPages
) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The health page's document at a front: its /status with the cluster's markets as the engine's."""

    async def read() -> dict[str, Any]:
        out = await status()
        markets = await pages.markets()
        out["engine"] = health_markets(markets)
        out["lag_s"] = {m["symbol"]: m["lag_s"] for m in markets if m["lag_s"] is not None}
        return out

    return read


def front_dashboard(
    settings: Settings,
    services: Services,
    front: Front,
    status: Callable[[], Awaitable[dict[str, Any]]],
    attempts: PassphraseAttempts | None = None,
) -> list[BaseRoute]:
    """A front's /ui routes (none when the dashboard is switched off); ``status`` is its /status."""
    tokens, view = services.tokens, services.front_account
    if not isinstance(tokens, PgTokenStore) or not isinstance(view, AccountView):
        return []
    configured = [f"{s} {i}" for s in settings.symbols for i in settings.intervals]
    pages = FrontPages(tokens.db, view, front.membership, configured=configured, prices=front.prices)
    health = front_status(status, pages)
    watch = FiredWatch(tokens.db)
    scheduler = services.scheduler
    if isinstance(scheduler, DaemonScheduler):  # Services holds it as the tools' JobStatus
        scheduler.every("dashboard-fired-watch", FIRED_WATCH_S, quiet(watch.check))
        scheduler.run_soon("dashboard-fired-watch")  # the first read now: pages open from here on
    ticks = pages.ticks if front.prices is not None else None
    return dashboard_setup(settings, services, health, attempts, cluster=pages, notified=watch.listeners, ticks=ticks)
