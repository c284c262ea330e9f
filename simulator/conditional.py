"""Conditional orders on the simulator's account: STOP_LOSS, STOP_LOSS_LIMIT, TAKE_PROFIT, TAKE_PROFIT_LIMIT.

Owns the stop and trailing state of every untriggered conditional order and the checks made
when one is placed (mandatory parameters, PRICE_FILTER on ``price`` and ``stopPrice``, LOT_SIZE,
NOTIONAL, PERCENT_PRICE_BY_SIDE, TRAILING_DELTA, MAX_NUM_ALGO_ORDERS and "would trigger
immediately"), all with Binance's codes and texts from :mod:`brokers.trigger_rules`.

An untriggered stop is open (status NEW, ``workingTime`` -1, not on the book) with its funds
locked: the quantity for a SELL, ``quantity × price`` for a BUY …_LIMIT and ``quantity × stopPrice``
(or × the last price for a trailing stop without one) for a BUY STOP_LOSS / TAKE_PROFIT.  Each
trade price (a posted trade, the price path as the clock advances, every level a taker's walk
traded at) moves the trigger states (:meth:`Conditionals.on_price`); a triggered STOP_LOSS /
TAKE_PROFIT walks the book at once as a MARKET order (what the book lacks expires), a …_LIMIT
order walks it up to its price and rests the rest like a LIMIT order (IOC/FOK: expires as a
LIMIT IOC/FOK would).  Order lists use the helpers here (:func:`new_order`, :func:`lock`,
:func:`release`) for their legs.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from brokers import trigger_rules as tr
from simulator.accounts import DEFAULT_STP, MIN_NOTIONAL, OrderError, SimAccount, SimOrder
from simulator.count_filters import CountFilters
from simulator.exchange_info import split_symbol

TRAILING_BOUNDS = tr.TrailingBounds(10, 2000, 10, 2000)
PERCENT_PRICE = tr.PercentPriceBySide(Decimal(5), Decimal("0.2"), Decimal(5), Decimal("0.2"))
PLAIN_TYPES = frozenset({"MARKET", "LIMIT", "LIMIT_MAKER"})
ALL_TYPES = PLAIN_TYPES | tr.CONDITIONAL_TYPES
PRICED = frozenset({"LIMIT", "LIMIT_MAKER", "STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT"})
TIF_REQUIRED = frozenset({"LIMIT", "STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT"})

TriggerHook = Callable[[SimOrder, int], None]


def _raise(refusal: tr.Refusal | None) -> None:
    if refusal is not None:
        raise OrderError(refusal.code, refusal.msg)


def _mandatory(name: str) -> OrderError:
    return OrderError(-1102, f"Mandatory parameter '{name}' was not sent, was empty/null, or malformed.")


def validate(
    account: SimAccount,
    *,
    side: str,
    otype: str,
    qty: Decimal | None,
    price: Decimal | None,
    stop: Decimal | None,
    delta: int | None,
    tif: str | None,
    last: Decimal,
    tick: Decimal,
    step: Decimal,
) -> Decimal:
    """Binance's checks of one order (not MARKET) before it exists; returns its quantity."""
    if otype not in ALL_TYPES:
        raise OrderError(-1116, "Invalid orderType.")
    if otype in PRICED and price is None:
        raise _mandatory("price")
    if otype in TIF_REQUIRED and tif not in ("GTC", "IOC", "FOK"):
        raise _mandatory("timeInForce")
    if qty is None:
        raise _mandatory("quantity")
    conditional = otype in tr.CONDITIONAL_TYPES
    if conditional and stop is None and delta is None:
        raise OrderError(-1102, "Param 'stopPrice' or 'trailingDelta' must be sent, but both were empty/null!")
    if not conditional and stop is not None:
        raise OrderError(-1106, "Parameter 'stopPrice' sent when not required.")
    if not conditional and delta is not None:
        raise OrderError(-1106, "Parameter 'trailingDelta' sent when not required.")
    account.check_filters(qty, price, tick, step, market=otype in ("STOP_LOSS", "TAKE_PROFIT"))
    if stop is not None:
        account.check_filters(qty, stop, tick, step, market=False)
    if qty * (price or stop or last) < MIN_NOTIONAL:
        raise OrderError(-1013, "Filter failure: NOTIONAL")
    if price is not None:
        _raise(tr.percent_price_by_side(side, price, last, PERCENT_PRICE))
    if delta is not None:
        _raise(tr.check_trailing_delta(otype, side, delta, TRAILING_BOUNDS))
    return qty


