"""The simulator's one trading account: balances, orders, trades and the matching rules.

Binance spot semantics, in Decimal, against the market's book (:class:`~simulator.book.OrderBooks`):

* A taker walks the book: a MARKET order takes the best opposite levels one after the other,
  one fill per level (the ``fills`` of the FULL answer, one TRADE ``executionReport`` each),
  until its quantity is filled, its ``quoteOrderQty`` is spent (each level's share floored to
  the LOT_SIZE step; ``origQty`` is then the quantity the walk bought or sold) or it reaches the
  book's walk depth (book.py); what is left expires (status EXPIRED, ``INSUFFICIENT_LIQUIDITY``).
  Each level taken leaves the book and moves the last price there (see book.py).
* A LIMIT order is marketable when its price reaches the best opposite level; it walks up to
  its price, then the rest rests (GTC, PARTIALLY_FILLED if it took anything), expires (IOC,
  ``UNFILLED_IOC_QUANTITY_EXPIRED``), or — FOK — the whole order expires untouched unless the
  book can fill all of it within its price (``UNFILLED_FOK_ORDER_EXPIRED``).  LIMIT_MAKER that
  would take (from the book or an own resting order) is rejected (-2010).
* Self-trade prevention: a walk meets the account's own resting orders at their price, in
  price-time priority with the book's levels (an own order older than the derived book stands
  ahead of the level at its price), and applies the taker's ``selfTradePreventionMode``
  (``EXPIRE_MAKER`` unless sent): NONE trades (the resting order fills as maker); EXPIRE_MAKER
  expires the resting order and walks on; EXPIRE_TAKER expires the taker's rest; EXPIRE_BOTH
  both.  An expired order's status is EXPIRED_IN_MATCH, its report's execution type
  TRADE_PREVENTION with ``v``, ``A``, ``B``, ``u`` (-1: no trade group), ``U``, ``Cs``, ``pl``,
  ``pL``, ``pY``; its REST views carry ``preventedMatchId`` and ``preventedQuantity``; each
  prevented match is kept for ``GET /api/v3/myPreventedMatches``.
* Otherwise a resting limit order is not part of the derived book; it fills when the market
  trades through it (:meth:`SimAccount.match`, called on posted trades and when the clock moves
  the price path): a trade strictly beyond its price fills the rest of it whole at its price
  (the book ahead of it was taken), a trade exactly at its price fills it only up to the traded
  quantity (PARTIALLY_FILLED, the rest stays), shared by the orders at that price in price then
  time priority.
* Reports come in Binance's order: NEW first, then one TRADE per fill, then EXPIRED for what
  expires; every report has an execution id ``I`` and the ``M`` flag of user-data-stream.md.

Funds: a resting order locks what it may spend (the rest × its price for a BUY, the rest for a
SELL); a taker fill spends from free funds, a resting order's fill from its lock (in proportion
when it fills in parts).  Commission is taken from the asset received: the account's taker rate
on a fill that takes, its maker rate on a resting order's fill (both 0.1 % unless set:
``POST /sim/v1/commission``).  Every state change produces an ``executionReport`` for the WS-API
subscribers, followed by an ``outboundAccountPosition`` only when it changed a balance
(user-data-stream.md), and errors carry Binance's codes and texts (-1013 filter failures, -2010
balance/duplicate/would-take, -2011 unknown order on cancel, -2013 unknown order on query,
-1130 an STP mode the symbol does not allow).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from simulator.book import OrderBooks
from simulator.exchange_info import split_symbol, step_size_for, tick_size_for
from simulator.execution_report import execution_report
from simulator.prices import start_price

FEE = Decimal("0.001")
MIN_NOTIONAL = Decimal("5")
MAX_QTY = Decimal("9000")
MARKET_MAX_QTY = Decimal("100")
MAX_PRICE = Decimal("1000000")
EIGHT = Decimal("0.00000001")
"""Commission is charged to 8 decimals, as the reports and the balances show it."""

STP_MODES = frozenset({"NONE", "EXPIRE_TAKER", "EXPIRE_MAKER", "EXPIRE_BOTH"})
DEFAULT_STP = "EXPIRE_MAKER"
TAKER_TYPES = frozenset({"MARKET", "STOP_LOSS", "TAKE_PROFIT"})
"""Types that walk the book without a price limit."""
OPEN = ("NEW", "PARTIALLY_FILLED")

Listener = Callable[[dict[str, Any]], None]
TradeHook = Callable[[str, list[Decimal], int], None]


class OrderError(Exception):
    """A Binance error answer for an order request."""

    def __init__(self, code: int, msg: str, status: int = 400) -> None:
        super().__init__(msg)
        self.code, self.msg, self.status = code, msg, status


def _s(x: Decimal) -> str:
    return f"{x:.8f}"


@dataclass
class SimOrder:
    symbol: str
    order_id: int
    client_order_id: str
    side: str
    type: str
    time_in_force: str | None
    orig_qty: Decimal
    price: Decimal
    status: str
    time_ms: int
    update_ms: int
    executed_qty: Decimal = Decimal(0)
    cumulative_quote: Decimal = Decimal(0)
    fills: list[dict[str, Any]] = field(default_factory=list)
    stop_price: Decimal | None = None
    trailing_delta: int | None = None
    order_list_id: int = -1
    working_time: int | None = None
    """When the order went on the book (-1: an untriggered stop or a pending list leg); None: ``time_ms``."""
    reserved: Decimal | None = None
    """Funds locked for the order when not ``rest × price`` (BUY) / ``rest`` (SELL): stops and list legs."""
    trailing_time: int = -1
    quote_qty: Decimal | None = None
    """A MARKET order's ``quoteOrderQty`` (``origQuoteOrderQty``)."""
    stp_mode: str = DEFAULT_STP
    expiry_reason: str | None = None
    """Binance's ``expiryReason`` / ``eR`` once the order expired."""
    prevented_match_id: int | None = None
    """The prevented match that expired the order (status EXPIRED_IN_MATCH), if one did."""
    prevented_qty: Decimal = Decimal(0)
    """The quantity of the order that self-trade prevention expired."""

    @property
    def working(self) -> int:
        return self.time_ms if self.working_time is None else self.working_time

    @property
    def remaining(self) -> Decimal:
        return self.orig_qty - self.executed_qty

    def rest_view(self) -> dict[str, Any]:
        view = {
            "symbol": self.symbol,
            "orderId": self.order_id,
            "orderListId": self.order_list_id,
            "clientOrderId": self.client_order_id,
            "price": _s(self.price),
            "origQty": _s(self.orig_qty),
            "executedQty": _s(self.executed_qty),
            "cummulativeQuoteQty": _s(self.cumulative_quote),
            "status": self.status,
            "timeInForce": self.time_in_force or "GTC",
            "type": self.type,
            "side": self.side,
            "stopPrice": _s(self.stop_price or Decimal(0)),
            "icebergQty": "0.00000000",
            "time": self.time_ms,
            "updateTime": self.update_ms,
            "isWorking": self.status in OPEN and self.working != -1,
            "workingTime": self.working,
            "origQuoteOrderQty": _s(self.quote_qty or Decimal(0)),
            "selfTradePreventionMode": self.stp_mode,
        }
        if self.trailing_delta is not None:
            view["trailingDelta"] = self.trailing_delta
            view["trailingTime"] = self.trailing_time
        if self.expiry_reason is not None:
            view["expiryReason"] = self.expiry_reason
        if self.prevented_match_id is not None:
            view["preventedMatchId"] = self.prevented_match_id
            view["preventedQuantity"] = _s(self.prevented_qty)
        return view


