"""An MCP client on the official Python `mcp` SDK (streamable_http_client +
ClientSession), for the tests of Baton's MCP server (tests/tests/mcp_server.rs).

    client.py URL [--key KEY] [--mode MODE] list
    client.py URL [--key KEY] [--mode MODE] call TOOL INPUT [--context JSON] [--progress]
              [--answer TEXT | --approve | --deny | --decline] [--cancel-after SECONDS]
              [--answer-at URL2]

Prints one JSON object a line: `{"initialized": {...}}` after the handshake,
`{"tools": [...]}`, `{"progress": n, "message": ...}` per progress
notification, `{"elicit": {...}}` per elicitation request (and how it was
answered), `{"result": {...}}` (the CallToolResult as JSON, `_meta`
included), `{"cancelled": true}` when the call was abandoned after
--cancel-after. An error prints `{"error": {"type", "message"}}` and exits 3.
With --answer/--approve/--deny/--decline the client declares elicitation;
without them it does not.

--mode legacy (the default) is the handshake era: ClientSession.initialize
(2025-11-25 or 2025-06-18 when Baton serves those). --mode auto or
2026-07-28 uses the SDK's high-level Client: `auto` probes server/discover
and takes the newest revision both speak; a question is then an
InputRequiredResult the client answers by retrying the call (the SDK does
it). With --answer-at URL2 the first round goes to URL and, when it asks,
the answers go with the call's requestState to URL2 (another replica):
`{"input_required": {...}}` is printed between. With --once the client
makes one round and prints its InputRequiredResult or result; with
--request-state STATE [--input-responses JSON] that round is a retry of
an earlier one.
"""

import argparse
import json
import sys

import anyio
import mcp.types as types
from mcp.client.client import Client
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

    if args.mode != "legacy":
        await modern(args, headers, on_elicit if elicits else None, on_progress)
        return

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
                call = lambda: session.call_tool(  # noqa: E731
                    args.tool,
                    arguments_of(args),
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


def arguments_of(args):
    arguments = {"input": args.input}
    if args.context:
        arguments["context"] = json.loads(args.context)
    return arguments


async def modern(args, headers, on_elicit, on_progress):
    """The same commands on the SDK's high-level Client (server/discover, no
    handshake, no session)."""
    async with create_mcp_http_client(headers=headers) as http:

        def connect(url):
            return Client(
                streamable_http_client(url, http_client=http),
                mode=args.mode,
                elicitation_callback=on_elicit,
                cache=None,
            )

        async with connect(args.url) as client:
            emit(
                {
                    "initialized": {
                        "protocolVersion": client.protocol_version,
                        "serverInfo": dump(client.server_info),
                        "capabilities": dump(client.server_capabilities),
                    }
                }
            )
            if args.command == "list":
                tools = await client.list_tools()
                emit({"tools": [dump(t) for t in tools.tools]})
                return
            progress = on_progress if args.progress else None
            if args.once:
                responses = json.loads(args.input_responses) if args.input_responses else None
                round = await client.session.call_tool(
                    args.tool,
                    arguments_of(args),
                    progress_callback=progress,
                    input_responses=responses,
                    request_state=args.request_state,
                    allow_input_required=True,
                )
                key = "input_required" if isinstance(round, types.InputRequiredResult) else "result"
                emit({key: dump(round)})
                return
            if args.answer_at:
                first = await client.session.call_tool(
                    args.tool, arguments_of(args), progress_callback=progress, allow_input_required=True
                )
                if not isinstance(first, types.InputRequiredResult):
                    emit({"result": dump(first)})
                    return
                emit({"input_required": dump(first)})
                responses = {}
                for key, request in (first.input_requests or {}).items():
                    answered = await on_elicit(None, request.params)
                    responses[key] = dump(answered)
                async with connect(args.answer_at) as other:
                    result = await other.call_tool(
                        args.tool,
                        arguments_of(args),
                        progress_callback=progress,
                        input_responses=responses,
                        request_state=first.request_state,
                    )
                    emit({"result": dump(result)})
                return
            call = lambda: client.call_tool(args.tool, arguments_of(args), progress_callback=progress)  # noqa: E731
            if args.cancel_after is None:
                emit({"result": dump(await call())})
                return
            with anyio.move_on_after(args.cancel_after) as scope:
                emit({"result": dump(await call())})
            if scope.cancelled_caught:
                emit({"cancelled": True})
                await anyio.sleep(0.5)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--key")
    p.add_argument("--mode", default="legacy")
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
    c.add_argument("--answer-at")
    c.add_argument("--once", action="store_true")
    c.add_argument("--request-state")
    c.add_argument("--input-responses")
    return p.parse_args()


if __name__ == "__main__":
    try:
        anyio.run(main, parse())
    except BaseException as e:  # noqa: BLE001 - the test reads what failed
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        emit({"error": {"type": type(e).__name__, "message": str(e)}})
        sys.exit(3)
