"""BinanceBroker: signed spot orders through python-binance's AsyncClient, wrapped for safety.

python-binance signs requests and parses answers; everything it lacks is here:
- **Rate limits**: request weight is read from ``X-MBX-USED-WEIGHT-1M``; a 429/418 sets a
  ban until ``Retry-After`` and nothing is sent before it has passed (a call that would have
  to wait too long fails at once with ``retry_after_secs``).  The one exception is the
  account's *order* rate limit (a 429 with -1015 "Too many new orders", the unfilled order
  count of ``X-MBX-ORDER-COUNT-10S`` / ``-1D``): it is per account and counts new orders only,
  so it holds back new orders (and order lists) until ``Retry-After`` — market data, queries,
  cancels and the account go on — and the refusal names the limit Binance quoted.  Either 429
  is a definite "not placed" (:class:`RateLimitedError`, never :class:`OutcomeUnknown`).  The
  status and headers are read from the refused response itself (the exception carries it), not
  from the client's last response, which a concurrent request may have replaced.
- **Clock**: the server-time offset is refreshed periodically (:meth:`sync_time`) and a
  request refused with -1021 is retried once after a resync — except an order signed at a
  pinned time (:meth:`place_signed_at`, the cluster's order leader): its staleness is the point,
  so it is refused, never re-signed.
- **Unknown outcomes**: a timeout, a dropped connection or a 5xx on an order means the
  order may or may not exist: :class:`OutcomeUnknown` is raised and the caller looks the
  order up by clientOrderId — nothing is ever re-sent blindly.
- **Errors** become our broker errors with MCP codes (-32002 invalid credentials with the
  key masked, -32004 insufficient balance, -32003 unknown symbol).
Execution events arrive through :mod:`brokers.binance.user_stream` (WS-API).

Protective orders: STOP_LOSS, STOP_LOSS_LIMIT, TAKE_PROFIT and TAKE_PROFIT_LIMIT go out with
``stopPrice`` and/or ``trailingDelta`` (and ``timeInForce`` for the ``_LIMIT`` types); answers
and execution reports give back ``stopPrice``, ``trailingDelta``, the list membership and
``workingTime`` (an untriggered conditional order has ``workingTime`` -1: ``triggered`` is
False until it is set).  Order lists (OCO, OTOCO) are :mod:`brokers.binance.lists`, through
python-binance 1.0.37's own signed methods (``create_oco_order``, ``v3_post_order_list_otoco``,
``v3_delete_order_list``, ``v3_get_order_list``, ``get_open_oco_orders``): no hand-made request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import aiohttp
import structlog
from binance.exceptions import BinanceAPIException, BinanceRequestException

from brokers.binance.lists import BinanceListsMixin
from brokers.binance.signing import PinnableClient, pinned_timestamp, signed_at
from brokers.commission import FeeRates, rates_from_account, rates_from_symbol
from brokers.filters import SymbolRules, rules_by_symbol
from brokers.models import (
    STOP_TYPES,
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

MAX_TOOL_WAIT_S = 5.0
TOO_MANY_ORDERS = -1015
"""Binance's code for the account's order rate limit (errors.md ``TOO_MANY_ORDERS``)."""
ORDER_LIMIT_DEFAULT_WAIT_S = 10.0
"""The wait after a -1015 without ``Retry-After`` (the shortest ORDERS interval is 10 s)."""
EXCHANGE_INFO_TTL_S = 3600.0
COMMISSION_TTL_S = 3600.0
"""An account's commission on a symbol changes with its tier or a promotion: asked again after an hour."""


def mask(key: str) -> str:
    """An API key as logs and errors may show it."""
    return f"{key[:4]}…{key[-4:]}" if len(key) > 12 else "****"


def _d(v: Any) -> Decimal:
    return Decimal(str(v))


def order_from_rest(o: dict[str, Any], fills: tuple[Fill, ...] = ()) -> ExchangeOrder:
    price = _d(o.get("price", "0"))
    stop = _d(o.get("stopPrice", "0") or "0")
    delta = o.get("trailingDelta")
    working = o.get("workingTime")
    return ExchangeOrder(
        symbol=o["symbol"],
        client_order_id=o["clientOrderId"],
        status=o["status"],
        side=o["side"],
        type=o["type"],
        orig_qty=_d(o.get("origQty", "0")),
        executed_qty=_d(o.get("executedQty", "0")),
        cumulative_quote=_d(o.get("cummulativeQuoteQty", "0")),
        price=price if price > 0 else None,
        exchange_order_id=str(o.get("orderId")),
        time_in_force=o.get("timeInForce"),
        update_time_ms=o.get("updateTime") or o.get("transactTime"),
        fills=fills,
        stop_price=stop if stop > 0 else None,
        trailing_delta=None if delta in (None, "", 0, "0") else int(delta),
        list_client_id=o.get("listClientOrderId") or None,
        triggered=o.get("type") in STOP_TYPES and working not in (None, -1, "-1"),
    )