def need(side: str, otype: str, qty: Decimal, price: Decimal | None, stop: Decimal | None, last: Decimal) -> Decimal:
    """What an open order locks: the quantity for a SELL, its worth in the quote asset for a BUY."""
    if side == "SELL":
        return qty
    return qty * (price if otype in PRICED and price is not None else (stop or last))


def lock(account: SimAccount, order: SimOrder, amount: Decimal) -> None:
    """Lock ``amount`` of the asset ``order`` spends (refusing with -2010 if it is not free)."""
    base, quote = split_symbol(order.symbol)
    asset = quote if order.side == "BUY" else base
    if account.free_balance(asset) < amount:
        raise OrderError(-2010, "Account has insufficient balance for requested action.")
    account.free[asset] -= amount
    account.locked[asset] += amount
    order.reserved = amount


def release(account: SimAccount, order: SimOrder) -> None:
    """Unlock what ``order`` holds (its ``reserved`` amount, else a LIMIT order's) back to free."""
    base, quote = split_symbol(order.symbol)
    asset = quote if order.side == "BUY" else base
    remaining = order.orig_qty - order.executed_qty
    amount = order.reserved
    if amount is None:
        amount = remaining * order.price if order.side == "BUY" else remaining
    account.free_balance(asset)
    account.locked[asset] -= amount
    account.free[asset] += amount
    order.reserved = Decimal(0)


def new_order(
    account: SimAccount,
    *,
    symbol: str,
    side: str,
    otype: str,
    qty: Decimal,
    price: Decimal | None,
    stop: Decimal | None,
    delta: int | None,
    tif: str | None,
    client_id: str,
    now: int,
    list_id: int = -1,
    status: str = "NEW",
    stp: str = DEFAULT_STP,
) -> SimOrder:
    """Record an order on the account (nothing locked, no event yet)."""
    if (symbol, client_id) in account.by_client:
        existing = account.orders[account.by_client[(symbol, client_id)]]
        if existing.status in ("NEW", "PARTIALLY_FILLED", "PENDING_NEW"):
            raise OrderError(-2010, "Duplicate order sent.")
    order = SimOrder(
        symbol=symbol,
        order_id=account.take_order_id(),
        client_order_id=client_id,
        side=side,
        type=otype,
        time_in_force=tif if otype in TIF_REQUIRED else ("GTC" if otype == "LIMIT_MAKER" else None),
        orig_qty=qty,
        price=price or Decimal(0),
        status=status,
        time_ms=now,
        update_ms=now,
        stop_price=stop,
        trailing_delta=delta,
        order_list_id=list_id,
        working_time=-1 if (otype in tr.CONDITIONAL_TYPES or status == "PENDING_NEW") else now,
        reserved=Decimal(0),
        stp_mode=stp,
    )
    account.orders[order.order_id] = order
    account.by_client[(symbol, client_id)] = order.order_id
    return order