def _floor(x: Decimal, step: Decimal) -> Decimal:
    return (x / step).to_integral_value(rounding=ROUND_FLOOR) * step


def symbol_step(symbol: str) -> Decimal:
    """The LOT_SIZE step of ``symbol``."""
    return Decimal(repr(step_size_for(start_price(symbol))))


def beyond(side: str, price: Decimal, limit: Decimal) -> bool:
    """Whether ``price`` is worse than ``limit`` for a ``side`` order (a BUY pays more, a SELL gets less)."""
    return price > limit if side == "BUY" else price < limit


@dataclass(frozen=True, slots=True)
class Liquidity:
    """What a taker meets next: a level of the book (``maker`` None) or one of the account's own resting orders."""

    price: Decimal
    qty: Decimal
    maker: SimOrder | None = None


class SimAccount:
    """Balances, orders and trades of the simulator's account."""

    def __init__(self, balances: dict[str, Decimal], books: OrderBooks | None = None) -> None:
        self.free: dict[str, Decimal] = {a.upper(): Decimal(v) for a, v in balances.items()}
        self.locked: dict[str, Decimal] = {a: Decimal(0) for a in self.free}
        self.orders: dict[int, SimOrder] = {}
        self.by_client: dict[tuple[str, str], int] = {}
        self.trades: list[dict[str, Any]] = []
        self.books = books if books is not None else OrderBooks({})
        """The markets' books the account's takers walk (the exchange gives its own)."""
        self.maker_fee = FEE
        self.taker_fee = FEE
        self._next_order = 1
        self._next_trade = 1
        self._next_exec = 1
        self.prevented: list[dict[str, Any]] = []
        """Every prevented match, as ``GET /api/v3/myPreventedMatches`` answers it."""
        self._reported: dict[str, tuple[Decimal, Decimal]] = {a: (f, Decimal(0)) for a, f in self.free.items()}
        """(free, locked) per asset as the last ``outboundAccountPosition`` showed it (the opening balances)."""
        self.listeners: list[Listener] = []
        self.order_hooks: list[Callable[[SimOrder, str, int], None]] = []
        """Called after each order event (order lists and conditional orders follow fills and cancels)."""
        self.trade_hooks: list[TradeHook] = []
        """Called after a taker's walk with the prices it traded at, in order (stops follow the trades)."""

    # --- rules ---------------------------------------------------------------------------
    @staticmethod
    def steps(start_price: float) -> tuple[Decimal, Decimal]:
        return Decimal(repr(tick_size_for(start_price))), Decimal(repr(step_size_for(start_price)))

    def check_filters(self, qty: Decimal, price: Decimal | None, tick: Decimal, step: Decimal, market: bool) -> None:
        """PRICE_FILTER, LOT_SIZE and (``market``) MARKET_LOT_SIZE of filters.md; raises OrderError -1013."""
        if price is not None:
            if price < tick or price > MAX_PRICE or (price - tick) % tick != 0:
                raise OrderError(-1013, "Filter failure: PRICE_FILTER")
        if qty < step or qty > MAX_QTY or (qty - step) % step != 0:
            raise OrderError(-1013, "Filter failure: LOT_SIZE")
        if market and qty > MARKET_MAX_QTY:
            raise OrderError(-1013, "Filter failure: MARKET_LOT_SIZE")

    def take_order_id(self) -> int:
        """The next order id (each placed order, conditional or in a list, takes one)."""
        self._next_order += 1
        return self._next_order - 1

    # --- balances ----------------------------------------------------------------------
    def free_balance(self, asset: str) -> Decimal:
        """The free amount of ``asset`` (an asset not held yet is added at 0, free and locked)."""
        self.free.setdefault(asset, Decimal(0))
        self.locked.setdefault(asset, Decimal(0))
        return self.free[asset]

    def balances_view(self) -> list[dict[str, str]]:
        return [
            {"asset": a, "free": _s(self.free[a]), "locked": _s(self.locked.get(a, Decimal(0)))}
            for a in sorted(self.free)
        ]

    # --- events ------------------------------------------------------------------------
    def report_order(
        self, order: SimOrder, exec_type: str, now: int, fill: dict[str, Any] | None,
        extra: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Send ``order``'s ``executionReport`` (then the balances, if they changed) and run the order hooks."""
        report = execution_report(order, exec_type, now, fill, self._next_exec)
        if extra:
            report |= extra
        self._next_exec += 1
        for listener in list(self.listeners):
            listener(report)
        self.report_balances(order.symbol, now)
        for hook in list(self.order_hooks):
            hook(order, exec_type, now)

    def report_balances(self, symbol: str, now: int) -> None:
        """An ``outboundAccountPosition`` of ``symbol``'s two assets, only if one changed since the last one sent.

        user-data-stream.md: the event is sent "any time an account balance has changed", so a
        MARKET order's NEW or an expiry that unlocks nothing sends none.
        """
        base, quote = split_symbol(symbol)
        now_balances = {a: (self.free.get(a, Decimal(0)), self.locked.get(a, Decimal(0))) for a in (base, quote)}
        zero = (Decimal(0), Decimal(0))
        if all(self._reported.get(a, zero) == v for a, v in now_balances.items()):
            return
        self._reported |= now_balances
        position = {
            "e": "outboundAccountPosition",
            "E": now,
            "u": now,
            "B": [{"a": a, "f": _s(f), "l": _s(locked)} for a, (f, locked) in now_balances.items()],
        }
        for listener in list(self.listeners):
            listener(position)

    def emit_event(self, event: dict[str, Any]) -> None:
        """Send another user-data event (``listStatus``) to the WS-API subscribers."""
        for listener in list(self.listeners):
            listener(event)

    # --- orders --------------------------------------------------------------------------
    def _own_resting(self, symbol: str, taker_side: str) -> list[SimOrder]:
        """The account's resting orders a ``taker_side`` order could meet, best price then oldest first."""
        side = "SELL" if taker_side == "BUY" else "BUY"
        rows = [
            o
            for o in self.orders.values()
            if o.symbol == symbol and o.side == side and o.status in OPEN and o.working != -1
            and o.type not in TAKER_TYPES
        ]  # fmt: skip
        rows.sort(key=lambda o: (o.price if side == "SELL" else -o.price, o.working, o.order_id))
        return rows

    def liquidity(self, symbol: str, taker_side: str, now: int) -> Iterator[Liquidity]:
        """What a ``taker_side`` order meets now, in price-time priority, read lazily (a walk takes as it goes).

        The book's levels (book.py, at most its walk depth) merged with the account's own resting
        orders: at one price, an own order placed before the book was derived stands ahead of the
        level, a newer one behind it.
        """
        own = self._own_resting(symbol, taker_side)
        since = self.books.since_ms(symbol, now)
        j = 0
        for price, qty in self.books.opposite(symbol, taker_side, now):
            while j < len(own) and (
                beyond(taker_side, price, own[j].price) or (own[j].price == price and own[j].working < since)
            ):
                order = own[j]
                j += 1
                if order.status in OPEN:
                    yield Liquidity(order.price, order.remaining, order)
            yield Liquidity(price, qty)

    def plan(
        self, symbol: str, side: str, qty: Decimal | None, now: int, *, limit: Decimal | None = None,
        quote: Decimal | None = None, stp: str = DEFAULT_STP,
    ) -> list[tuple[Decimal, Decimal]]:  # fmt: skip
        """The fills a taker would get now: (price, quantity) per level, best first; nothing is taken.

        ``qty`` bounds the quantity, ``quote`` the quote asset spent (each level's share floored
        to the LOT_SIZE step), ``limit`` the worst price.  The account's own resting orders on the
        way count as its STP mode ``stp`` treats them: NONE trades with them, EXPIRE_MAKER passes
        them (they would expire), EXPIRE_TAKER and EXPIRE_BOTH stop there.
        """
        step = symbol_step(symbol)
        out: list[tuple[Decimal, Decimal]] = []
        left_qty, left_quote = qty, quote
        for liq in self.liquidity(symbol, side, now):
            if limit is not None and beyond(side, liq.price, limit):
                break
            if liq.maker is not None and stp != "NONE":
                if stp == "EXPIRE_MAKER":
                    continue
                break
            take = liq.qty
            if left_qty is not None:
                take = min(take, left_qty)
            if left_quote is not None:
                take = min(take, _floor(left_quote / liq.price, step))
            if take <= 0:
                break
            out.append((liq.price, take))
            if left_qty is not None:
                left_qty -= take
                if left_qty <= 0:
                    break
            if left_quote is not None:
                left_quote -= take * liq.price
        return out

    def marketable(self, symbol: str, side: str, price: Decimal, now: int) -> bool:
        """Whether a ``side`` order at ``price`` would meet anything now (the book or an own resting order)."""
        first = next(iter(self.liquidity(symbol, side, now)), None)
        return first is not None and not beyond(side, first.price, price)

    def place(
        self,
        *,
        symbol: str,
        side: str,
        otype: str,
        qty: Decimal | None,
        quote_qty: Decimal | None,
        price: Decimal | None,
        tif: str | None,
        client_id: str,
        last: Decimal,
        tick: Decimal,
        step: Decimal,
        now: int,
        test: bool = False,
        stp: str | None = None,
    ) -> SimOrder:
        """``POST /api/v3/order`` for MARKET, LIMIT and LIMIT_MAKER: checked, announced, matched."""
        if (symbol, client_id) in self.by_client:
            existing = self.orders[self.by_client[(symbol, client_id)]]
            if existing.status in OPEN:
                raise OrderError(-2010, "Duplicate order sent.")
        base, quote = split_symbol(symbol)
        market = otype == "MARKET"
        by_quote = market and qty is None
        if market:
            if qty is None:
                if quote_qty is None:
                    raise OrderError(
                        -1102, "Param 'quantity' or 'quoteOrderQty' must be sent, but both were empty/null!"
                    )
                qty = _floor(quote_qty / last, step)
            self.check_filters(qty, None, tick, step, market=True)
            if qty * last < MIN_NOTIONAL:
                raise OrderError(-1013, "Filter failure: NOTIONAL")
        else:
            if price is None:
                raise OrderError(-1102, "Mandatory parameter 'price' was not sent, was empty/null, or malformed.")
            if qty is None:
                raise OrderError(-1102, "Mandatory parameter 'quantity' was not sent, was empty/null, or malformed.")
            self.check_filters(qty, price, tick, step, market=False)
            if qty * price < MIN_NOTIONAL:
                raise OrderError(-1013, "Filter failure: NOTIONAL")
        stp = stp or DEFAULT_STP
        if stp not in STP_MODES:
            raise OrderError(-1130, "Data sent for parameter 'selfTradePreventionMode' is not valid.")
        limit = None if market else price
        fills = self.plan(
            symbol, side, None if by_quote else qty, now, limit=limit, quote=quote_qty if by_quote else None, stp=stp
        )
        if otype == "LIMIT_MAKER" and price is not None and self.marketable(symbol, side, price, now):
            raise OrderError(-2010, "Order would immediately match and take.")
        if by_quote:
            qty = sum((q for _, q in fills), Decimal(0)) or qty  # what the quote buys; nothing: as estimated
        if side == "SELL":
            need_asset, need = base, qty
        elif market:
            need_asset, need = quote, sum((p * q for p, q in fills), Decimal(0))
        else:
            need_asset, need = quote, qty * (price or Decimal(0))
        if self.free_balance(need_asset) < need:
            raise OrderError(-2010, "Account has insufficient balance for requested action.")
        if test:
            return SimOrder(symbol, 0, client_id, side, otype, tif, qty, price or Decimal(0), "NEW", now, now)
        order = SimOrder(
            symbol=symbol,
            order_id=self.take_order_id(),
            client_order_id=client_id,
            side=side,
            type=otype,
            time_in_force=(tif or "GTC") if otype == "LIMIT" else "GTC",
            orig_qty=qty,
            price=price or Decimal(0),
            status="NEW",
            time_ms=now,
            update_ms=now,
            quote_qty=quote_qty if by_quote else None,
            stp_mode=stp,
        )
        self.orders[order.order_id] = order
        self.by_client[(symbol, client_id)] = order.order_id
        self.report_order(order, "NEW", now, None)
        self.work(order, now)
        return order

    def work(self, order: SimOrder, now: int) -> str:
        """Match an order that starts working (announced already): walk the book, then rest or expire.

        Returns what became of it: ``"FILLED"``, ``"REST"`` (funds locked for the rest, on the
        book) or ``"EXPIRED"``.  The caller checked that the account can pay for it.
        """
        limit = None if order.type in TAKER_TYPES else order.price
        if order.time_in_force == "FOK" and limit is not None:
            planned = self.plan(order.symbol, order.side, order.remaining, now, limit=limit, stp=order.stp_mode)
            if sum((q for _, q in planned), Decimal(0)) < order.remaining:
                self.expire(order, now, "UNFILLED_FOK_ORDER_EXPIRED")
                return "EXPIRED"
        self.walk(order, now, limit=limit)
        if order.status not in OPEN:
            return order.status
        if order.remaining <= 0:
            return "FILLED"
        if limit is None:
            self.expire(order, now, "INSUFFICIENT_LIQUIDITY")
            return "EXPIRED"
        if order.time_in_force == "IOC":
            self.expire(order, now, "UNFILLED_IOC_QUANTITY_EXPIRED")
            return "EXPIRED"
        base, quote = split_symbol(order.symbol)
        asset, amount = (quote, order.remaining * order.price) if order.side == "BUY" else (base, order.remaining)
        if self.free_balance(asset) < amount:
            self.expire(order, now, "REJECTED")  # only a triggered stop can lack the funds here
            return "EXPIRED"
        self.free[asset] -= amount
        self.locked[asset] += amount
        order.reserved = None
        if order.working_time == -1:
            order.working_time = now
        self.report_balances(order.symbol, now)  # the rest's funds are locked now
        return "REST"

    def walk(self, order: SimOrder, now: int, *, limit: Decimal | None = None) -> None:
        """Take for ``order`` (a taker) up to ``limit``: one fill per level, own resting orders met per its STP mode.

        The walk reads the book once (so at most its walk depth, book.py).  An own resting order
        on the way trades with it under NONE (a maker fill of that order) and is otherwise a
        prevented match: EXPIRE_MAKER expires the resting order and walks on, EXPIRE_TAKER
        expires the taker's rest, EXPIRE_BOTH both.
        """
        prices: list[Decimal] = []
        step = symbol_step(order.symbol)
        quote_left = None if order.quote_qty is None else order.quote_qty - order.cumulative_quote
        for liq in self.liquidity(order.symbol, order.side, now):
            if order.status not in OPEN or order.remaining <= 0:
                break
            if limit is not None and beyond(order.side, liq.price, limit):
                break
            want = order.remaining
            if quote_left is not None:
                want = min(want, _floor(quote_left / liq.price, step))
            if want <= 0:
                break
            maker = liq.maker
            if maker is None:
                qty = min(want, liq.qty)
                self.books.take(order.symbol, order.side, liq.price, qty, now)
                self._fill(order, liq.price, qty, now, maker=False)
            elif maker.status not in OPEN:
                continue
            elif order.stp_mode == "NONE":
                qty = min(want, maker.remaining)
                self._fill(order, liq.price, qty, now, maker=False)
                self._fill(maker, liq.price, qty, now, maker=True)
            else:
                self._prevent(order, maker, liq.price, min(want, maker.remaining), now)
                continue
            prices.append(liq.price)
            if quote_left is not None:
                quote_left -= liq.price * qty
        if prices:
            for hook in list(self.trade_hooks):
                hook(order.symbol, prices, now)

    def _prevent(self, taker: SimOrder, maker: SimOrder, price: Decimal, qty: Decimal, now: int) -> None:
        """A prevented match: ``qty`` of ``taker`` would trade with the account's own ``maker`` at ``price``."""
        mode = taker.stp_mode
        match_id = len(self.prevented) + 1
        row: dict[str, Any] = {
            "symbol": taker.symbol,
            "preventedMatchId": match_id,
            "takerOrderId": taker.order_id,
            "makerSymbol": maker.symbol,
            "makerOrderId": maker.order_id,
            "tradeGroupId": -1,  # the account is in no trade group: STP is between its own orders
            "selfTradePreventionMode": mode,
            "price": _s(price),
        }
        if mode in ("EXPIRE_TAKER", "EXPIRE_BOTH"):
            row["takerPreventedQuantity"] = _s(taker.remaining)
        if mode in ("EXPIRE_MAKER", "EXPIRE_BOTH"):
            row["makerPreventedQuantity"] = _s(maker.remaining)
        row["transactTime"] = now
        self.prevented.append(row)
        if mode in ("EXPIRE_MAKER", "EXPIRE_BOTH"):
            self._expire_in_match(maker, taker, match_id, price, qty, now, resting=True)
        if mode in ("EXPIRE_TAKER", "EXPIRE_BOTH"):
            self._expire_in_match(taker, maker, match_id, price, qty, now, resting=False)

    def _expire_in_match(
        self, order: SimOrder, counter: SimOrder, match_id: int, price: Decimal, qty: Decimal, now: int, *,
        resting: bool,
    ) -> None:  # fmt: skip
        """``order``'s rest expires by STP (status EXPIRED_IN_MATCH, execution type TRADE_PREVENTION)."""
        prevented = order.remaining
        if resting:
            self._unlock_rest(order)
        order.status, order.update_ms, order.reserved = "EXPIRED_IN_MATCH", now, Decimal(0)
        order.prevented_match_id = match_id
        order.prevented_qty += prevented
        extra = {
            "v": match_id,
            "A": _s(order.prevented_qty),
            "B": _s(prevented),
            "u": -1,
            "U": counter.order_id,
            "Cs": counter.symbol,
            "pl": _s(qty),
            "pL": _s(price),
            "pY": _s(qty * price),
        }
        self.report_order(order, "TRADE_PREVENTION", now, None, extra)

    def expire(self, order: SimOrder, now: int, reason: str) -> None:
        """The rest of ``order`` expires (nothing of it is locked any more)."""
        order.status, order.update_ms, order.reserved = "EXPIRED", now, Decimal(0)
        order.expiry_reason = reason
        self.report_order(order, "EXPIRED", now, None)

    def _fee(self, maker: bool) -> Decimal:
        return self.maker_fee if maker else self.taker_fee

    def commission_view(self, symbol: str) -> dict[str, Any]:
        """``GET /api/v3/account/commission``: the account's rates (no tax, special rate or discount)."""
        zero = {"maker": _s(Decimal(0)), "taker": _s(Decimal(0)), "buyer": _s(Decimal(0)), "seller": _s(Decimal(0))}
        return {
            "symbol": symbol,
            "standardCommission": {**zero, "maker": _s(self.maker_fee), "taker": _s(self.taker_fee)},
            "taxCommission": zero,
            "specialCommission": zero,
            "discount": {
                "enabledForAccount": False,
                "enabledForSymbol": False,
                "discountAsset": "BNB",
                "discount": "0.75000000",
            },
        }

    def _release_part(self, order: SimOrder, qty: Decimal) -> Decimal:
        """Unlock the part of a resting order's funds that a fill of ``qty`` uses; returns it."""
        base, quote = split_symbol(order.symbol)
        asset = quote if order.side == "BUY" else base
        remaining = order.remaining
        if order.reserved is None:
            part = qty * order.price if order.side == "BUY" else qty
        else:
            part = order.reserved if qty == remaining else order.reserved * qty / remaining
            order.reserved -= part
        self.locked[asset] -= part
        self.free[asset] += part
        return part

    def _fill(self, order: SimOrder, price: Decimal, qty: Decimal, now: int, *, maker: bool) -> None:
        """``qty`` of ``order`` trades at ``price`` (a maker fill from its lock, a taker's from free funds)."""
        base, quote = split_symbol(order.symbol)
        value = qty * price
        self.free_balance(base)
        self.free_balance(quote)
        if maker:
            self._release_part(order, qty)
        if order.side == "BUY":
            commission, asset = (qty * self._fee(maker)).quantize(EIGHT), base
            self.free[quote] -= value
            self.free[base] += qty - commission
        else:
            commission, asset = (value * self._fee(maker)).quantize(EIGHT), quote
            self.free[base] -= qty
            self.free[quote] += value - commission
        fill = {
            "id": self._next_trade,
            "price": _s(price),
            "qty": _s(qty),
            "commission": _s(commission),
            "commissionAsset": asset,
            "tradeId": self._next_trade,
            "isMaker": maker,
        }
        self._next_trade += 1
        order.executed_qty += qty
        order.cumulative_quote += value
        order.status = "FILLED" if order.executed_qty >= order.orig_qty else "PARTIALLY_FILLED"
        order.update_ms = now
        order.fills.append(fill)
        self.trades.append(
            {
                "symbol": order.symbol,
                "id": fill["id"],
                "orderId": order.order_id,
                "orderListId": order.order_list_id,
                "price": fill["price"],
                "qty": fill["qty"],
                "quoteQty": _s(value),
                "commission": fill["commission"],
                "commissionAsset": asset,
                "time": now,
                "isBuyer": order.side == "BUY",
                "isMaker": maker,
                "isBestMatch": True,
            }
        )
        self.report_order(order, "TRADE", now, fill)

    def match(self, symbol: str, price: Decimal, now: int, qty: Decimal | None = None) -> int:
        """A trade of ``qty`` (None: unknown, as much as needed) at ``price``: fill resting orders of ``symbol``.

        A price strictly beyond an order's limit fills the rest of it; a price exactly at it
        fills it up to what is left of ``qty`` (floored to the LOT_SIZE step), best price then
        oldest first.  Returns how many orders traded.
        """
        resting = [
            o
            for o in self.orders.values()
            if o.symbol == symbol and o.status in OPEN and o.working != -1 and o.type not in TAKER_TYPES
        ]
        resting.sort(key=lambda o: (-o.price if o.side == "BUY" else o.price, o.working, o.order_id))
        at_limit = None if qty is None else _floor(qty, symbol_step(symbol))
        traded = 0
        for order in resting:
            if order.status not in OPEN:  # a list rule closed it meanwhile
                continue
            if beyond(order.side, order.price, price):  # the trade is beyond the limit
                self._fill(order, order.price, order.remaining, now, maker=True)
            elif order.price == price and (at_limit is None or at_limit > 0):
                part = order.remaining if at_limit is None else min(order.remaining, at_limit)
                if at_limit is not None:
                    at_limit -= part
                self._fill(order, order.price, part, now, maker=True)
            else:
                continue
            traded += 1
        return traded

    def _unlock_rest(self, order: SimOrder) -> None:
        """Free what an open order holds: its ``reserved`` amount, else its rest's (× its price for a BUY)."""
        base, quote = split_symbol(order.symbol)
        remaining = order.remaining
        asset, amount = (quote, remaining * order.price) if order.side == "BUY" else (base, remaining)
        if order.reserved is not None:
            amount = order.reserved
        self.locked[asset] -= amount
        self.free[asset] = self.free_balance(asset) + amount
        order.reserved = Decimal(0)

    def prevented_matches(
        self, symbol: str, *, match_id: int | None = None, order_id: int | None = None, from_id: int | None = None,
        limit: int = 500,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """``GET /api/v3/myPreventedMatches``: one by its id, or an order's (from ``fromPreventedMatchId``)."""
        rows = [r for r in self.prevented if r["symbol"] == symbol]
        if match_id is not None:
            return [r for r in rows if r["preventedMatchId"] == match_id]
        rows = [r for r in rows if order_id in (r["takerOrderId"], r["makerOrderId"])]
        if from_id is not None:
            rows = [r for r in rows if r["preventedMatchId"] >= from_id]
        return rows[:limit]

    def find(self, symbol: str, order_id: int | None, client_id: str | None) -> SimOrder | None:
        if order_id is not None:
            order = self.orders.get(order_id)
            return order if order is not None and order.symbol == symbol else None
        if client_id is not None:
            oid = self.by_client.get((symbol, client_id))
            return None if oid is None else self.orders.get(oid)
        return None

    def cancel(self, order: SimOrder, now: int) -> SimOrder:
        if order.status not in OPEN:
            raise OrderError(-2011, "Unknown order sent.")
        self._unlock_rest(order)
        order.status = "CANCELED"
        order.update_ms = now
        order.reserved = Decimal(0)
        self.report_order(order, "CANCELED", now, None)
        return order
