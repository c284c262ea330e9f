"""CcxtBroker's requests on ccxt classes other than binance (kraken, bybit), offline.

Each venue's HTTP API is stood in for by a script: ccxt's ``fetch`` is replaced, so every
request ccxt builds (URL, query, body; signed as for the real venue) is recorded and answered
with a response shaped like the venue's documented one.  ccxt's own error mapping
(``handle_errors``) runs on every answer, as it does on the network path.  The tests check
that only ccxt's unified parameters reach the venues as their own parameter names
(``clientOrderId`` → Kraken's ``cl_ord_id``, Bybit's ``orderLinkId``), that nothing
Binance-only is sent (``origClientOrderId``, ``newClientOrderId``, ``fromId``,
``quoteOrderQty``), that string trade ids are kept apart, and that trades are fetched with
``since``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from brokers.ccxt.broker import CcxtBroker, build_exchange, trade_id
from brokers.models import OrderRejected, OrderRequest

BINANCE_ONLY = {"origClientOrderId", "newClientOrderId", "fromId", "quoteOrderQty", "newOrderRespType"}
CID = "c5a3f0e2b1d44e0c9a7b6d5e4f3a2b1c"  # ours: 32 hex characters fit every venue's client id rules


@dataclass
class Sent:
    method: str
    path: str
    params: dict[str, Any]
    """Query and body parameters together (form-encoded or JSON)."""


Answer = dict[str, Any] | list[Any] | Callable[[Sent], Any]


class ScriptedVenue:
    """A venue's HTTP API as a script: records what ccxt sends and answers from ``routes``."""

    def __init__(self, exchange: Any, routes: dict[tuple[str, str], Answer]) -> None:
        self.exchange = exchange
        self.routes = routes
        self.sent: list[Sent] = []
        exchange.fetch = self.fetch
        exchange.enableRateLimit = False  # ccxt's throttle would wait in real time between scripted answers

    async def fetch(self, url: str, method: str = "GET", headers: Any = None, body: Any = None) -> Any:
        parts = urlsplit(url)
        params: dict[str, Any] = dict(parse_qsl(parts.query))
        if body:
            text = body.decode() if isinstance(body, bytes) else str(body)
            params.update(json.loads(text) if text.startswith("{") else dict(parse_qsl(text)))
        sent = Sent(method, parts.path, params)
        self.sent.append(sent)
        answer = self.routes.get((method, parts.path))
        if answer is None:
            raise AssertionError(f"unscripted request {method} {url} {body}")
        payload = answer(sent) if callable(answer) else answer
        text = json.dumps(payload)
        self.exchange.handle_errors(200, "OK", url, method, {}, text, payload, headers or {}, body)
        return payload

    def to(self, method: str, path: str) -> list[Sent]:
        return [s for s in self.sent if s.method == method and s.path == path]

    def private(self) -> list[Sent]:
        return [s for s in self.sent if "/private/" in s.path or s.path.startswith(("/v5/order", "/v5/execution"))]


def _no_binance_params(venue: ScriptedVenue) -> None:
    for s in venue.sent:
        assert not (BINANCE_ONLY & set(s.params)), (s.path, s.params)


def test_trade_ids_numeric_kept_others_hashed_stably() -> None:
    """A numeric trade id is that number; a string id maps to the same 63-bit integer every time."""
    assert trade_id("123456789") == 123456789
    kraken = trade_id("TCWJEG-FL4SZ-3FKGH6")
    assert kraken == trade_id("TCWJEG-FL4SZ-3FKGH6") and 0 < kraken < 2**63
    assert kraken != trade_id("TCWJEG-FL4SZ-3FKGH7")


# --- kraken ---------------------------------------------------------------------------------
KRAKEN_OPEN_ID, KRAKEN_CLOSED_ID = "OQCLML-BW3P3-BUCMWZ", "OB5VMB-B4U2U-DK2WRW"


