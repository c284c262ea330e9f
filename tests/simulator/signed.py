"""Signed REST calls to a simulator for the endpoint tests: status, headers and JSON body of each answer."""

from __future__ import annotations

import hashlib
import hmac
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import aiohttp
from multidict import CIMultiDictProxy

from simulator.app import RunningSimulator
from simulator.exchange import DEFAULT_API_KEY, DEFAULT_API_SECRET


class SignedClient:
    """HMAC-signed requests with the simulator's own clock as ``timestamp``."""

    def __init__(self, sim: RunningSimulator, http: aiohttp.ClientSession) -> None:
        self.sim, self.http = sim, http

    async def call(self, method: str, path: str, **params: Any) -> tuple[int, CIMultiDictProxy[str], Any]:
        params["timestamp"] = self.sim.exchange.server_time()
        query = urlencode({k: str(v) for k, v in params.items()})
        sig = hmac.new(DEFAULT_API_SECRET.encode(), query.encode(), hashlib.sha256).hexdigest()
        url = f"{self.sim.url}{path}?{query}&signature={sig}"
        async with self.http.request(method, url, headers={"X-MBX-APIKEY": DEFAULT_API_KEY}) as r:
            return r.status, r.headers, await r.json()

    async def ok(self, method: str, path: str, **params: Any) -> Any:
        status, _, body = await self.call(method, path, **params)
        assert status == 200, body
        return body

    def bid(self, fraction: str = "0.95", symbol: str = "BTCUSDT") -> str:
        """A BUY limit price ``fraction`` of the last price, on the tick: it rests."""
        last = Decimal(f"{self.sim.exchange.markets[symbol].last_price(self.sim.exchange.now_ms()):.2f}")
        return str((last * Decimal(fraction)).quantize(Decimal("0.01")))

    async def rest_buy(self, **extra: Any) -> tuple[int, CIMultiDictProxy[str], Any]:
        """A resting BUY LIMIT of 0.001 BTCUSDT."""
        params = {"symbol": "BTCUSDT", "side": "BUY", "type": "LIMIT", "timeInForce": "GTC", "quantity": "0.001",
                  "price": self.bid(), **extra}  # fmt: skip
        return await self.call("POST", "/api/v3/order", **params)
