"""The paper broker's order lists: OCO and OTOCO at engine prices, with Binance's rules.

Owns placing, cancelling, querying and working the lists of :class:`~brokers.paper.broker.PaperBroker`
(its orders, balances and lock are :mod:`brokers.paper.account`'s).  An OCO is a take-profit leg (LIMIT_MAKER
or TAKE_PROFIT(_LIMIT)) and a STOP_LOSS(_LIMIT) leg: checked with :mod:`brokers.trigger_rules`
(leg positions -1196…-1199, SELL: take profit > last > stop, BUY the reverse), placed together,
the SELL quantity locked once (a BUY locks the larger leg's worth).  When one leg fills or its
stop triggers the other expires.  An OTOCO's working LIMIT / LIMIT_MAKER order works alone; its
OCO legs wait as PENDING_NEW and go to work only when it is fully filled (the list, reported as
OTO until then, then reports OCO).  Cancelling any leg cancels the list.  Each change returns
the legs' updates and the list's, which the broker sends to its event handler (legs) and list
handler (the list), as Binance's executionReport and listStatus events would.

Funds and fills go through :class:`~brokers.paper.account.PaperAccount`, holding its lock; a leg's
conditional-order rules are :mod:`brokers.paper.stops`' checks.  When a leg's stop triggers,
:mod:`brokers.paper.stops` calls :meth:`PaperLists.before_trigger` (handed to it as its hook).
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from sqlite3 import Row

from aiosqlite import Connection

from brokers import trigger_rules as tr
from brokers.filters import SymbolRules
from brokers.models import STOP_TYPES, ExchangeList, ExchangeOrder, InsufficientBalance, ListRequest, OrderRejected
from brokers.paper import stops
from brokers.paper import store as ps
from brokers.paper.account import PaperAccount

LIST_KINDS = frozenset({"OCO", "OTOCO"})
TAKE_PROFIT_LEGS = frozenset({"LIMIT_MAKER", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"})
_OPEN_LEG = (*ps.OPEN_STATUSES, "PENDING_NEW")


def _reject(refusal: tr.Refusal | None) -> None:
    if refusal is not None:
        raise OrderRejected(refusal.msg, code=refusal.code)


class PaperLists:
    """OCO / OTOCO lists of one paper account."""

    def __init__(self, account: PaperAccount) -> None:
        self.account = account
        self._pending: list[ExchangeOrder] = []

    # --- checks ---------------------------------------------------------------------------
    def check(self, req: ListRequest, last: Decimal) -> None:
        """Binance's refusals of a list, before anything is locked or recorded."""
        if req.kind not in LIST_KINDS:
            raise OrderRejected(f"paper does not place {req.kind} lists; it places OCO and OTOCO")
        tp, stop = req.take_profit, req.stop
        side = tp.side
        if stop.side != side or tp.quantity is None or stop.quantity is None:
            raise OrderRejected("both legs of an OCO need the same side and a quantity", code=-1102)
        above, below = (tp, stop) if side == "SELL" else (stop, tp)
        _reject(tr.oco_leg_positions(side, above.type, below.type))
        if tp.type not in TAKE_PROFIT_LEGS or stop.type not in tr.STOP_LOSS_TYPES:
            raise OrderRejected("Unsupported order combination", code=-1014)
        away = Decimal(1) if side == "SELL" else Decimal(-1)
        tp_ref = (tp.stop_price if tp.type == "TAKE_PROFIT" else tp.price) or last + away
        stop_ref = stop.stop_price if stop.stop_price is not None else last - away
        _reject(tr.oco_prices(side, tp_ref, stop_ref, last))
        for leg in (tp, stop):
            if leg.type in STOP_TYPES:
                stops.check(leg, last, self.account.trailing_bounds)
        working = req.working
        if req.kind == "OTOCO":
            if working is None or working.type not in ("LIMIT", "LIMIT_MAKER") or working.price is None:
                raise OrderRejected("an OTOCO's working order must be a LIMIT or LIMIT_MAKER order with a price")
            if working.quantity is None:
                raise OrderRejected("the working order needs a quantity", code=-1102)
            if working.type == "LIMIT_MAKER" and tr.limit_marketable(working.side, working.price, last):
                raise OrderRejected("Order would immediately match and take.", code=-2010)

    # --- placing ----------------------------------------------------------------------------
    async def place(self, req: ListRequest) -> tuple[ExchangeList, list[ExchangeOrder]]:
        """Place a list; returns it and the updates of legs that changed once placed (a marketable
        working order's fill and its OCO legs going to work)."""
        rules, last = await self.account.context(req.symbol)
        self.check(req, last)
        now = ps.now_ms()
        updates: list[ExchangeOrder] = []
        async with self.account.lock, self.account.db.transaction() as tx:
            existing = await ps.find_list(tx, req.list_client_id)
            if existing is not None:
                raise OrderRejected("Duplicate order sent.", code=-2010)
            algo = sum(1 for leg in (req.take_profit, req.stop) if leg.type in STOP_TYPES)
            await stops.check_algo(tx, req.symbol, algo)
            working = req.working if req.kind == "OTOCO" else None
            if working is not None:
                working = replace(working, list_client_id=req.list_client_id)
            legs = [replace(leg, list_client_id=req.list_client_id) for leg in (req.take_profit, req.stop)]
            await ps.insert_list(
                tx, list_client_id=req.list_client_id, kind=req.kind, symbol=req.symbol,
                contingency="OTO" if working else "OCO", working_id=working.client_order_id if working else None,
                take_profit_id=req.take_profit.client_order_id, stop_id=req.stop.client_order_id, now=now,
            )  # fmt: skip
            if working is None:
                for leg in legs:
                    await ps.insert_order(tx, leg, leg.quantity or Decimal(0), "PENDING_NEW", now)
                await self._arm(tx, rules, req.list_client_id, last, now)
            else:
                assert working.quantity is not None and working.price is not None
                need = self.account.need(working, working.quantity, last)
                await self.account.hold(tx, rules, working.side, need)
                await ps.insert_order(tx, working, working.quantity, "NEW", now, reserved=need)
                for leg in legs:
                    await ps.insert_order(tx, leg, leg.quantity or Decimal(0), "PENDING_NEW", now)
                if tr.limit_marketable(working.side, working.price, last):
                    price = min(last, working.price) if working.side == "BUY" else max(last, working.price)
                    filled = await self.account.execute(tx, working.client_order_id, rules, price, now)
                    updates += await self._activate(tx, rules, req.list_client_id, price, now)
                    updates.insert(0, filled)
            view = await ps.list_view(tx, await ps.list_row(tx, req.list_client_id))
        return view, updates

    async def _arm(self, tx: Connection, rules: SymbolRules, list_client_id: str, last: Decimal, now: int) -> None:
        """Put an OCO pair to work: the take-profit locks its funds, the stop only what more it needs."""
        row = await ps.list_row(tx, list_client_id)
        tp = await ps.order_row(tx, row["take_profit_id"])
        stop = await ps.order_row(tx, row["stop_id"])
        tp_need = self.account.need(ps.request_of(tp), Decimal(tp["quantity"]), last)
        stop_need = self.account.need(ps.request_of(stop), Decimal(stop["quantity"]), last)
        extra = max(Decimal(0), stop_need - tp_need) if stop["side"] == "BUY" else Decimal(0)
        for leg, amount in ((tp, tp_need), (stop, extra)):
            await self.account.hold(tx, rules, leg["side"], amount)
            fields: dict[str, ps.Column] = {"status": "NEW", "reserved": amount, "updated_ms": now}
            if leg["type"] in STOP_TYPES:
                req = ps.request_of(leg)
                state = tr.start(req.type, req.side, req.stop_price, req.trailing_delta, last)
                fields |= {"tracking": state.tracking, "extreme": state.extreme}
            await ps.update_order(tx, leg["client_order_id"], **fields)

    async def _activate(
        self, tx: Connection, rules: SymbolRules, list_client_id: str, last: Decimal, now: int
    ) -> list[ExchangeOrder]:
        """The working order filled: the OCO legs go to work (or expire if the account cannot hold them)."""
        row = await ps.list_row(tx, list_client_id)
        await ps.update_list(tx, list_client_id, contingency="OCO", updated_ms=now)
        try:
            await self._arm(tx, rules, list_client_id, last, now)
        except InsufficientBalance:
            for cid in (row["take_profit_id"], row["stop_id"]):
                await self.account.set_status(tx, rules, cid, "EXPIRED", now)
        return [ps.exchange_order(await ps.order_row(tx, cid)) for cid in (row["take_profit_id"], row["stop_id"])]

    # --- reacting to leg changes -------------------------------------------------------
    async def before_trigger(self, tx: Connection, rules: SymbolRules, row: Row, now: int) -> None:
        """An OCO leg's stop triggered: the other leg expires before it works."""
        lst = await self._live_list(tx, row["list_client_id"])
        if lst is None or row["client_order_id"] not in (lst["take_profit_id"], lst["stop_id"]):
            return
        other = lst["stop_id"] if row["client_order_id"] == lst["take_profit_id"] else lst["take_profit_id"]
        if (await ps.order_row(tx, other))["status"] in _OPEN_LEG:
            self._pending.append(await self.account.set_status(tx, rules, other, "EXPIRED", now))

    async def _live_list(self, tx: Connection, list_client_id: str | None) -> Row | None:
        if not list_client_id:
            return None
        lst = await ps.find_list(tx, list_client_id)
        return None if lst is None or lst["status_type"] == "ALL_DONE" else lst

    async def react(
        self, tx: Connection, rules: SymbolRules, changed: ExchangeOrder, price: Decimal
    ) -> tuple[list[ExchangeOrder], list[ExchangeList]]:
        """A leg changed (filled, triggered, expired): apply the list's rules; returns the other legs'
        updates and the list's, if it changed."""
        updates, self._pending = self._pending, []
        lst = await self._live_list(tx, changed.list_client_id)
        if lst is None:
            return updates, []
        now = ps.now_ms()
        cid, lcid = changed.client_order_id, lst["list_client_id"]
        legs = [lst["take_profit_id"], lst["stop_id"]]
        changed_list = False
        if cid == lst["working_id"]:
            if changed.status == "FILLED":
                updates += await self._activate(tx, rules, lcid, price, now)
                changed_list = True
            elif changed.status in ("CANCELED", "EXPIRED", "REJECTED"):
                for leg in legs:
                    updates.append(await self.account.set_status(tx, rules, leg, "EXPIRED", now))
        elif cid in legs:
            other = legs[1] if cid == legs[0] else legs[0]
            if (await ps.order_row(tx, other))["status"] in _OPEN_LEG:
                status = "CANCELED" if changed.status == "CANCELED" else "EXPIRED"
                updates.append(await self.account.set_status(tx, rules, other, status, now))
        done = await self._settle(tx, lcid, now)
        if done or changed_list:
            return updates, [await ps.list_view(tx, await ps.list_row(tx, lcid))]
        return updates, []

    async def _settle(self, tx: Connection, list_client_id: str, now: int) -> bool:
        """Mark the list ALL_DONE once no leg is open; returns whether it did."""
        lst = await ps.list_row(tx, list_client_id)
        for cid in (lst["working_id"], lst["take_profit_id"], lst["stop_id"]):
            if cid and (await ps.order_row(tx, cid))["status"] in _OPEN_LEG:
                return False
        await ps.update_list(tx, list_client_id, status_type="ALL_DONE", order_status="ALL_DONE", updated_ms=now)
        return True

    # --- cancel and queries -------------------------------------------------------------
    async def cancel_in(
        self, tx: Connection, rules: SymbolRules, list_client_id: str, now: int
    ) -> tuple[list[ExchangeOrder], list[ExchangeList]]:
        """Cancel every open leg of a live list (inside ``tx``)."""
        lst = await self._live_list(tx, list_client_id)
        if lst is None:
            raise OrderRejected("Unknown order sent.", code=-2011)
        updates: list[ExchangeOrder] = []
        for cid in (lst["working_id"], lst["take_profit_id"], lst["stop_id"]):
            if cid and (await ps.order_row(tx, cid))["status"] in _OPEN_LEG:
                updates.append(await self.account.set_status(tx, rules, cid, "CANCELED", now))
        await self._settle(tx, list_client_id, now)
        return updates, [await ps.list_view(tx, await ps.list_row(tx, list_client_id))]

    async def cancel(self, symbol: str, list_client_id: str) -> tuple[ExchangeList, list[ExchangeOrder]]:
        """Cancel a live list of ``symbol``; returns it and its legs' updates."""
        rules = await self.account.listed_rules(symbol)
        async with self.account.lock, self.account.db.transaction() as tx:
            row = await ps.find_list(tx, list_client_id)
            if row is None or row["symbol"] != symbol:
                raise OrderRejected("Unknown order sent.", code=-2011)
            updates, (view,) = await self.cancel_in(tx, rules, list_client_id, ps.now_ms())
        return view, updates

    async def query(self, list_client_id: str) -> ExchangeList | None:
        async with self.account.db.transaction() as tx:
            row = await ps.find_list(tx, list_client_id)
            return None if row is None else await ps.list_view(tx, row)

    async def open(self) -> list[ExchangeList]:
        async with self.account.db.transaction() as tx:
            return [await ps.list_view(tx, r) for r in await ps.open_lists(tx)]
