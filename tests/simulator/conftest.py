"""Fixtures: a manual-clock simulator and an HTTP session to talk to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import aiohttp
import pytest

from simulator.app import RunningSimulator, start_simulator
from tests.simulator.signed import SignedClient

FUNDED = {"USDT": Decimal("100000"), "BTC": Decimal("1")}
"""The account of :func:`funded_simulator`: both sides of BTCUSDT can trade."""


async def funded_simulator() -> RunningSimulator:
    """A manual-clock simulator on BTCUSDT and ETHUSDT, its account holding :data:`FUNDED` (use ``async with``)."""
    return await start_simulator(clock="manual", symbols=["BTCUSDT", "ETHUSDT"], balances=dict(FUNDED))


@pytest.fixture
async def simx() -> AsyncIterator[RunningSimulator]:
    async with await start_simulator(clock="manual", ping_interval_s=20) as sim:
        yield sim


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get_json(http: aiohttp.ClientSession, url: str, **params: Any) -> tuple[int, Any, Any]:
    async with http.get(url, params=params) as r:
        return r.status, r.headers, await r.json()


async def post_json(http: aiohttp.ClientSession, url: str, body: Any) -> Any:
    async with http.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


@pytest.fixture
async def api() -> AsyncIterator[SignedClient]:
    """Signed REST calls (tests/simulator/signed.py) to a :func:`funded_simulator`."""
    async with await funded_simulator() as sim, aiohttp.ClientSession() as http:
        yield SignedClient(sim, http)
