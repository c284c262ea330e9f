"""CcxtBroker: orders on any ccxt exchange (sandbox mode by default), behind the broker protocol.

ccxt gives one API over many venues; this adapter maps it onto ours with ccxt's *unified*
parameters only, so that the same calls work on every venue ccxt implements them for:

- symbols: ours (``BTCUSDT``) are the spot market's unified base + quote (``BTC/USDT``;
  Kraken's ``XBTUSDT`` is ``BTCUSDT`` here too), found in the loaded markets;
- our client order id goes out as ``params["clientOrderId"]`` (ccxt turns it into
  ``newClientOrderId``, ``cl_ord_id``, ``orderLinkId``, …); cancels use the same parameter,
  except where ccxt's ``cancel_order`` ignores it (:data:`CANCEL_CLIENT_ID_PARAM`: bybit);
- an order is looked up by client id with ``fetch_order(None, symbol, {"clientOrderId": …})``
  on the venues whose ccxt class reads it there (:data:`FETCH_ORDER_BY_CLIENT_ID`), else by
  finding it among the open and the recently closed orders (``fetch_open_orders`` and
  ``fetch_closed_orders`` / ``fetch_canceled_and_closed_orders``);
- trades are fetched with ``since`` (the newest trade time seen, in memory, at most 23 h back
  in exchange time; all recent ones after a start) — our store deduplicates, so an overlap
  costs nothing.  ``from_id`` (our store's largest trade id) is not a ccxt notion and is not sent;
- trade ids are strings in ccxt; our store keys fills by an integer, so a numeric id is kept
  as that number and any other (Kraken's ``TXXXXX-XXXXX-XXXXXX``, UUIDs) becomes a stable
  63-bit number derived from it (BLAKE2b), the same on every reconciliation;
- a quote-amount market buy uses ccxt's ``create_market_buy_order_with_cost`` where the
  class has it (``exchange.has["createMarketBuyOrderWithCost"]``); quote-amount sells and
  venues without it are refused before anything is sent.

ccxt's errors become our broker errors (a timeout or network error on an order is an
unknown outcome, looked up by client id — never re-sent), and its order dicts become
:class:`ExchangeOrder`.  Exchange filters come from the raw ``exchangeInfo`` entry when the
venue is Binance-like, else from ccxt's precision and limits.  ccxt has no user stream here:
the order tracker's periodic reconciliation (open orders and trades) is how fills are learned.

Tested offline: the ``binance`` class against the simulator (tests/brokers/test_ccxt_broker.py),
``kraken`` and ``bybit`` against scripted responses (tests/brokers/test_ccxt_exchanges.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from decimal import Decimal
from typing import Any, cast

import ccxt.async_support as ccxt_async
import structlog
from ccxt.base.decimal_to_precision import DECIMAL_PLACES

from brokers.ccxt.stops import NoOrderLists, ccxt_order_types, order_shape
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
    Side,
)
from brokers.protocol import ExecutionHandler

log = structlog.get_logger(__name__)

_SIDES: dict[str, Side] = {"buy": "BUY", "sell": "SELL"}
"""ccxt's unified order sides as ours."""
_STATUS = {
    "closed": "FILLED",
    "canceled": "CANCELED",
    "cancelled": "CANCELED",
    "expired": "EXPIRED",
    "rejected": "REJECTED",
}

FETCH_ORDER_BY_CLIENT_ID = frozenset({"binance", "binanceus", "okx"})
"""ccxt classes whose ``fetch_order`` reads the unified ``params["clientOrderId"]`` (checked in
ccxt's source; others, e.g. bybit and kraken, want the exchange's order id there)."""

CANCEL_CLIENT_ID_PARAM = {"bybit": "orderLinkId"}
"""Where ccxt's ``cancel_order`` does not read the unified ``clientOrderId`` (ccxt 4.5: bybit
passes it through unchanged, and Bybit ignores it), the venue's own name for it."""

SINCE_WINDOW_MS = 23 * 3600 * 1000
"""How far back a ``since`` may reach (exchange time): Binance's myTrades spans ≤ 24 h from startTime."""

_SPOT_ONLY = {"binance": {"types": ["spot"]}, "bybit": {"types": ["spot"]}}
"""``fetchMarkets`` options that keep start-up to the spot markets (the broker trades spot)."""


def _d(v: Any) -> Decimal:
    return Decimal(str(v)) if v is not None else Decimal(0)


def trade_id(raw: Any) -> int:
    """Our integer key for a venue's trade id: the number itself when it is one, else a stable hash."""
    text = str(raw or "")
    if text.isdigit():
        return int(text)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


