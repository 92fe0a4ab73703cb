"""The session docs/mcp.md shows: the official Python `mcp` SDK's client
against Baton's MCP endpoint (`baton up`, then
`.tools/servers-venv/bin/python tests/mcp/session.py [URL]`)."""

import sys

import anyio
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

URL = sys.argv[1] if len(sys.argv) > 1 else "http://localhost:50051/mcp"


async def answer(context, params):
    print(f"  asked: {params.message} {params.requested_schema['properties']}")
    return types.ElicitResult(action="accept", content={"answer": "Lisbon"})


async def progress(n, total, message):
    print(f"  progress {n:g}: {message}")


async def main():
    async with streamable_http_client(URL) as (read, write):
        async with ClientSession(read, write, elicitation_callback=answer) as session:
            init = await session.initialize()
            print("protocol", init.protocol_version, "server", init.server_info.name)
            for tool in (await session.list_tools()).tools:
                print("tool", tool.name, "-", tool.description)
            result = await session.call_tool(
                "researcher", {"input": "the history of Rust"}, progress_callback=progress
            )
            print("researcher:", result.content[0].text)
            print("  _meta:", result.meta)
            result = await session.call_tool("interviewer", {"input": "a trip"})
            print("interviewer:", result.content[0].text)


anyio.run(main)
