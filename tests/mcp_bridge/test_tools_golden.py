"""tools/list stays chartgen's: a golden copy of the 15 (and of our first five) taken before the
tool layer became typed units, compared field by field; every unit's argument model agrees with
the schema it publishes; the catalog's order and groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp_types import Tool

from mcp_bridge.tools.catalog import CATALOG, TOOL_NAMES, offered
from mcp_bridge.tools.unit import GROUPS, WireArgs

GOLDEN = json.loads((Path(__file__).parent / "golden" / "tools_list.json").read_text())
CHARTGEN_15 = [
    "generate_chart", "list_indicators", "get_indicators", "place_order", "cancel_order", "get_orders",
    "get_positions", "get_balance", "set_alert", "list_alerts", "cancel_alert", "get_notifications",
    "subscribe_notifications", "unsubscribe_notifications", "list_subscriptions",
]  # fmt: skip


def _dump(tool: Tool) -> dict[str, Any]:
    return tool.model_dump(by_alias=True, mode="json", exclude_none=True)


def test_chartgens_15_lead_the_list_in_chartgens_order() -> None:
    assert list(TOOL_NAMES[:15]) == CHARTGEN_15


@pytest.mark.parametrize("golden", GOLDEN, ids=[g["name"] for g in GOLDEN])
def test_each_tool_of_the_golden_copy_is_listed_identically(golden: dict[str, Any]) -> None:
    unit = next(u for u in CATALOG if u.name == golden["name"])
    assert _dump(unit.listing()) == golden


def test_the_golden_copy_holds_chartgens_15_and_our_first_five() -> None:
    names = [g["name"] for g in GOLDEN]
    assert set(CHARTGEN_15) <= set(names) and len(names) == 20


@pytest.mark.parametrize("unit", [u for u in CATALOG if issubclass(u.args, WireArgs)], ids=lambda u: u.name)
def test_a_wire_model_reads_exactly_the_arguments_its_schema_lists(unit: Any) -> None:
    schema = unit.input_schema()
    assert set(unit.args.WIRE) == set(schema.get("properties", {})), unit.name


@pytest.mark.parametrize("unit", [u for u in CATALOG if not issubclass(u.args, WireArgs)], ids=lambda u: u.name)
def test_a_typed_tool_publishes_its_models_schemas(unit: Any) -> None:
    listed = unit.listing()
    assert listed.input_schema["type"] == "object"
    assert "tool_call_id" in listed.input_schema["properties"]
    assert listed.output_schema is not None and listed.output_schema["required"] == ["tool_call_id"]
    assert listed.output_schema["oneOf"] == [{"required": ["data"]}, {"required": ["error"]}]  # answer or error


def test_every_unit_has_a_known_group_and_every_group_has_tools() -> None:
    assert {u.group for u in CATALOG} == set(GROUPS)


@pytest.mark.parametrize("groups", [("chart",), ("alerts", "journal"), ("trading",), ("portfolio",)])
def test_tool_groups_choose_what_is_offered_keeping_the_order(groups: tuple[str, ...]) -> None:
    chosen = [u.name for u in offered(groups)]
    assert chosen == [n for n in TOOL_NAMES if n in chosen]
    assert {u.group for u in offered(groups)} == set(groups)
    if "chart" in groups:
        assert chosen[:3] == ["generate_chart", "list_indicators", "get_indicators"]


async def test_a_tool_outside_the_configured_groups_is_neither_listed_nor_callable() -> None:
    from engine import ChartService, InlineRenderer
    from mcp_bridge.server import ToolRouter
    from mcp_bridge.tools import Services
    from mcp_bridge.tools.context import AgentSettings

    services = Services(charts=ChartService(None, InlineRenderer()), agent=AgentSettings(tool_groups=("chart",)))
    router = ToolRouter(services)
    assert [t.name for t in router.tools] == [u.name for u in offered(("chart",))]
    refused = await router.call("place_order", {"symbol": "BTCUSDT", "side": "buy", "quantity": 1})
    assert refused.is_error and refused.content[0].text == "Unknown tool: place_order"
    listed = await router.call("list_indicators", {})
    assert not listed.is_error


def test_tool_groups_setting_is_read_and_checked() -> None:
    from config import load_settings

    assert load_settings({"tool_groups": "chart, journal"}).tool_groups == ["chart", "journal"]
    with pytest.raises(ValueError, match="unknown group 'charts'"):
        load_settings({"tool_groups": "charts"})