def _kraken_order(cid: str, status: str, vol_exec: str, cost: str) -> dict[str, Any]:
    return {
        "refid": None,
        "userref": 0,
        "cl_ord_id": cid,
        "status": status,
        "opentm": 1767225600.1,
        "closetm": 1767225601.2 if status != "open" else None,
        "starttm": 0,
        "expiretm": 0,
        "descr": {
            "pair": "XBTUSDT",
            "type": "buy",
            "ordertype": "limit",
            "price": "60000.0",
            "price2": "0",
            "leverage": "none",
            "order": "buy 0.01000000 XBTUSDT @ limit 60000.0",
            "close": "",
        },
        "vol": "0.01000000",
        "vol_exec": vol_exec,
        "cost": cost,
        "fee": "0.00000",
        "price": "60000.0" if vol_exec != "0.00000000" else "0.00000",
        "stopprice": "0.00000",
        "limitprice": "0.00000",
        "misc": "",
        "oflags": "fciq",
    }


def _kraken_descr(params: dict[str, Any]) -> str:
    """AddOrder's ``descr.order``, as Kraken writes it: ``buy 0.01000000 XBTUSDT @ limit 60000.0``."""
    tail = f"limit {params['price']}" if params["ordertype"] == "limit" else "market"
    return f"{params['type']} {Decimal(params['volume']):.8f} {params['pair']} @ {tail}"


KRAKEN: dict[tuple[str, str], Answer] = {
    ("GET", "/0/public/Time"): {
        "error": [],
        "result": {"unixtime": 1767225600, "rfc1123": "Thu,  1 Jan 26 00:00:00 +0000"},
    },
    ("GET", "/0/public/Assets"): {
        "error": [],
        "result": {
            "XXBT": {
                "aclass": "currency",
                "altname": "XBT",
                "decimals": 10,
                "display_decimals": 5,
                "status": "enabled",
            },
            "USDT": {
                "aclass": "currency",
                "altname": "USDT",
                "decimals": 8,
                "display_decimals": 4,
                "status": "enabled",
            },
        },
    },
    ("GET", "/0/public/AssetPairs"): {
        "error": [],
        "result": {
            "XBTUSDT": {
                "altname": "XBTUSDT",
                "wsname": "XBT/USDT",
                "aclass_base": "currency",
                "base": "XXBT",
                "aclass_quote": "currency",
                "quote": "USDT",
                "lot": "unit",
                "cost_decimals": 5,
                "pair_decimals": 1,
                "lot_decimals": 8,
                "lot_multiplier": 1,
                "leverage_buy": [2, 3],
                "leverage_sell": [2, 3],
                "fees": [[0, 0.4]],
                "fees_maker": [[0, 0.25]],
                "fee_volume_currency": "ZUSD",
                "margin_call": 80,
                "margin_stop": 40,
                "ordermin": "0.00005",
                "costmin": "0.5",
                "tick_size": "0.1",
                "status": "online",
            }
        },
    },
    ("POST", "/0/private/AddOrder"): lambda s: {
        "error": [],
        "result": {"descr": {"order": _kraken_descr(s.params)}, "txid": ["OUF4EM-FRGI2-MQMWZD"]},
    },
    ("POST", "/0/private/CancelOrder"): {"error": [], "result": {"count": 1}},
    ("POST", "/0/private/OpenOrders"): {
        "error": [],
        "result": {"open": {KRAKEN_OPEN_ID: _kraken_order(CID, "open", "0.00000000", "0.00000")}},
    },
    ("POST", "/0/private/ClosedOrders"): {
        "error": [],
        "result": {
            "closed": {KRAKEN_CLOSED_ID: _kraken_order("d" * 32, "closed", "0.01000000", "600.00000")},
            "count": 1,
        },
    },
    ("POST", "/0/private/TradesHistory"): {
        "error": [],
        "result": {
            "trades": {
                "THVRQM-33VKH-UCI7BS": {
                    "ordertxid": KRAKEN_CLOSED_ID,
                    "postxid": "TKH2SE-M7IF5-CFI7LT",
                    "pair": "XBTUSDT",
                    "time": 1767225601.25,
                    "type": "buy",
                    "ordertype": "limit",
                    "price": "60000.0",
                    "cost": "600.00000",
                    "fee": "1.56000",
                    "vol": "0.01000000",
                    "margin": "0.00000",
                    "misc": "",
                    "trade_id": 39482674,
                    "maker": True,
                }
            },
            "count": 1,
        },
    },
}


