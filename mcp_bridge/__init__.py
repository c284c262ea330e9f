"""mcp_bridge package."""
