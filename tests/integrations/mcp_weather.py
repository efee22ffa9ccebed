"""A real MCP server (the ``mcp`` package's MCPServer, formerly FastMCP) over stdio for the MCP
adapter tests: one tool, one resource, one prompt. Each tool call is appended to the file
named by ``MCP_WEATHER_LOG``, so a test sees whether the server ran."""

from __future__ import annotations

import os

from mcp.server import MCPServer

server = MCPServer("weather")


@server.tool()
def forecast(city: str) -> str:
    """The forecast for a city."""
    with open(os.environ["MCP_WEATHER_LOG"], "a", encoding="utf-8") as log:
        log.write(city + "\n")
    return f"sunny in {city}"


@server.resource("config://units")
def units() -> str:
    return "celsius"


@server.prompt()
def ask(city: str) -> str:
    return f"What is the weather in {city}?"


if __name__ == "__main__":
    server.run()