@pytest.fixture
async def kraken() -> AsyncIterator[tuple[CcxtBroker, ScriptedVenue]]:
    exchange = build_exchange("kraken", api_key="key", secret="c2VjcmV0LWZvci10ZXN0cw==", sandbox=False)
    venue = ScriptedVenue(exchange, KRAKEN)
    broker = CcxtBroker(exchange)
    try:
        yield broker, venue
    finally:
        await broker.close()


async def test_kraken_orders_carry_our_client_id_as_cl_ord_id(kraken: tuple[CcxtBroker, ScriptedVenue]) -> None:
    """Market and limit orders go to AddOrder with ``cl_ord_id``; cancel by ``cl_ord_id`` alone; BTCUSDT is XBTUSDT."""
    broker, venue = kraken
    rules = await broker.rules("BTCUSDT")
    assert rules is not None and (rules.base_asset, rules.quote_asset) == ("BTC", "USDT")
    assert (rules.tick_size, rules.step_size, rules.min_qty) == (Decimal("0.1"), Decimal("1E-8"), Decimal("0.00005"))
    placed = await broker.place(OrderRequest("BTCUSDT", "BUY", "MARKET", CID, quantity=Decimal("0.01")))
    assert (placed.client_order_id, placed.exchange_order_id, placed.status) == (CID, "OUF4EM-FRGI2-MQMWZD", "NEW")
    limit = await broker.place(
        OrderRequest(
            "BTCUSDT", "BUY", "LIMIT", "e" * 32, quantity=Decimal("0.01"), price=Decimal("60000"), time_in_force="GTC"
        )
    )
    assert limit.client_order_id == "e" * 32
    market_sent, limit_sent = venue.to("POST", "/0/private/AddOrder")
    assert {k: market_sent.params[k] for k in ("pair", "type", "ordertype", "volume", "cl_ord_id")} == {
        "pair": "XBTUSDT", "type": "buy", "ordertype": "market", "volume": "0.01", "cl_ord_id": CID,
    }  # fmt: skip
    assert (limit_sent.params["ordertype"], limit_sent.params["price"], limit_sent.params["cl_ord_id"]) == (
        "limit", "60000", "e" * 32,
    )  # fmt: skip
    cancelled = await broker.cancel("BTCUSDT", CID)
    assert (cancelled.client_order_id, cancelled.status) == (CID, "CANCELED")
    (cancel_sent,) = venue.to("POST", "/0/private/CancelOrder")
    assert cancel_sent.params["cl_ord_id"] == CID and "txid" not in cancel_sent.params
    _no_binance_params(venue)


