"""Tool handlers: thin adapters from MCP arguments to engine, alerts and broker services."""

from mcp_bridge.tools.context import Handler, Services, ToolResult
from mcp_bridge.tools.dispatch import build_handlers

__all__ = ["Handler", "Services", "ToolResult", "build_handlers"]
