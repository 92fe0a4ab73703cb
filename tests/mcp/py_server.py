"""An MCP server written with the Python `mcp` package, for Baton's MCP tests.

Tools: `count` (reports progress), `whoami` (echoes what the request's
`_meta` carried), `grow` (adds the tool `fresh` and tells the client the tool
list changed), `hang` (waits until cancelled, then writes the marker file it
was given), `broken` (fails), `plan` (asks the client which city, an
elicitation, reporting progress before and after), `signup` (asks for a
name and an age, one elicitation of two fields). Serves stdio by default, Streamable HTTP with
`--http PORT`.
"""

import asyncio
import json
import sys
from typing import Literal

from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("baton-test-py")


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Counts to n, reporting progress at each step."""
    for i in range(1, n + 1):
        await asyncio.sleep(0.02)
        await ctx.report_progress(i, n, f"counted {i}")
    return f"counted to {n}"


@server.tool()
async def whoami(ctx: Context) -> str:
    """Returns the request's _meta fields as JSON."""
    params = ctx.request_context.params or {}
    fields = dict(params.get("_meta") or {})
    return json.dumps({k: v for k, v in fields.items() if k != "progressToken"}, sort_keys=True)


async def fresh() -> str:
    """A tool that exists only after grow."""
    return "fresh and new"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `fresh` and announces the change."""
    server.add_tool(fresh, name="fresh", description="A tool added while the server ran.")
    await ctx.request_context.session.send_tool_list_changed()
    return "grown"


@server.tool()
async def hang(marker: str) -> str:
    """Waits until cancelled; writes `marker` when it is."""
    try:
        await asyncio.sleep(120)
        return "nobody cancelled me"
    except asyncio.CancelledError:
        with open(marker, "w") as f:
            f.write("cancelled")
        raise


@server.tool()
async def broken() -> str:
    """Always fails."""
    raise ToolError("broken on purpose")


class City(BaseModel):
    city: Literal["Paris", "Lisbon", "Oslo"] = Field(description="where to go")


@server.tool()
async def plan(trip: str, ctx: Context, pause: float = 0) -> str:
    """Plans a trip, asking the client which city (then pausing `pause` s)."""
    await ctx.report_progress(1, 3, "looking at cities")
    answer = await ctx.elicit(f"Which city for {trip}?", City)
    await ctx.report_progress(2, 3, f"answered: {answer.action}")
    await asyncio.sleep(pause)
    if answer.action == "accept":
        result = f"{trip} in {answer.data.city}"
    else:
        result = f"no city ({answer.action})"
    await ctx.report_progress(3, 3, "planned")
    return result


class Person(BaseModel):
    name: str = Field(description="your name")
    age: int = Field(description="your age in years")


@server.tool()
async def signup(ctx: Context) -> str:
    """Signs a person up, asking for a name and an age."""
    answer = await ctx.elicit("Who are you?", Person)
    if answer.action == "accept":
        return f"signed up {answer.data.name}, {answer.data.age}"
    return f"not signed up ({answer.action})"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
