"""MCP over stdio (``chartgen --mcp``): stdout carries the protocol only; logs go to stderr."""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client on stdin/stdout until stdin closes."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