def build_exchange(
    exchange_id: str, *, api_key: str, secret: str, sandbox: bool = True, urls: dict[str, Any] | None = None
) -> Any:
    """A ccxt async exchange; ``urls`` overrides its API URLs (tests point it at the simulator)."""
    cls = getattr(ccxt_async, exchange_id, None)
    if cls is None or exchange_id not in ccxt_async.exchanges:
        raise ValueError(f"unknown ccxt exchange {exchange_id!r}; e.g. {', '.join(ccxt_async.exchanges[:8])}, …")
    options: dict[str, Any] = {"fetchCurrencies": False, "fetchMargins": False, "adjustForTimeDifference": True}
    for prefix, markets in _SPOT_ONLY.items():
        if exchange_id.startswith(prefix):
            options["fetchMarkets"] = markets
    exchange = cls({"apiKey": api_key, "secret": secret, "enableRateLimit": True, "options": options})
    if urls is not None:
        exchange.urls["api"] = {**exchange.urls.get("api", {}), **urls}
    elif sandbox:
        if not exchange.urls.get("test"):  # e.g. kraken (ccxt's set_sandbox_mode fails obscurely there)
            raise ValueError(
                f"ccxt has no sandbox for {exchange_id}: use an exchange with a testnet, or --live for real orders"
            )
        exchange.set_sandbox_mode(True)
    return exchange


