"""Order lists on the simulator's account: OCO, OTO and OTOCO, and their ``listStatus`` events.

Owns every list's legs and state.  An OCO's two legs cancel each other: when one fills (or
partly fills) or its stop triggers, the other expires (``OCO_TRIGGER``).  An OTO's / OTOCO's
pending legs (status PENDING_NEW, ``workingTime`` -1, nothing locked) go on the book only
when the working order is fully filled; an OTOCO then works as an OCO.  A marketable working
order walks the book like any LIMIT order; an IOC/FOK working order never rests: when it
expires (unfilled, or only partly filled) the pending legs expire with it
(``OTO_PHASE_ONE_EXPIRED``) and so does the list.  Cancelling any leg cancels the whole list.
Funds: a SELL OCO locks its quantity once; a BUY OCO locks the larger of its two legs' worth.
Every change of a list emits ``listStatus`` (Binance's shape) after the legs' ``executionReport`` events.
"""

from __future__ import annotations

from decimal import Decimal

from brokers import trigger_rules as tr
from simulator.accounts import OrderError, SimAccount, SimOrder
from simulator.conditional import Conditionals, lock, need, new_order, release, validate
from simulator.exchange_info import split_symbol
from simulator.order_list_model import Leg, SimOrderList, list_status_event, order_report

__all__ = ["Leg", "OrderLists", "SimOrderList", "order_report"]

