"""CcxtBroker: orders on any ccxt exchange (sandbox mode by default), behind the broker protocol.

ccxt gives one API over many venues; this adapter maps it onto ours: exchange symbols
(``BTCUSDT``) to ccxt's (``BTC/USDT``) through the loaded markets, our clientOrderId to the
venue's client id parameter, ccxt's errors to our broker errors (a timeout or network
error on an order is an unknown outcome, looked up by client id — never re-sent), and
ccxt's order dicts to :class:`ExchangeOrder`.  Exchange filters come from the raw
``exchangeInfo`` entry when the venue is Binance-like, else from ccxt's precision and
limits.  ccxt has no user stream here: the order tracker's periodic reconciliation
(open orders and trades) is how fills are learned.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import ccxt.async_support as ccxt_async
import structlog

from brokers.filters import SymbolRules
from brokers.models import (
    Balance,
    BrokerError,
    ExchangeOrder,
    Fill,
    InsufficientBalance,
    OrderRejected,
    OrderRequest,
    OutcomeUnknown,
    RateLimitedError,
)
from brokers.protocol import ExecutionHandler

log = structlog.get_logger(__name__)

_STATUS = {
    "closed": "FILLED",
    "canceled": "CANCELED",
    "cancelled": "CANCELED",
    "expired": "EXPIRED",
    "rejected": "REJECTED",
}


def _d(v: Any) -> Decimal:
    return Decimal(str(v)) if v is not None else Decimal(0)


def build_exchange(
    exchange_id: str, *, api_key: str, secret: str, sandbox: bool = True, urls: dict[str, Any] | None = None
) -> Any:
    """A ccxt async exchange; ``urls`` overrides its API URLs (tests point it at the simulator)."""
    cls = getattr(ccxt_async, exchange_id, None)
    if cls is None or exchange_id not in ccxt_async.exchanges:
        raise ValueError(f"unknown ccxt exchange {exchange_id!r}; e.g. {', '.join(ccxt_async.exchanges[:8])}, …")
    options: dict[str, Any] = {"fetchCurrencies": False, "fetchMargins": False, "adjustForTimeDifference": True}
    if exchange_id.startswith("binance"):
        options["fetchMarkets"] = {"types": ["spot"]}
    exchange = cls({"apiKey": api_key, "secret": secret, "enableRateLimit": True, "options": options})
    if urls is not None:
        exchange.urls["api"] = {**exchange.urls.get("api", {}), **urls}
    elif sandbox:
        exchange.set_sandbox_mode(True)
    return exchange


class CcxtBroker:
    """One account on a ccxt exchange."""

    def __init__(self, exchange: Any, *, name: str | None = None) -> None:
        self.exchange = exchange
        self.name = name or f"ccxt:{exchange.id}"
        self._handler: ExecutionHandler | None = None
        self._markets_lock = asyncio.Lock()
        self._by_id: dict[str, dict[str, Any]] = {}

    def set_event_handler(self, handler: ExecutionHandler) -> None:
        self._handler = handler

    async def close(self) -> None:
        await self.exchange.close()

    async def _markets(self) -> dict[str, dict[str, Any]]:
        if not self._by_id:
            async with self._markets_lock:
                if not self._by_id:
                    markets = await self._guard(self.exchange.load_markets)
                    self._by_id = {str(m["id"]).upper(): m for m in markets.values() if m.get("spot", True)}
        return self._by_id

    async def _market(self, symbol: str) -> dict[str, Any]:
        market = (await self._markets()).get(symbol.upper())
        if market is None:
            raise BrokerError(f"{symbol} is not listed on {self.exchange.id}", code=-32003)
        return market

    async def _guard(self, fn: Any, *args: Any, order: bool = False, **kwargs: Any) -> Any:
        try:
            try:
                return await fn(*args, **kwargs)
            except ccxt_async.InvalidNonce:
                # the exchange refused our timestamp (Binance -1021): nothing was executed;
                # re-read its clock once and send again (same client order id)
                if not hasattr(self.exchange, "load_time_difference"):
                    raise
                await self.exchange.load_time_difference()
                log.info(
                    "ccxt_clock_resynced",
                    exchange=self.exchange.id,
                    offset_ms=self.exchange.options.get("timeDifference"),
                )
                return await fn(*args, **kwargs)
        except ccxt_async.InsufficientFunds as exc:
            raise InsufficientBalance(f"{self.exchange.id}: {exc}") from None
        except ccxt_async.BadSymbol as exc:
            raise OrderRejected(f"{self.exchange.id}: {exc}", code=-32003) from None
        except ccxt_async.OrderNotFound as exc:
            raise BrokerError(f"{self.exchange.id}: {exc}", data={"not_found": True}) from None
        except ccxt_async.InvalidOrder as exc:
            raise OrderRejected(f"{self.exchange.id}: {exc}") from None
        except ccxt_async.AuthenticationError as exc:
            raise BrokerError(f"{self.exchange.id} refused the API key: {exc}", code=-32002) from None
        except (ccxt_async.RateLimitExceeded, ccxt_async.DDoSProtection) as exc:
            raise RateLimitedError(f"{self.exchange.id} rate limit: {exc}", 60.0) from None
        except (ccxt_async.RequestTimeout, ccxt_async.NetworkError) as exc:
            if order:
                raise OutcomeUnknown(f"no answer from {self.exchange.id}: {type(exc).__name__}") from None
            raise BrokerError(f"cannot reach {self.exchange.id}: {exc}") from None
        except ccxt_async.ExchangeError as exc:
            raise BrokerError(f"{self.exchange.id}: {exc}") from None

    # --- protocol -------------------------------------------------------------------------
    async def rules(self, symbol: str) -> SymbolRules | None:
        market = (await self._markets()).get(symbol.upper())
        if market is None:
            return None
        info = market.get("info") or {}
        if isinstance(info, dict) and info.get("filters"):
            return SymbolRules.from_exchange_info(info)
        precision, limits = market.get("precision", {}), market.get("limits", {})
        tick, step = _d(precision.get("price")), _d(precision.get("amount"))
        amount, cost = limits.get("amount", {}), limits.get("cost", {})
        return SymbolRules(
            symbol=symbol.upper(),
            base_asset=market["base"],
            quote_asset=market["quote"],
            status="TRADING" if market.get("active", True) else "BREAK",
            tick_size=tick,
            min_price=_d(limits.get("price", {}).get("min")),
            max_price=_d(limits.get("price", {}).get("max")),
            step_size=step,
            min_qty=_d(amount.get("min")),
            max_qty=_d(amount.get("max")),
            market_step_size=Decimal(0),
            market_min_qty=Decimal(0),
            market_max_qty=Decimal(0),
            min_notional=_d(cost.get("min")),
            apply_min_to_market=True,
            max_notional=None,
        )

    def _order(self, o: dict[str, Any], symbol: str) -> ExchangeOrder:
        filled, amount = _d(o.get("filled")), _d(o.get("amount"))
        status = _STATUS.get(str(o.get("status")), "NEW")
        if status == "NEW" and filled > 0:
            status = "PARTIALLY_FILLED"
        cost = _d(o.get("cost")) if o.get("cost") is not None else filled * _d(o.get("average") or o.get("price"))
        fills = tuple(
            self._fill(t, symbol, o.get("clientOrderId") or "", side=o.get("side")) for t in (o.get("trades") or [])
        )
        return ExchangeOrder(
            symbol=symbol,
            client_order_id=str(o.get("clientOrderId") or o.get("id")),
            status=status,
            side=str(o.get("side", "buy")).upper(),  # type: ignore[arg-type]
            type=str(o.get("type", "market")).upper(),
            orig_qty=amount,
            executed_qty=filled,
            cumulative_quote=cost,
            price=_d(o["price"]) if o.get("price") else None,
            exchange_order_id=str(o.get("id")),
            time_in_force=o.get("timeInForce"),
            update_time_ms=o.get("lastUpdateTimestamp") or o.get("timestamp"),
            fills=fills,
        )

    def _fill(self, t: dict[str, Any], symbol: str, client_id: str, *, side: str | None = None) -> Fill:
        """One ccxt trade; the trades inside an order answer carry no side, so the order's is used."""
        fee = t.get("fee") or {}
        trade_side = t.get("side") or side
        if trade_side not in ("buy", "sell"):
            raise BrokerError(f"{self.exchange.id} returned a trade without a side: {t.get('id')}")
        return Fill(
            trade_id=int(t.get("id") or 0),
            symbol=symbol,
            side=trade_side.upper(),  # type: ignore[arg-type]
            client_order_id=str(client_id or t.get("order")),
            quantity=_d(t.get("amount")),
            price=_d(t.get("price")),
            commission=_d(fee.get("cost")),
            commission_asset=str(fee.get("currency") or ""),
            time_ms=int(t.get("timestamp") or 0),
        )

    async def place(self, req: OrderRequest) -> ExchangeOrder:
        market = await self._market(req.symbol)
        params: dict[str, Any] = {"clientOrderId": req.client_order_id}
        if req.time_in_force is not None:
            params["timeInForce"] = req.time_in_force
        if req.type == "LIMIT_MAKER":
            params["postOnly"] = True
        amount = float(req.quantity) if req.quantity is not None else None
        if req.quote_quantity is not None:
            params["quoteOrderQty"] = float(req.quote_quantity)
        otype = "market" if req.type == "MARKET" else "limit"
        price = float(req.price) if req.price is not None else None
        o = await self._guard(
            self.exchange.create_order, market["symbol"], otype, req.side.lower(), amount, price, params, order=True
        )
        return self._order(o, req.symbol)

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        market = await self._market(symbol)
        o = await self._guard(
            self.exchange.cancel_order, None, market["symbol"], {"origClientOrderId": client_order_id}
        )
        return self._order(o, symbol)

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None:
        market = await self._market(symbol)
        try:
            o = await self._guard(
                self.exchange.fetch_order, None, market["symbol"], {"origClientOrderId": client_order_id}
            )
        except BrokerError as exc:
            if exc.data.get("not_found"):
                return None
            raise
        return self._order(o, symbol)

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        by_symbol = {m["symbol"]: sid for sid, m in (await self._markets()).items()}
        ccxt_symbol = (await self._market(symbol))["symbol"] if symbol else None
        previous = self.exchange.options.get("warnOnFetchOpenOrdersWithoutSymbol")
        self.exchange.options["warnOnFetchOpenOrdersWithoutSymbol"] = False
        try:
            rows = await self._guard(self.exchange.fetch_open_orders, ccxt_symbol)
        finally:
            self.exchange.options["warnOnFetchOpenOrdersWithoutSymbol"] = previous
        return [self._order(o, by_symbol.get(o.get("symbol"), symbol or "")) for o in rows]

    async def balances(self) -> list[Balance]:
        bal = await self._guard(self.exchange.fetch_balance)
        out = []
        for asset, free in (bal.get("free") or {}).items():
            used = (bal.get("used") or {}).get(asset)
            b = Balance(asset, _d(free), _d(used))
            if b.total != 0:
                out.append(b)
        return out

    async def trades(self, symbol: str, from_id: int | None = None) -> list[Fill]:
        market = await self._market(symbol)
        params = {"fromId": from_id} if from_id is not None else {}
        rows = await self._guard(self.exchange.fetch_my_trades, market["symbol"], None, 1000, params)
        return [self._fill(t, symbol, t.get("clientOrderId") or "") for t in rows]

    async def last_price(self, symbol: str) -> Decimal | None:
        try:
            ticker = await self._guard(self.exchange.fetch_ticker, (await self._market(symbol))["symbol"])
        except BrokerError:
            return None
        last = ticker.get("last")
        return None if last is None else _d(last)