async def test_kraken_lookup_by_client_id_quote_amounts_and_trades_since(
    kraken: tuple[CcxtBroker, ScriptedVenue],
) -> None:
    """An order is found by client id among open then closed orders (None if in neither); a quote-amount
    market buy is AddOrder's ``viqc``, a quote-amount sell is refused unsent; trades go by ``start`` (since)."""
    broker, venue = kraken
    open_order = await broker.query("BTCUSDT", CID)
    assert open_order is not None and (open_order.client_order_id, open_order.status) == (CID, "NEW")
    assert open_order.exchange_order_id == KRAKEN_OPEN_ID and open_order.orig_qty == Decimal("0.01")
    filled = await broker.query("BTCUSDT", "d" * 32)
    assert filled is not None and (filled.status, filled.executed_qty) == ("FILLED", Decimal("0.01"))
    assert await broker.query("BTCUSDT", "f" * 32) is None
    assert len(venue.to("POST", "/0/private/QueryOrders")) == 0  # Kraken's QueryOrders wants txid/userref, not ours

    await broker.place(OrderRequest("BTCUSDT", "BUY", "MARKET", CID, quote_quantity=Decimal("100")))
    (by_cost,) = venue.to("POST", "/0/private/AddOrder")
    assert by_cost.params["ordertype"] == "market" and "viqc" in by_cost.params["oflags"]
    assert Decimal(by_cost.params["volume"]) == Decimal("100") and by_cost.params["cl_ord_id"] == CID
    before = len(venue.sent)
    with pytest.raises(OrderRejected, match="quote amount only for market buys"):
        await broker.place(OrderRequest("BTCUSDT", "SELL", "MARKET", "a" * 32, quote_quantity=Decimal("100")))
    assert len(venue.sent) == before

    (fill,) = await broker.trades("BTCUSDT", from_id=123)
    assert fill.trade_id == trade_id("THVRQM-33VKH-UCI7BS")
    assert (fill.side, fill.quantity, fill.price, fill.client_order_id) == (
        "BUY",
        Decimal("0.01"),
        Decimal("60000.0"),
        "d" * 32,
    )
    assert fill.time_ms == 1767225601250
    await broker.trades("BTCUSDT", from_id=123)
    first, second = venue.to("POST", "/0/private/TradesHistory")
    assert "start" not in first.params and second.params["start"] == "1767225601"  # Kraken takes seconds
    _no_binance_params(venue)


# --- bybit (a unified trading account, Bybit's default) --------------------------------------
BYBIT_ORDER_ID = "1321003749386327552"
EXEC_ID = "e0cbe81d-0f18-5866-9415-cf319b5dab3b"


def _bybit(result: Any) -> dict[str, Any]:
    return {"retCode": 0, "retMsg": "OK", "result": result, "retExtInfo": {}, "time": 1767225600000}


def _bybit_order(cid: str, status: str, cum_qty: str) -> dict[str, Any]:
    return {
        "symbol": "BTCUSDT",
        "orderType": "Limit",
        "orderLinkId": cid,
        "orderId": BYBIT_ORDER_ID if cid == CID else "1321003749386327553",
        "orderStatus": status,
        "avgPrice": "60000" if cum_qty != "0" else "",
        "price": "60000",
        "qty": "0.01",
        "cumExecQty": cum_qty,
        "cumExecValue": str(Decimal(cum_qty) * 60000),
        "cumExecFee": "0",
        "leavesQty": str(Decimal("0.01") - Decimal(cum_qty)),
        "side": "Buy",
        "timeInForce": "GTC",
        "createdTime": "1767225600100",
        "updatedTime": "1767225601200",
        "category": "spot",
    }


def _bybit_orders(status: str, cid: str, cum_qty: str) -> Callable[[Sent], Any]:
    def answer(sent: Sent) -> Any:
        assert sent.params.get("category") == "spot" and sent.params.get("symbol") == "BTCUSDT", sent.params
        return _bybit({"category": "spot", "list": [_bybit_order(cid, status, cum_qty)], "nextPageCursor": ""})

    return answer