OPEN_LEG = ("NEW", "PARTIALLY_FILLED", "PENDING_NEW")
ABOVE_TYPES = frozenset({"STOP_LOSS_LIMIT", "STOP_LOSS", "LIMIT_MAKER", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"})


class OrderLists:
    """The account's order lists; follows its order events to keep the lists' rules."""

    def __init__(self, account: SimAccount, conditionals: Conditionals) -> None:
        self.account = account
        self.conditionals = conditionals
        self.lists: dict[int, SimOrderList] = {}
        self.by_client: dict[str, int] = {}
        self._next = 1
        account.order_hooks.append(self._on_order_event)
        conditionals.trigger_hooks.append(self._on_trigger)

    @property
    def _max_algo(self) -> int:
        """MAX_NUM_ALGO_ORDERS in force (the count filters the conditional orders share)."""
        return self.conditionals.count_filters.max_num_algo_orders

    # --- placing -----------------------------------------------------------------------
    def _new_list(self, symbol: str, list_client_id: str, contingency: str, now: int) -> SimOrderList:
        existing = self.lists.get(self.by_client.get(list_client_id, -1))
        if existing is not None and not existing.done:
            raise OrderError(-2010, "Duplicate order sent.")
        return SimOrderList(self._next, symbol, list_client_id, contingency, [], now, extra={"cid": {}})

    def _register(self, lst: SimOrderList, orders: list[SimOrder]) -> None:
        self._next += 1
        lst.order_ids = [o.order_id for o in orders]
        lst.extra["cid"] = {o.order_id: o.client_order_id for o in orders}
        self.lists[lst.list_id] = lst
        self.by_client[lst.list_client_id] = lst.list_id

    def _check_oco(
        self, symbol: str, side: str, above: Leg, below: Leg, last: Decimal, tick: Decimal, step: Decimal
    ) -> tuple[Leg, Leg]:
        """The OCO rules; returns (take-profit leg, stop-loss leg)."""
        if above.otype not in ABOVE_TYPES:
            raise OrderError(-1116, "Invalid orderType.")
        if below.otype not in ABOVE_TYPES:
            raise OrderError(-1116, "Invalid orderType.")
        refusal = tr.oco_leg_positions(side, above.otype, below.otype)
        if refusal is not None:
            raise OrderError(refusal.code, refusal.msg)
        tp, stop = (above, below) if side == "SELL" else (below, above)
        for leg in (tp, stop):
            validate(
                self.account, side=leg.side, otype=leg.otype, qty=leg.qty, price=leg.price, stop=leg.stop,
                delta=leg.delta, tif=leg.tif, last=last, tick=tick, step=step,
            )  # fmt: skip
        away = Decimal(1) if side == "SELL" else Decimal(-1)
        tp_ref = (tp.price if tp.otype != "TAKE_PROFIT" else tp.stop) or (last + away)
        stop_ref = stop.stop if stop.stop is not None else last - away
        refusal = tr.oco_prices(side, tp_ref, stop_ref, last)
        if refusal is not None:
            raise OrderError(refusal.code, refusal.msg)
        algo = sum(1 for leg in (tp, stop) if leg.otype in tr.CONDITIONAL_TYPES)
        refusal = tr.algo_limit(self.conditionals.open_algo(symbol), algo, self._max_algo)
        if refusal is not None:
            raise OrderError(refusal.code, refusal.msg)
        return tp, stop

    def place_oco(
        self, symbol: str, list_client_id: str, side: str, above: Leg, below: Leg,
        last: Decimal, tick: Decimal, step: Decimal, now: int,
    ) -> tuple[SimOrderList, list[SimOrder]]:  # fmt: skip
        """``POST /api/v3/orderList/oco``: both legs working at once."""
        tp, stop = self._check_oco(symbol, side, above, below, last, tick, step)
        lst = self._new_list(symbol, list_client_id, "OCO", now)
        tp_need = need(side, tp.otype, tp.qty or Decimal(0), tp.price, tp.stop, last)
        stop_need = need(side, stop.otype, stop.qty or Decimal(0), stop.price, stop.stop, last)
        base, quote = split_symbol(symbol)
        if self.account.free_balance(quote if side == "BUY" else base) < max(tp_need, stop_need):
            raise OrderError(-2010, "Account has insufficient balance for requested action.")
        orders = [self._create(symbol, leg, now, lst.list_id, "PENDING_NEW") for leg in (tp, stop)]
        self._register(lst, orders)
        lst.oco_ids = tuple(o.order_id for o in orders)
        self._arm_oco(lst, last, now)
        self._emit(lst, now)
        return lst, self._legs(lst)

    def place_oto(
        self, symbol: str, list_client_id: str, working: Leg, pending: list[Leg],
        last: Decimal, tick: Decimal, step: Decimal, now: int,
    ) -> tuple[SimOrderList, list[SimOrder]]:  # fmt: skip
        """``POST /api/v3/orderList/oto`` (one pending leg) or ``/otoco`` (an OCO pair, given above then below)."""
        if working.otype not in ("LIMIT", "LIMIT_MAKER"):
            raise OrderError(-1116, "Invalid orderType.")
        validate(
            self.account, side=working.side, otype=working.otype, qty=working.qty, price=working.price, stop=None,
            delta=None, tif=working.tif, last=last, tick=tick, step=step,
        )  # fmt: skip
        assert working.price is not None and working.qty is not None
        marketable = self.account.marketable(symbol, working.side, working.price, now)
        if working.otype == "LIMIT_MAKER" and marketable:
            raise OrderError(-2010, "Order would immediately match and take.")
        if len(pending) == 2:
            pending = list(self._check_oco(symbol, pending[0].side, pending[0], pending[1], last, tick, step))
        else:
            leg = pending[0]
            if leg.otype == "MARKET":
                if leg.qty is None:
                    raise OrderError(
                        -1102, "Mandatory parameter 'pendingQuantity' was not sent, was empty/null, or malformed."
                    )
                self.account.check_filters(leg.qty, None, tick, step, market=True)
            else:
                validate(
                    self.account, side=leg.side, otype=leg.otype, qty=leg.qty, price=leg.price, stop=leg.stop,
                    delta=leg.delta, tif=leg.tif, last=last, tick=tick, step=step,
                )  # fmt: skip
            if leg.otype in tr.CONDITIONAL_TYPES:
                refusal = tr.algo_limit(self.conditionals.open_algo(symbol), 1, self._max_algo)
                if refusal is not None:
                    raise OrderError(refusal.code, refusal.msg)
        lst = self._new_list(symbol, list_client_id, "OTO", now)
        base, quote = split_symbol(symbol)
        if self.account.free_balance(quote if working.side == "BUY" else base) < need(
            working.side, working.otype, working.qty, working.price, None, last
        ):
            raise OrderError(-2010, "Account has insufficient balance for requested action.")
        work = self._create(symbol, working, now, lst.list_id, "NEW")
        legs = [self._create(symbol, leg, now, lst.list_id, "PENDING_NEW") for leg in pending]
        self._register(lst, [work, *legs])
        lst.working_id = work.order_id
        lst.pending_ids = tuple(o.order_id for o in legs)
        if len(legs) == 2:
            lst.oco_ids = lst.pending_ids
        lock(self.account, work, need(work.side, work.type, work.orig_qty, work.price, None, last))
        self.account.report_order(work, "NEW", now, None)
        for leg_order in legs:
            self.account.report_order(leg_order, "NEW", now, None)
        self._emit(lst, now)
        if marketable or work.time_in_force in ("IOC", "FOK"):
            release(self.account, work)
            work.reserved = None
            self.account.work(work, now)
        return lst, self._legs(lst)

    def _create(self, symbol: str, leg: Leg, now: int, list_id: int, status: str) -> SimOrder:
        assert leg.qty is not None
        return new_order(
            self.account, symbol=symbol, side=leg.side, otype=leg.otype, qty=leg.qty, price=leg.price,
            stop=leg.stop, delta=leg.delta, tif=leg.tif, client_id=leg.client_id, now=now, list_id=list_id,
            status=status, stp=leg.stp,
        )  # fmt: skip

    def _legs(self, lst: SimOrderList) -> list[SimOrder]:
        return [self.account.orders[i] for i in lst.order_ids]

    # --- working the legs -------------------------------------------------------------
    def _arm_oco(self, lst: SimOrderList, last: Decimal, now: int) -> None:
        """Put an OCO pair to work: the take-profit leg locks its funds, the stop leg only the rest."""
        tp, stop = (self.account.orders[i] for i in lst.oco_ids)
        tp_need = need(tp.side, tp.type, tp.orig_qty, tp.price or None, tp.stop_price, last)
        stop_need = need(stop.side, stop.type, stop.orig_qty, stop.price or None, stop.stop_price, last)
        extra = max(Decimal(0), stop_need - tp_need) if stop.side == "BUY" else Decimal(0)
        try:
            self._arm(tp, last, now)
            self.conditionals.arm(stop, last, now, locked=extra)
        except OrderError:
            self._expire_open(lst, now)

    def _arm(self, order: SimOrder, last: Decimal, now: int, locked: Decimal | None = None) -> None:
        if order.type in tr.CONDITIONAL_TYPES:
            self.conditionals.arm(order, last, now, locked=locked)
            return
        lock(self.account, order, need(order.side, order.type, order.orig_qty, order.price, None, last))
        order.status = "NEW"
        order.working_time = now
        self.account.report_order(order, "NEW", now, None)

    def _activate(self, lst: SimOrderList, last: Decimal, now: int) -> None:
        """The working order filled: its pending legs go to work."""
        if lst.oco_ids:
            lst.contingency = "OCO"
            self._arm_oco(lst, last, now)
        else:
            (leg,) = (self.account.orders[i] for i in lst.pending_ids)
            if leg.type == "MARKET":
                leg.status, leg.working_time = "NEW", now
                base, quote = split_symbol(leg.symbol)
                planned = self.account.plan(leg.symbol, leg.side, leg.orig_qty, now, stp=leg.stp_mode)
                cost = leg.orig_qty if leg.side == "SELL" else sum((p * q for p, q in planned), Decimal(0))
                if self.account.free_balance(quote if leg.side == "BUY" else base) < cost:
                    self._expire(leg, now)
                else:
                    leg.reserved = None
                    self.account.work(leg, now)
            else:
                try:
                    self._arm(leg, last, now)
                except OrderError:
                    self._expire(leg, now)
                if leg.status == "NEW" and leg.type in ("LIMIT", "LIMIT_MAKER"):
                    if self.account.marketable(leg.symbol, leg.side, leg.price, now):
                        if leg.type == "LIMIT_MAKER":
                            self._cancel_leg(leg, now, "EXPIRED")
                        else:
                            release(self.account, leg)
                            leg.reserved = None
                            self.account.work(leg, now)
        self.conditionals.on_price(lst.symbol, last, now)
        self._check_done(lst, now)

    def _expire(self, order: SimOrder, now: int) -> None:
        self.account.expire(order, now, "REJECTED")

    def _cancel_leg(self, order: SimOrder, now: int, status: str, reason: str | None = None) -> None:
        if order.status in ("PENDING_NEW", "NEW", "PARTIALLY_FILLED"):
            if order.status != "PENDING_NEW":
                release(self.account, order)
            order.status, order.update_ms = status, now
            if status == "EXPIRED":
                order.expiry_reason = reason or "OCO_TRIGGER"
            self.account.report_order(order, status, now, None)

    def _expire_open(self, lst: SimOrderList, now: int) -> None:
        for order in self._legs(lst):
            self._cancel_leg(order, now, "EXPIRED", "REJECTED")

    def _on_trigger(self, order: SimOrder, now: int) -> None:
        lst = self.lists.get(order.order_list_id)
        if lst is None or lst.done or order.order_id not in lst.oco_ids:
            return
        closing, lst.closing = lst.closing, True
        try:
            for other in lst.oco_ids:
                if other != order.order_id:
                    self._cancel_leg(self.account.orders[other], now, "EXPIRED")
        finally:
            lst.closing = closing

    def _on_order_event(self, order: SimOrder, exec_type: str, now: int) -> None:
        lst = self.lists.get(order.order_list_id)
        if lst is None or lst.done or lst.closing:
            return
        lst.closing = True
        try:
            if exec_type == "TRADE" and order.order_id in lst.oco_ids:
                for other in lst.oco_ids:
                    if other != order.order_id:
                        self._cancel_leg(self.account.orders[other], now, "EXPIRED")
            elif exec_type == "TRADE" and order.order_id == lst.working_id and order.status == "FILLED":
                price = Decimal(order.fills[-1]["price"]) if order.fills else order.price
                self._activate(lst, price, now)
            elif exec_type in ("CANCELED", "EXPIRED", "REJECTED", "TRADE_PREVENTION"):
                status = "CANCELED" if exec_type == "CANCELED" else "EXPIRED"
                reason = "OTO_PHASE_ONE_EXPIRED" if order.order_id == lst.working_id else "OCO_TRIGGER"
                for leg in self._legs(lst):
                    self._cancel_leg(leg, now, status, reason)
        finally:
            lst.closing = False
        self._check_done(lst, now)

    def _check_done(self, lst: SimOrderList, now: int) -> None:
        if lst.done or lst.closing or any(o.status in OPEN_LEG for o in self._legs(lst)):
            return
        lst.status_type = lst.order_status = "ALL_DONE"
        lst.time_ms = now
        self._emit(lst, now)

    def cancel(self, lst: SimOrderList, now: int) -> list[SimOrder]:
        """``DELETE /api/v3/orderList`` (or a leg's ``DELETE /api/v3/order``): every open leg cancelled."""
        if lst.done:
            raise OrderError(-2011, "Unknown order sent.")
        lst.closing = True
        try:
            for order in self._legs(lst):
                self._cancel_leg(order, now, "CANCELED")
        finally:
            lst.closing = False
        self._check_done(lst, now)
        return self._legs(lst)

    def _emit(self, lst: SimOrderList, now: int) -> None:
        self.account.emit_event(list_status_event(lst, now))

    def find(self, list_id: int | None, list_client_id: str | None) -> SimOrderList | None:
        if list_id is not None:
            lst = self.lists.get(list_id)
            if lst is not None and list_client_id and lst.list_client_id != list_client_id:
                return None
            return lst
        if list_client_id:
            return self.lists.get(self.by_client.get(list_client_id, -1))
        return None