class Conditionals:
    """The trigger states of the account's untriggered conditional orders."""

    def __init__(self, account: SimAccount, count_filters: CountFilters | None = None) -> None:
        self.account = account
        self.count_filters = count_filters if count_filters is not None else CountFilters()
        """The MAX_NUM_* limits in force (the exchange's own; MAX_NUM_ALGO_ORDERS is read from it)."""
        self.states: dict[int, tr.TriggerState] = {}
        self.trigger_hooks: list[TriggerHook] = []
        """Called when an order triggers, before it works (an OCO cancels its other leg here)."""
        account.order_hooks.append(self._on_order_event)
        account.trade_hooks.append(self._on_trades)

    def _on_order_event(self, order: SimOrder, exec_type: str, now: int) -> None:
        if order.status not in ("NEW", "PARTIALLY_FILLED"):
            self.states.pop(order.order_id, None)

    def _on_trades(self, symbol: str, prices: list[Decimal], now: int) -> None:
        """A taker's walk traded at ``prices``: each is a trade the stops see, in order."""
        for price in prices:
            self.on_price(symbol, price, now)

    def open_algo(self, symbol: str) -> int:
        """Open STOP_LOSS / TAKE_PROFIT (…_LIMIT) orders of ``symbol`` (MAX_NUM_ALGO_ORDERS counts them)."""
        return sum(
            1
            for o in self.account.orders.values()
            if o.symbol == symbol and o.type in tr.CONDITIONAL_TYPES and o.status in ("NEW", "PARTIALLY_FILLED")
        )

    def check_new(self, symbol: str, otype: str, side: str, stop: Decimal | None, last: Decimal, n: int = 1) -> None:
        """MAX_NUM_ALGO_ORDERS, then "would trigger immediately" against ``last``."""
        _raise(tr.algo_limit(self.open_algo(symbol), n, self.count_filters.max_num_algo_orders))
        if stop is not None and tr.would_trigger_immediately(otype, side, stop, last):
            _raise(tr.WOULD_TRIGGER)

    def place(
        self,
        *,
        symbol: str,
        side: str,
        otype: str,
        qty: Decimal | None,
        price: Decimal | None,
        stop: Decimal | None,
        delta: int | None,
        tif: str | None,
        client_id: str,
        last: Decimal,
        tick: Decimal,
        step: Decimal,
        now: int,
        test: bool = False,
        stp: str = DEFAULT_STP,
    ) -> SimOrder:
        """``POST /api/v3/order`` for a conditional type: checked, funds locked, waiting for its trigger."""
        checked = validate(
            self.account, side=side, otype=otype, qty=qty, price=price, stop=stop, delta=delta, tif=tif,
            last=last, tick=tick, step=step,
        )  # fmt: skip
        self.check_new(symbol, otype, side, stop, last)
        amount = need(side, otype, checked, price, stop, last)
        base, quote = split_symbol(symbol)
        if self.account.free_balance(quote if side == "BUY" else base) < amount:
            raise OrderError(-2010, "Account has insufficient balance for requested action.")
        if (symbol, client_id) in self.account.by_client and not test:
            existing = self.account.orders[self.account.by_client[(symbol, client_id)]]
            if existing.status in ("NEW", "PARTIALLY_FILLED", "PENDING_NEW"):
                raise OrderError(-2010, "Duplicate order sent.")
        if test:
            return SimOrder(symbol, 0, client_id, side, otype, tif, checked, price or Decimal(0), "NEW", now, now)
        order = new_order(
            self.account, symbol=symbol, side=side, otype=otype, qty=checked, price=price, stop=stop, delta=delta,
            tif=tif, client_id=client_id, now=now, stp=stp,
        )  # fmt: skip
        self.arm(order, last, now)
        return order

    def arm(self, order: SimOrder, last: Decimal, now: int, *, locked: Decimal | None = None) -> None:
        """Lock an order's funds (``locked`` if given, e.g. an OCO's second leg), start its trigger
        state and announce it (executionReport NEW)."""
        amount = need(order.side, order.type, order.orig_qty, order.price or None, order.stop_price, last)
        lock(self.account, order, amount if locked is None else locked)
        order.status = "NEW"
        order.working_time = -1
        state = tr.start(order.type, order.side, order.stop_price, order.trailing_delta, last)
        if state.tracking:
            order.trailing_time = now
        self.states[order.order_id] = state
        self.account.report_order(order, "NEW", now, None)

    def on_price(self, symbol: str, price: Decimal, now: int) -> int:
        """A trade at ``price``: move the trigger states of ``symbol``; fire those that trigger."""
        fired = 0
        for order_id in [i for i, _ in self.states.items()]:
            order = self.account.orders[order_id]
            state = self.states.get(order_id)
            if order.symbol != symbol or state is None:
                continue
            after = tr.on_trade(state, price)
            if after.tracking and not state.tracking:
                order.trailing_time = now
            if after.triggered:
                del self.states[order_id]
                self.fire(order, price, now)
                fired += 1
            else:
                self.states[order_id] = after
        return fired

    def fire(self, order: SimOrder, last: Decimal, now: int) -> None:
        """A triggered order starts working: it walks the book as MARKET, or as LIMIT up to its price."""
        for hook in list(self.trigger_hooks):
            hook(order, now)
        if order.status != "NEW":
            return
        release(self.account, order)
        order.working_time = now
        order.update_ms = now
        base, quote = split_symbol(order.symbol)
        limit = order.price if order.type in tr.LIMIT_STOP_TYPES else None
        planned = self.account.plan(order.symbol, order.side, order.orig_qty, now, limit=limit, stp=order.stp_mode)
        if order.side == "SELL":
            cost = order.orig_qty
        elif limit is not None:
            cost = order.orig_qty * limit
        else:
            cost = sum((p * q for p, q in planned), Decimal(0))
        if self.account.free_balance(quote if order.side == "BUY" else base) < cost:
            self.account.expire(order, now, "REJECTED")
            return
        order.reserved = None
        if limit is not None and not planned and order.time_in_force not in ("IOC", "FOK"):
            if self.account.work(order, now) == "REST":
                self.account.report_order(order, "NEW", now, None)  # on the book now
            return
        self.account.work(order, now)