BYBIT: dict[tuple[str, str], Answer] = {
    ("GET", "/v5/market/time"): _bybit({"timeSecond": "1767225600", "timeNano": "1767225600000000000"}),
    ("GET", "/v5/asset/coin/query-info"): _bybit({"rows": []}),
    ("GET", "/v5/market/instruments-info"): _bybit(
        {
            "category": "spot",
            "list": [
                {
                    "symbol": "BTCUSDT",
                    "baseCoin": "BTC",
                    "quoteCoin": "USDT",
                    "innovation": "0",
                    "status": "Trading",
                    "marginTrading": "both",
                    "lotSizeFilter": {
                        "basePrecision": "0.000001",
                        "quotePrecision": "0.00000001",
                        "minOrderQty": "0.000048",
                        "maxOrderQty": "71.73956243",
                        "minOrderAmt": "1",
                        "maxOrderAmt": "2000000",
                    },
                    "priceFilter": {"tickSize": "0.01"},
                }
            ],
            "nextPageCursor": "",
        }
    ),
    ("GET", "/v5/user/query-api"): _bybit({"unified": 0, "uta": 1, "readOnly": 0, "permissions": {}}),
    ("GET", "/v5/account/info"): _bybit({"unifiedMarginStatus": 5, "marginMode": "REGULAR_MARGIN"}),
    ("POST", "/v5/order/create"): lambda s: _bybit({"orderId": BYBIT_ORDER_ID, "orderLinkId": s.params["orderLinkId"]}),
    ("POST", "/v5/order/cancel"): lambda s: _bybit({"orderId": BYBIT_ORDER_ID, "orderLinkId": s.params["orderLinkId"]}),
    ("GET", "/v5/order/realtime"): _bybit_orders("New", CID, "0"),
    ("GET", "/v5/order/history"): _bybit_orders("Filled", "d" * 32, "0.01"),
    ("GET", "/v5/execution/list"): _bybit(
        {
            "category": "spot",
            "list": [
                {
                    "symbol": "BTCUSDT",
                    "orderType": "Limit",
                    "orderLinkId": "d" * 32,
                    "orderId": "1321003749386327553",
                    "execTime": "1767225601250",
                    "feeRate": "0.001",
                    "execPrice": "60000",
                    "orderQty": "0.01",
                    "orderPrice": "60000",
                    "execValue": "600",
                    "execType": "Trade",
                    "seq": 1,
                    "side": "Buy",
                    "leavesQty": "0",
                    "isMaker": True,
                    "execFee": "0.00001",
                    "feeCurrency": "BTC",
                    "execId": EXEC_ID,
                    "execQty": "0.01",
                }
            ],
            "nextPageCursor": "",
        }
    ),
}


@pytest.fixture
async def bybit() -> AsyncIterator[tuple[CcxtBroker, ScriptedVenue]]:
    exchange = build_exchange("bybit", api_key="key", secret="secret", sandbox=True)
    assert "testnet" in json.dumps(exchange.urls["api"])  # --sim/testnet use Bybit's testnet
    venue = ScriptedVenue(exchange, BYBIT)
    broker = CcxtBroker(exchange)
    try:
        yield broker, venue
    finally:
        await broker.close()


async def test_bybit_orders_carry_our_client_id_as_order_link_id(bybit: tuple[CcxtBroker, ScriptedVenue]) -> None:
    """Orders go to /v5/order/create with ``orderLinkId`` (a market buy in base units), cancel by ``orderLinkId``."""
    broker, venue = bybit
    rules = await broker.rules("BTCUSDT")
    assert rules is not None and (rules.tick_size, rules.step_size) == (Decimal("0.01"), Decimal("0.000001"))
    assert (rules.min_qty, rules.min_notional) == (Decimal("0.000048"), Decimal("1"))
    placed = await broker.place(OrderRequest("BTCUSDT", "BUY", "MARKET", CID, quantity=Decimal("0.01")))
    assert (placed.client_order_id, placed.exchange_order_id) == (CID, BYBIT_ORDER_ID)
    await broker.place(
        OrderRequest(
            "BTCUSDT", "SELL", "LIMIT", "e" * 32, quantity=Decimal("0.01"), price=Decimal("70000"), time_in_force="GTC"
        )
    )
    market_sent, limit_sent = venue.to("POST", "/v5/order/create")
    market_keys = ("category", "symbol", "side", "orderType", "qty", "marketUnit", "orderLinkId")
    assert {k: market_sent.params.get(k) for k in market_keys} == {
        "category": "spot", "symbol": "BTCUSDT", "side": "Buy", "orderType": "Market", "qty": "0.01",
        "marketUnit": "baseCoin", "orderLinkId": CID,
    }  # fmt: skip
    limit_keys = ("side", "orderType", "qty", "price", "timeInForce", "orderLinkId")
    assert {k: limit_sent.params.get(k) for k in limit_keys} == {
        "side": "Sell", "orderType": "Limit", "qty": "0.01", "price": "70000", "timeInForce": "GTC",
        "orderLinkId": "e" * 32,
    }  # fmt: skip
    cancelled = await broker.cancel("BTCUSDT", CID)
    assert (cancelled.client_order_id, cancelled.status) == (CID, "CANCELED")
    (cancel_sent,) = venue.to("POST", "/v5/order/cancel")
    assert cancel_sent.params["orderLinkId"] == CID and "orderId" not in cancel_sent.params
    _no_binance_params(venue)


