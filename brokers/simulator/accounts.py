"""The simulator's one trading account: balances, orders, trades and the matching rules.

Binance spot semantics, in Decimal: MARKET orders fill at the last price (by quantity, or by
``quoteOrderQty`` floored to the LOT_SIZE step); LIMIT orders fill at once when marketable
(at the last price) or rest with their funds locked and fill at their limit when the price
reaches it; IOC/FOK that cannot fill expire; LIMIT_MAKER that would take is rejected.
Commission is taken from the asset received: the account's taker rate on a fill that takes, its
maker rate on a resting order's fill (both 0.1 % unless set: ``POST /sim/v1/commission``).
Every state change produces an ``executionReport`` and an ``outboundAccountPosition`` for the WS-API subscribers, and
errors carry Binance's codes and texts (-1013 filter failures, -2010 balance/duplicate/
would-take, -2011 unknown order on cancel, -2013 unknown order on query).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from brokers.simulator.exchange_info import split_symbol, step_size_for, tick_size_for
from brokers.simulator.execution_report import execution_report

FEE = Decimal("0.001")
MIN_NOTIONAL = Decimal("5")
MAX_QTY = Decimal("9000")
MARKET_MAX_QTY = Decimal("100")
MAX_PRICE = Decimal("1000000")

Listener = Callable[[dict[str, Any]], None]


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
    """Funds locked for the order when not ``orig_qty × price`` (a BUY stop-market order's)."""
    trailing_time: int = -1

    @property
    def working(self) -> int:
        return self.time_ms if self.working_time is None else self.working_time

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
            "isWorking": self.status in ("NEW", "PARTIALLY_FILLED") and self.working != -1,
            "workingTime": self.working,
            "origQuoteOrderQty": "0.00000000",
            "selfTradePreventionMode": "EXPIRE_MAKER",
        }
        if self.trailing_delta is not None:
            view["trailingDelta"] = self.trailing_delta
            view["trailingTime"] = self.trailing_time
        return view


