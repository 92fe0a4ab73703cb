"""An MCP client on the official Python `mcp` SDK (streamable_http_client +
ClientSession), for the tests of Baton's MCP server (tests/tests/mcp_server.rs).

    client.py URL [--key KEY] list
    client.py URL [--key KEY] call TOOL INPUT [--context JSON] [--progress]
              [--answer TEXT | --approve | --deny | --decline] [--cancel-after SECONDS]

Prints one JSON object a line: `{"initialized": {...}}` after the handshake,
`{"tools": [...]}`, `{"progress": n, "message": ...}` per progress
notification, `{"elicit": {...}}` per elicitation request (and how it was
answered), `{"result": {...}}` (the CallToolResult as JSON, `_meta`
included), `{"cancelled": true}` when the call was abandoned after
--cancel-after. An error prints `{"error": {"type", "message"}}` and exits 3.
With --answer/--approve/--deny/--decline the client declares elicitation;
without them it does not.
"""

import argparse
import json
import sys

import anyio
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(args):
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else None
    answer = getattr(args, "answer", None)
    approve, deny, decline = (getattr(args, k, False) for k in ("approve", "deny", "decline"))
    elicits = answer is not None or approve or deny or decline

    async def on_elicit(context, params):
        asked = dump(params)
        if decline:
            emit({"elicit": asked, "action": "decline"})
            return types.ElicitResult(action="decline")
        schema = asked.get("requestedSchema", {}).get("properties", {})
        if "approve" in schema:
            content = {"approve": bool(approve)}
        else:
            content = {"answer": answer}
        emit({"elicit": asked, "action": "accept", "content": content})
        return types.ElicitResult(action="accept", content=content)

    async def on_progress(progress, total, message):
        emit({"progress": progress, "message": message})

    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(args.url, http_client=http) as (read, write):
            async with ClientSession(
                read, write, elicitation_callback=on_elicit if elicits else None
            ) as session:
                init = await session.initialize()
                emit(
                    {
                        "initialized": {
                            "protocolVersion": init.protocol_version,
                            "serverInfo": dump(init.server_info),
                            "capabilities": dump(init.capabilities),
                        }
                    }
                )
                if args.command == "list":
                    tools = await session.list_tools()
                    emit({"tools": [dump(t) for t in tools.tools]})
                    return
                arguments = {"input": args.input}
                if args.context:
                    arguments["context"] = json.loads(args.context)
                call = lambda: session.call_tool(  # noqa: E731
                    args.tool,
                    arguments,
                    progress_callback=on_progress if args.progress else None,
                )
                if args.cancel_after is None:
                    result = await call()
                    emit({"result": dump(result)})
                    return
                with anyio.move_on_after(args.cancel_after) as scope:
                    result = await call()
                    emit({"result": dump(result)})
                if scope.cancelled_caught:
                    emit({"cancelled": True})
                    # Give the notification time to leave before the session closes.
                    await anyio.sleep(0.5)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--key")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    c = sub.add_parser("call")
    c.add_argument("tool")
    c.add_argument("input")
    c.add_argument("--context")
    c.add_argument("--progress", action="store_true")
    c.add_argument("--answer")
    c.add_argument("--approve", action="store_true")
    c.add_argument("--deny", action="store_true")
    c.add_argument("--decline", action="store_true")
    c.add_argument("--cancel-after", type=float)
    return p.parse_args()


if __name__ == "__main__":
    try:
        anyio.run(main, parse())
    except BaseException as e:  # noqa: BLE001 - the test reads what failed
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        emit({"error": {"type": type(e).__name__, "message": str(e)}})
        sys.exit(3)
