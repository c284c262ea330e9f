"""chartgen's two tools that accepted anything silently now refuse what they do not understand, as
every other tool does (docs/deviations.md #20): an argument ``list_indicators`` does not take, and a
``get_orders`` filter other than ``open`` / ``all``; the valid forms still answer as before."""

from __future__ import annotations

from typing import Any, cast

import pytest

from brokers import Actor
from engine import ChartService, InlineRenderer
from mcp_bridge.server import ToolRouter
from mcp_bridge.tools import Services


class Account:
    """An account reader that records the filter it was asked for."""

    def __init__(self) -> None:
        self.filters: list[Any] = []

    async def get_orders(self, filter_: Any, *, actor: Actor) -> list[dict[str, Any]]:
        self.filters.append(filter_)
        return []


@pytest.fixture
def account() -> Account:
    return Account()


@pytest.fixture
def router(account: Account) -> ToolRouter:
    services = Services(charts=ChartService(None, InlineRenderer()))
    services.front_account = cast(Any, account)
    return ToolRouter(services)


async def test_list_indicators_refuses_an_argument_naming_it(router: ToolRouter) -> None:
    result = await router.call("list_indicators", {"bogus": 1})
    assert result.is_error and "bogus" in result.content[0].text
    assert "takes no arguments" in result.content[0].text
    for ok in ({}, None):
        assert not (await router.call("list_indicators", ok)).is_error


@pytest.mark.parametrize("bad", ["bogus", "", 1, True, ["open"]])
async def test_get_orders_refuses_an_unknown_filter(router: ToolRouter, account: Account, bad: Any) -> None:
    result = await router.call("get_orders", {"filter": bad}, principal="alice")
    assert result.is_error, result.content[0].text
    assert 'filter must be "open" or "all"' in result.content[0].text
    assert account.filters == []  # nothing was read


async def test_get_orders_reads_open_all_and_the_default(router: ToolRouter, account: Account) -> None:
    for args in ({"filter": "open"}, {"filter": "ALL"}, {}, {"filter": " Open "}, {"filter": None}):
        result = await router.call("get_orders", args, principal="alice")
        assert not result.is_error, result.content[0].text
    assert account.filters == ["open", "all", "all", "open", "all"]
    result = await router.call("get_orders", {"filter": "open", "extra": 1}, principal="alice")
    assert result.is_error and "extra" in result.content[0].text