class CcxtBroker(NoOrderLists):
    """One account on a ccxt exchange (stop / take-profit types and list refusals: :mod:`brokers.ccxt.stops`)."""

    def __init__(self, exchange: Any, *, name: str | None = None) -> None:
        self.exchange = exchange
        self.name = name or f"ccxt:{exchange.id}"
        self.order_types = ccxt_order_types(exchange)
        self._handler: ExecutionHandler | None = None
        self._markets_lock = asyncio.Lock()
        self._by_name: dict[str, dict[str, Any]] = {}
        self._name_of: dict[str, str] = {}
        self._since: dict[str, int] = {}
        self._client_ids: dict[str, str] = {}
        """Exchange order id → our client order id (ccxt trades name only the exchange's)."""

    def set_event_handler(self, handler: ExecutionHandler) -> None:
        self._handler = handler

    async def close(self) -> None:
        await self.exchange.close()

    async def _markets(self) -> dict[str, dict[str, Any]]:
        """Spot markets by our symbol name (unified base + quote, e.g. ``BTCUSDT``)."""
        if not self._by_name:
            async with self._markets_lock:
                if not self._by_name:
                    markets = await self._guard(self.exchange.load_markets)
                    by_name: dict[str, dict[str, Any]] = {}
                    for m in markets.values():
                        if m.get("spot", True) and m.get("base") and m.get("quote"):
                            by_name[f"{m['base']}{m['quote']}".upper()] = m
                    self._name_of = {m["symbol"]: name for name, m in by_name.items()}
                    self._by_name = by_name
        return self._by_name

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
        except ccxt_async.NotSupported as exc:
            raise OrderRejected(f"{self.exchange.id} does not support this through ccxt: {exc}") from None
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
        tick, step = self._increment(precision.get("price")), self._increment(precision.get("amount"))
        amount, cost = limits.get("amount", {}), limits.get("cost", {})
        return SymbolRules(
            symbol=symbol.upper(),
            base_asset=market["base"],
            quote_asset=market["quote"],
            status="TRADING" if market.get("active", True) is not False else "BREAK",
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

    def _increment(self, precision: Any) -> Decimal:
        """ccxt's precision as a step: a tick size already, or a number of decimals (DECIMAL_PLACES classes)."""
        if precision is None:
            return Decimal(0)
        if self.exchange.precisionMode == DECIMAL_PLACES:
            return Decimal(1).scaleb(-int(precision))
        return _d(precision)

    def _order(
        self, o: dict[str, Any], symbol: str, client_order_id: str | None = None, status: str | None = None
    ) -> ExchangeOrder:
        """ccxt's order dict as ours; ``client_order_id``/``status``: what we know when the venue's answer
        does not say (Kraken's AddOrder answers only the order id, its CancelOrder only a count)."""
        filled, amount = _d(o.get("filled")), _d(o.get("amount"))
        status = _STATUS.get(str(o.get("status")), "NEW") if o.get("status") or status is None else status
        if status == "NEW" and filled > 0:
            status = "PARTIALLY_FILLED"
        cost = _d(o.get("cost")) if o.get("cost") is not None else filled * _d(o.get("average") or o.get("price"))
        client_id = str(o.get("clientOrderId") or client_order_id or o.get("id"))
        if o.get("id") is not None and client_id != str(o["id"]):
            self._client_ids[str(o["id"])] = client_id
        raw_side = str(o.get("side", "buy"))
        # a cancel answer may carry no side (Kraken's CancelOrder answers a count): its text is kept, as the
        # venue gave it, rather than a side invented here
        side = _SIDES.get(raw_side) or cast(Side, raw_side.upper())
        fills = tuple(self._fill(t, symbol, side=o.get("side")) for t in (o.get("trades") or []))
        return ExchangeOrder(
            symbol=symbol,
            client_order_id=client_id,
            status=status,
            side=side,
            type=str(o.get("type", "market")).upper(),
            orig_qty=amount,
            executed_qty=filled,
            cumulative_quote=cost,
            price=_d(o["price"]) if o.get("price") else None,
            exchange_order_id=None if o.get("id") is None else str(o["id"]),
            time_in_force=o.get("timeInForce"),
            update_time_ms=o.get("lastUpdateTimestamp") or o.get("timestamp"),
            fills=fills,
            stop_price=_d(o.get("triggerPrice") or o.get("stopPrice"))
            if o.get("triggerPrice") or o.get("stopPrice")
            else None,
        )

    def _fill(self, t: dict[str, Any], symbol: str, *, side: str | None = None) -> Fill:
        """One ccxt trade; the trades inside an order answer carry no side, so the order's is used."""
        fee = t.get("fee") or {}
        trade_side = _SIDES.get(str(t.get("side") or side))
        if trade_side is None:
            raise BrokerError(f"{self.exchange.id} returned a trade without a side: {t.get('id')}")
        order_id = None if t.get("order") is None else str(t["order"])
        client_id = self._client_ids.get(order_id or "") or order_id or ""
        return Fill(
            trade_id=trade_id(t.get("id")),
            symbol=symbol,
            side=trade_side,
            client_order_id=client_id,
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
        if req.quote_quantity is not None:
            if req.type != "MARKET" or req.side != "BUY" or not self.exchange.has.get("createMarketBuyOrderWithCost"):
                raise OrderRejected(
                    f"{self.exchange.id} through ccxt takes a quote amount only for market buys; give quantity instead"
                )
            o = await self._guard(
                self.exchange.create_market_buy_order_with_cost,
                market["symbol"],
                float(req.quote_quantity),
                params,
                order=True,
            )
            return self._order(o, req.symbol, req.client_order_id)
        amount = float(req.quantity) if req.quantity is not None else None
        otype, price, extra = order_shape(self.exchange, req)  # refuses a type the venue does not declare
        params |= extra
        o = await self._guard(
            self.exchange.create_order, market["symbol"], otype, req.side.lower(), amount, price, params, order=True
        )
        return self._order(o, req.symbol, req.client_order_id)

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        market = await self._market(symbol)
        key = CANCEL_CLIENT_ID_PARAM.get(self.exchange.id, "clientOrderId")
        o = await self._guard(self.exchange.cancel_order, None, market["symbol"], {key: client_order_id})
        return self._order(o, symbol, client_order_id, status="CANCELED")

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None:
        market = await self._market(symbol)
        if self.exchange.id in FETCH_ORDER_BY_CLIENT_ID:
            try:
                o = await self._guard(
                    self.exchange.fetch_order, None, market["symbol"], {"clientOrderId": client_order_id}
                )
            except BrokerError as exc:
                if exc.data.get("not_found"):
                    return None
                raise
            return self._order(o, symbol, client_order_id)
        found = await self._find(market["symbol"], client_order_id)
        return None if found is None else self._order(found, symbol, client_order_id)

    async def _find(self, ccxt_symbol: str, client_order_id: str) -> dict[str, Any] | None:
        """The order with our client id among the open, then the recently closed and cancelled ones."""
        has = self.exchange.has
        closed = (
            self.exchange.fetch_canceled_and_closed_orders
            if has.get("fetchCanceledAndClosedOrders")
            else self.exchange.fetch_closed_orders
        )
        for fetch in (self.exchange.fetch_open_orders, closed):
            for o in await self._guard(fetch, ccxt_symbol):
                if o.get("clientOrderId") == client_order_id:
                    return dict(o)
        return None

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        await self._markets()
        ccxt_symbol = (await self._market(symbol))["symbol"] if symbol else None
        previous = self.exchange.options.get("warnOnFetchOpenOrdersWithoutSymbol")
        self.exchange.options["warnOnFetchOpenOrdersWithoutSymbol"] = False
        try:
            rows = await self._guard(self.exchange.fetch_open_orders, ccxt_symbol)
        finally:
            self.exchange.options["warnOnFetchOpenOrdersWithoutSymbol"] = previous
        return [self._order(o, self._name_of.get(o.get("symbol") or "", symbol or "")) for o in rows]

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
        """Recent fills of ``symbol``: since the newest trade seen (ccxt's unified ``since``), all recent at first."""
        market = await self._market(symbol)
        since = self._since.get(symbol.upper())
        if since is not None:
            # Binance answers at most 24 h after startTime: after a quiet day a cursor that old would
            # never see a newer trade.  Fills older than this were fetched by an earlier pass.
            now = self.exchange.milliseconds() - int(self.exchange.options.get("timeDifference") or 0)
            since = max(since, now - SINCE_WINDOW_MS)
        rows = await self._guard(self.exchange.fetch_my_trades, market["symbol"], since)
        fills = [self._fill(t, symbol) for t in rows]
        if fills:
            self._since[symbol.upper()] = max(since or 0, max(f.time_ms for f in fills))
        return fills

    async def last_price(self, symbol: str) -> Decimal | None:
        try:
            ticker = await self._guard(self.exchange.fetch_ticker, (await self._market(symbol))["symbol"])
        except BrokerError:
            return None
        last = ticker.get("last")
        return None if last is None else _d(last)