class BinanceBroker(BinanceListsMixin):
    """One Binance spot account (testnet by default; mainnet only when the operator allows it)."""

    name = "binance"
    order_types = frozenset(
        {"MARKET", "LIMIT", "LIMIT_MAKER", "STOP_LOSS", "STOP_LOSS_LIMIT", "TAKE_PROFIT", "TAKE_PROFIT_LIMIT"}
    )

    def __init__(
        self,
        *,
        api_key: str,
        api_secret: str,
        rest_url: str,
        recv_window_ms: int = 5000,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api_key = api_key
        self._client = PinnableClient(
            api_key=api_key, api_secret=api_secret, requests_params={"timeout": aiohttp.ClientTimeout(total=timeout_s)}
        )
        self._client.API_URL = f"{rest_url.rstrip('/')}/api"
        self._client.REQUEST_RECVWINDOW = recv_window_ms  # python-binance puts its own 10 s over ours otherwise
        self._recv_window = recv_window_ms
        self._clock = clock
        self._handler: ExecutionHandler | None = None
        self.banned_until = 0.0
        """Nothing is sent before this time (a request-weight 429 or an IP ban 418)."""
        self.orders_blocked_until = 0.0
        """No new order or order list is sent before this time (the account's order rate limit, -1015)."""
        self._order_limit = ""
        self.weight_used = 0
        self.order_counts: dict[str, int] = {}
        """The last ``X-MBX-ORDER-COUNT-<interval>`` headers (``"10S"``, ``"1D"``): orders placed per interval."""
        self._rules: dict[str, SymbolRules] = {}
        self._rules_at = 0.0
        self._rules_lock = asyncio.Lock()
        self.requests = 0
        self._commission: dict[str, tuple[FeeRates, float]] = {}
        self.account_rates: FeeRates | None = None
        """The ``commissionRates`` of the last ``GET /api/v3/account`` (:meth:`balances`), if it had any."""

    def set_event_handler(self, handler: ExecutionHandler) -> None:
        self._handler = handler

    async def emit(self, update: ExchangeOrder) -> None:
        if self._handler is not None:
            await self._handler(update)

    async def close(self) -> None:
        await self._client.close_connection()

    # --- the guarded call ---------------------------------------------------------------
    def _observe(self, resp: Any) -> float | None:
        """Read the weight and order-count headers of ``resp``; the Retry-After of a 429/418, else None."""
        if resp is None:
            return None
        headers = resp.headers
        used = headers.get("X-MBX-USED-WEIGHT-1M")
        if used is not None and used.isdigit():
            self.weight_used = int(used)
        for name, value in headers.items():
            if name.upper().startswith("X-MBX-ORDER-COUNT-") and value.isdigit():
                self.order_counts[name[len("X-MBX-ORDER-COUNT-") :].upper()] = int(value)
        if resp.status in (418, 429):
            retry = headers.get("Retry-After")
            try:
                return float(retry) if retry is not None else None
            except ValueError:
                return None
        return None

    async def _wait_for(self, until: float, what: str) -> None:
        wait = until - self._clock()
        if wait > 0:
            if wait > MAX_TOOL_WAIT_S:
                raise RateLimitedError(f"{what}: retry in {wait:.0f} s", wait)
            await asyncio.sleep(wait)  # honouring Retry-After: nothing is sent before it has passed

    async def _call(
        self, fn: Callable[..., Awaitable[Any]], *, order: bool = False, new_order: bool = False, **params: Any
    ) -> Any:
        """One request with the guards of the module docstring; ``order``: its outcome matters (a lost
        answer is OutcomeUnknown); ``new_order``: it places an order or a list (the order rate limit)."""
        await self._wait_for(self.banned_until, "Binance rate limit")
        if new_order:
            await self._wait_for(self.orders_blocked_until, f"Binance order rate limit ({self._order_limit})")
        for attempt in (1, 2):
            self.requests += 1
            try:
                result = await fn(**params)
                self._observe(getattr(self._client, "response", None))
                return result
            except BinanceAPIException as exc:
                resp = exc.response
                status = exc.status_code
                retry_after = self._observe(resp)
                if status in (418, 429) and exc.code == TOO_MANY_ORDERS:
                    wait = ORDER_LIMIT_DEFAULT_WAIT_S if retry_after is None else retry_after
                    self._order_limit = exc.message or "Too many new orders"
                    self.orders_blocked_until = max(self.orders_blocked_until, self._clock() + wait)
                    raise RateLimitedError(
                        f"not placed: Binance's order rate limit for this account ({self._order_limit}, code"
                        f" {TOO_MANY_ORDERS}); new orders may be sent again in {wait:.0f} s",
                        wait,
                    ) from None
                if status in (418, 429):
                    wait = 60.0 if retry_after is None else retry_after
                    self.banned_until = max(self.banned_until, self._clock() + wait)
                    raise RateLimitedError(
                        f"Binance answered HTTP {status} (rate limit); retry in {wait:.0f} s", wait
                    ) from None
                if exc.code == -1021 and pinned_timestamp() is not None:
                    raise OrderRejected(
                        "not sent: the order was signed at a time now outside the exchange's recvWindow"
                        " (its sender may no longer send)",
                        data={"binance_code": -1021},
                    ) from None
                if exc.code == -1021 and attempt == 1:
                    await self.sync_time()
                    continue
                if order and status >= 500:
                    raise OutcomeUnknown(f"Binance answered HTTP {status}: {exc.message}") from None
                raise self._translate(exc) from None
            except (TimeoutError, aiohttp.ClientError, BinanceRequestException) as exc:
                if order:
                    raise OutcomeUnknown(f"no answer from Binance ({type(exc).__name__})") from None
                raise BrokerError(f"cannot reach Binance: {type(exc).__name__}: {exc}") from None
        raise BrokerError("Binance kept refusing the request timestamp (-1021) after a clock resync")

    def _translate(self, exc: BinanceAPIException) -> BrokerError:
        code, msg = exc.code, exc.message or ""
        if code in (-2014, -2015, -1022) or exc.status_code == 401:
            return BrokerError(
                f"Binance refused the API key {mask(self.api_key)}: {msg}",
                code=-32002,
                data={"api_key": mask(self.api_key), "binance_code": code},
            )
        if code == -2010 and "insufficient balance" in msg.lower():
            return InsufficientBalance(f"Binance: {msg}")
        if code in (-1121,):
            return OrderRejected(f"Binance: {msg}", code=-32003)
        if code in (-2010, -2011, -1013, -1100, -1102, -1111, -1116, -1117):
            return OrderRejected(f"Binance: {msg} (code {code})", data={"binance_code": code})
        return BrokerError(f"Binance error {code}: {msg}", data={"binance_code": code})

    # --- clock and rules ----------------------------------------------------------------
    async def sync_time(self) -> int:
        """Refresh the server-time offset (periodic job; also after -1021)."""
        local = int(self._clock() * 1000)
        res = await self._client.get_server_time()
        offset = int(res["serverTime"]) - local
        self._client.timestamp_offset = offset
        return offset

    async def rules(self, symbol: str) -> SymbolRules | None:
        if not self._rules or self._clock() - self._rules_at > EXCHANGE_INFO_TTL_S:
            async with self._rules_lock:
                if not self._rules or self._clock() - self._rules_at > EXCHANGE_INFO_TTL_S:
                    info = await self._call(self._client.get_exchange_info)
                    self._rules, self._rules_at = rules_by_symbol(info), self._clock()
        return self._rules.get(symbol.upper())

    # --- orders ---------------------------------------------------------------------------
    @property
    def recv_window_ms(self) -> int:
        return self._recv_window

    def time_offset_ms(self) -> int:
        """The exchange's clock minus ours, as last synced (:meth:`sync_time`), in ms."""
        return int(self._client.timestamp_offset)

    def exchange_time_ms(self) -> int:
        """The exchange's time as this process estimates it (local clock + the synced offset)."""
        return int(self._clock() * 1000) + self.time_offset_ms()

    async def place_signed_at(self, req: OrderRequest, timestamp_ms: int) -> ExchangeOrder:
        """:meth:`place`, the request signed with ``timestamp_ms`` (brokers/binance/signing.py says why):
        the exchange refuses it once that time is more than ``recv_window_ms`` old."""
        with signed_at(timestamp_ms):
            return await self.place(req)

    async def place(self, req: OrderRequest) -> ExchangeOrder:
        params: dict[str, Any] = {
            "symbol": req.symbol,
            "side": req.side,
            "type": req.type,
            "newClientOrderId": req.client_order_id,
            "newOrderRespType": "FULL",
            "recvWindow": self._recv_window,
        }
        if req.quantity is not None:
            params["quantity"] = format(req.quantity, "f")
        if req.quote_quantity is not None:
            params["quoteOrderQty"] = format(req.quote_quantity, "f")
        if req.price is not None:
            params["price"] = format(req.price, "f")
        if req.time_in_force is not None and req.type == "LIMIT":
            params["timeInForce"] = req.time_in_force
        if req.type in ("STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT"):
            params["timeInForce"] = req.time_in_force or "GTC"
        if req.stop_price is not None:
            params["stopPrice"] = format(req.stop_price, "f")
        if req.trailing_delta is not None:
            params["trailingDelta"] = req.trailing_delta
        res = await self._call(self._client.create_order, order=True, new_order=True, **params)
        fills = tuple(
            Fill(
                trade_id=int(f.get("tradeId", 0)),
                symbol=req.symbol,
                side=req.side,
                client_order_id=req.client_order_id,
                quantity=_d(f["qty"]),
                price=_d(f["price"]),
                commission=_d(f.get("commission", "0")),
                commission_asset=str(f.get("commissionAsset", "")),
                time_ms=int(res.get("transactTime", 0)),
            )
            for f in res.get("fills", [])
        )
        return order_from_rest(res, fills)

    def _order_view(self, o: dict[str, Any]) -> ExchangeOrder:
        return order_from_rest(o)

    async def cancel(self, symbol: str, client_order_id: str) -> ExchangeOrder:
        res = await self._call(
            self._client.cancel_order, symbol=symbol, origClientOrderId=client_order_id, recvWindow=self._recv_window
        )
        return order_from_rest(res)

    async def query(self, symbol: str, client_order_id: str) -> ExchangeOrder | None:
        try:
            res = await self._call(
                self._client.get_order, symbol=symbol, origClientOrderId=client_order_id, recvWindow=self._recv_window
            )
        except BrokerError as exc:
            if exc.data.get("binance_code") == -2013:
                return None
            raise
        return order_from_rest(res)

    async def open_orders(self, symbol: str | None = None) -> list[ExchangeOrder]:
        params: dict[str, Any] = {"recvWindow": self._recv_window}
        if symbol:
            params["symbol"] = symbol
        return [order_from_rest(o) for o in await self._call(self._client.get_open_orders, **params)]

    async def balances(self) -> list[Balance]:
        account = await self._call(self._client.get_account, recvWindow=self._recv_window)
        out = [Balance(b["asset"], _d(b["free"]), _d(b["locked"])) for b in account.get("balances", [])]
        try:
            self.account_rates = rates_from_account(account.get("commissionRates"))
        except ValueError as exc:
            log.warning("binance_commission_rates_unreadable", error=str(exc))
        return [b for b in out if b.total != 0]

    async def commission_rates(self, symbol: str) -> FeeRates:
        """The account's commission on ``symbol`` (``GET /api/v3/account/commission``, weight 20;
        brokers/commission.py), asked at most once per :data:`COMMISSION_TTL_S` per symbol."""
        cached = self._commission.get(symbol)
        if cached is not None and time.monotonic() - cached[1] < COMMISSION_TTL_S:
            return cached[0]
        res = await self._call(self._client.v3_get_account_commission, symbol=symbol, recvWindow=self._recv_window)
        rates = rates_from_symbol(res if isinstance(res, dict) else {})
        self._commission[symbol] = (rates, time.monotonic())
        return rates

    async def trades(self, symbol: str, from_id: int | None = None) -> list[Fill]:
        params: dict[str, Any] = {"symbol": symbol, "limit": 1000, "recvWindow": self._recv_window}
        if from_id is not None:
            params["fromId"] = from_id
        rows = await self._call(self._client.get_my_trades, **params)
        return [
            Fill(
                trade_id=int(t["id"]),
                symbol=t["symbol"],
                side="BUY" if t.get("isBuyer") else "SELL",
                client_order_id=str(t.get("clientOrderId") or t.get("orderId")),
                quantity=_d(t["qty"]),
                price=_d(t["price"]),
                commission=_d(t.get("commission", "0")),
                commission_asset=str(t.get("commissionAsset", "")),
                time_ms=int(t.get("time", 0)),
            )
            for t in rows
        ]

    async def last_price(self, symbol: str) -> Decimal | None:
        """``GET /api/v3/ticker/price``; a failed request raises BrokerError (the order guard says why it refused)."""
        res = await self._call(self._client.get_symbol_ticker, symbol=symbol)
        return _d(res["price"]) if isinstance(res, dict) and "price" in res else None
