"""The MCP tools: one typed unit per tool (see unit.py), collected in tools/list order by catalog.py."""

from mcp_bridge.tools.context import Services, ToolResult

__all__ = ["Services", "ToolResult"]