async def test_bybit_lookup_by_client_id_quote_amounts_and_trades_since(
    bybit: tuple[CcxtBroker, ScriptedVenue],
) -> None:
    """Found by client id among open then closed orders; a quote-amount market buy sends the cost as ``qty``;
    trades go by ``startTime`` (since) and Bybit's UUID execution ids are kept apart."""
    broker, venue = bybit
    open_order = await broker.query("BTCUSDT", CID)
    assert open_order is not None and (open_order.status, open_order.exchange_order_id) == ("NEW", BYBIT_ORDER_ID)
    filled = await broker.query("BTCUSDT", "d" * 32)
    assert filled is not None and (filled.status, filled.executed_qty) == ("FILLED", Decimal("0.01"))
    assert await broker.query("BTCUSDT", "f" * 32) is None

    await broker.place(OrderRequest("BTCUSDT", "BUY", "MARKET", CID, quote_quantity=Decimal("100")))
    (by_cost,) = venue.to("POST", "/v5/order/create")
    assert (by_cost.params["orderType"], by_cost.params["qty"], by_cost.params["orderLinkId"]) == ("Market", "100", CID)
    assert (
        by_cost.params.get("marketUnit", "quoteCoin") == "quoteCoin"
    )  # Bybit: a spot market buy's qty is quote by default

    (fill,) = await broker.trades("BTCUSDT", from_id=7)
    assert fill.trade_id == trade_id(EXEC_ID) and fill.client_order_id == "d" * 32
    assert (fill.side, fill.quantity, fill.commission, fill.commission_asset) == (
        "BUY",
        Decimal("0.01"),
        Decimal("0.00001"),
        "BTC",
    )
    await broker.trades("BTCUSDT", from_id=7)
    first, second = venue.to("GET", "/v5/execution/list")
    assert "startTime" not in first.params and second.params["startTime"] == "1767225601250"
    broker._since["BTCUSDT"] -= 2 * 86_400_000  # a cursor from two quiet days ago reaches back 23 h (exchange time)
    await broker.trades("BTCUSDT")
    oldest = 1767225600000 - 23 * 3_600_000  # the scripted server time, less 23 h
    assert oldest <= int(venue.to("GET", "/v5/execution/list")[2].params["startTime"]) < oldest + 60_000
    _no_binance_params(venue)


def test_a_venue_without_a_sandbox_is_refused_clearly_unless_live() -> None:
    """ccxt has no Kraken sandbox: the default (not --live) says so instead of ccxt's NotSupported."""
    with pytest.raises(ValueError, match="no sandbox for kraken"):
        build_exchange("kraken", api_key="key", secret="c2VjcmV0", sandbox=True)
    assert build_exchange("kraken", api_key="key", secret="c2VjcmV0", sandbox=False).id == "kraken"