class SimAccount:
    """Balances, orders and trades of the simulator's account."""

    def __init__(self, balances: dict[str, Decimal]) -> None:
        self.free: dict[str, Decimal] = {a.upper(): Decimal(v) for a, v in balances.items()}
        self.locked: dict[str, Decimal] = {a: Decimal(0) for a in self.free}
        self.orders: dict[int, SimOrder] = {}
        self.by_client: dict[tuple[str, str], int] = {}
        self.trades: list[dict[str, Any]] = []
        self.maker_fee = FEE
        self.taker_fee = FEE
        self._next_order = 1
        self._next_trade = 1
        self.listeners: list[Listener] = []
        self.order_hooks: list[Callable[[SimOrder, str, int], None]] = []
        """Called after each order event (order lists and conditional orders follow fills and cancels)."""

    # --- rules ---------------------------------------------------------------------------
    @staticmethod
    def steps(start_price: float) -> tuple[Decimal, Decimal]:
        return Decimal(repr(tick_size_for(start_price))), Decimal(repr(step_size_for(start_price)))

    def _check(self, qty: Decimal, price: Decimal | None, tick: Decimal, step: Decimal, market: bool) -> None:
        if price is not None:
            if price < tick or price > MAX_PRICE or (price - tick) % tick != 0:
                raise OrderError(-1013, "Filter failure: PRICE_FILTER")
        if qty < step or qty > MAX_QTY or (qty - step) % step != 0:
            raise OrderError(-1013, "Filter failure: LOT_SIZE")
        if market and qty > MARKET_MAX_QTY:
            raise OrderError(-1013, "Filter failure: MARKET_LOT_SIZE")

    # --- balances ----------------------------------------------------------------------
    def _bal(self, asset: str) -> Decimal:
        self.free.setdefault(asset, Decimal(0))
        self.locked.setdefault(asset, Decimal(0))
        return self.free[asset]

    def balances_view(self) -> list[dict[str, str]]:
        return [
            {"asset": a, "free": _s(self.free[a]), "locked": _s(self.locked.get(a, Decimal(0)))}
            for a in sorted(self.free)
        ]

    # --- events ------------------------------------------------------------------------
    def _emit(self, order: SimOrder, exec_type: str, now: int, fill: dict[str, Any] | None) -> None:
        report = execution_report(order, exec_type, now, fill)
        base, quote = split_symbol(order.symbol)
        position = {
            "e": "outboundAccountPosition",
            "E": now,
            "u": now,
            "B": [
                {"a": a, "f": _s(self.free.get(a, Decimal(0))), "l": _s(self.locked.get(a, Decimal(0)))}
                for a in (base, quote)
            ],
        }
        for listener in list(self.listeners):
            listener(report)
            listener(position)
        for hook in list(self.order_hooks):
            hook(order, exec_type, now)

    def emit_event(self, event: dict[str, Any]) -> None:
        """Send another user-data event (``listStatus``) to the WS-API subscribers."""
        for listener in list(self.listeners):
            listener(event)

    # --- orders --------------------------------------------------------------------------
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
    ) -> SimOrder:
        if (symbol, client_id) in self.by_client:
            existing = self.orders[self.by_client[(symbol, client_id)]]
            if existing.status in ("NEW", "PARTIALLY_FILLED"):
                raise OrderError(-2010, "Duplicate order sent.")
        base, quote = split_symbol(symbol)
        market = otype == "MARKET"
        if market:
            if qty is None:
                if quote_qty is None:
                    raise OrderError(
                        -1102, "Param 'quantity' or 'quoteOrderQty' must be sent, but both were empty/null!"
                    )
                qty = (quote_qty / last / step).to_integral_value(rounding=ROUND_FLOOR) * step
            self._check(qty, None, tick, step, market=True)
            if qty * last < MIN_NOTIONAL:
                raise OrderError(-1013, "Filter failure: NOTIONAL")
        else:
            if price is None:
                raise OrderError(-1102, "Mandatory parameter 'price' was not sent, was empty/null, or malformed.")
            if qty is None:
                raise OrderError(-1102, "Mandatory parameter 'quantity' was not sent, was empty/null, or malformed.")
            self._check(qty, price, tick, step, market=False)
            if qty * price < MIN_NOTIONAL:
                raise OrderError(-1013, "Filter failure: NOTIONAL")
        marketable = market or (last <= price if side == "BUY" else last >= price)  # type: ignore[operator]
        if otype == "LIMIT_MAKER" and marketable:
            raise OrderError(-2010, "Order would immediately match and take.")
        fill_price = last if marketable else price
        assert fill_price is not None
        need_asset, need = (quote, qty * fill_price) if side == "BUY" else (base, qty)
        if not marketable and side == "BUY":
            need = qty * (price or fill_price)
        if self._bal(need_asset) < need:
            raise OrderError(-2010, "Account has insufficient balance for requested action.")
        if test:
            return SimOrder(symbol, 0, client_id, side, otype, tif, qty, price or Decimal(0), "NEW", now, now)
        order = SimOrder(
            symbol=symbol,
            order_id=self._next_order,
            client_order_id=client_id,
            side=side,
            type=otype,
            time_in_force=None if market else (tif or ("GTC" if otype == "LIMIT" else None)),
            orig_qty=qty,
            price=price or Decimal(0),
            status="NEW",
            time_ms=now,
            update_ms=now,
        )
        self._next_order += 1
        self.orders[order.order_id] = order
        self.by_client[(symbol, client_id)] = order.order_id
        if marketable:
            self._fill(order, fill_price, now, maker=False)
        elif tif in ("IOC", "FOK"):
            order.status = "EXPIRED"
            self._emit(order, "EXPIRED", now, None)
        else:
            self.free[need_asset] -= need
            self.locked[need_asset] = self.locked.get(need_asset, Decimal(0)) + need
            self._emit(order, "NEW", now, None)
        return order

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

    def _fill(self, order: SimOrder, price: Decimal, now: int, *, maker: bool) -> None:
        base, quote = split_symbol(order.symbol)
        qty = order.orig_qty - order.executed_qty
        value = qty * price
        self._bal(base)
        self._bal(quote)
        if order.side == "BUY":
            commission, asset = qty * self._fee(maker), base
            if maker:
                reserved = qty * order.price if order.reserved is None else order.reserved
                self.locked[quote] -= reserved
                self.free[quote] += reserved - value
            else:
                self.free[quote] -= value
            self.free[base] += qty - commission
        else:
            commission, asset = value * self._fee(maker), quote
            if maker:
                reserved = qty if order.reserved is None else order.reserved
                self.locked[base] -= reserved
                self.free[base] -= qty - reserved
            else:
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
        order.status = "FILLED"
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
        self._emit(order, "TRADE", now, fill)

    def match(self, symbol: str, price: Decimal, now: int) -> int:
        """Fill resting limit orders of ``symbol`` that ``price`` reaches (at their limit); returns how many."""
        filled = 0
        for order in list(self.orders.values()):
            if order.symbol != symbol or order.status != "NEW" or order.working == -1:
                continue
            if (order.side == "BUY" and price <= order.price) or (order.side == "SELL" and price >= order.price):
                self._fill(order, order.price, now, maker=True)
                filled += 1
        return filled

    def find(self, symbol: str, order_id: int | None, client_id: str | None) -> SimOrder | None:
        if order_id is not None:
            order = self.orders.get(order_id)
            return order if order is not None and order.symbol == symbol else None
        if client_id is not None:
            oid = self.by_client.get((symbol, client_id))
            return None if oid is None else self.orders.get(oid)
        return None

    def cancel(self, order: SimOrder, now: int) -> SimOrder:
        if order.status not in ("NEW", "PARTIALLY_FILLED"):
            raise OrderError(-2011, "Unknown order sent.")
        base, quote = split_symbol(order.symbol)
        remaining = order.orig_qty - order.executed_qty
        asset, amount = (quote, remaining * order.price) if order.side == "BUY" else (base, remaining)
        if order.reserved is not None:
            amount = order.reserved
        self.locked[asset] -= amount
        self.free[asset] = self._bal(asset) + amount
        order.status = "CANCELED"
        order.update_ms = now
        self._emit(order, "CANCELED", now, None)
        return order
