"""Serve Python functions as Baton tools (the ``baton.v1.ToolHost`` service).

>>> tools = ToolServer()
>>> @tools.tool
... async def web_search(ctx: ToolContext, query: str, limit: int = 3) -> str:
...     '''Searches the web.'''
...     await ctx.progress(50, "searching")
...     return f"{limit} results for {query}"
>>> port = await tools.start("127.0.0.1:50061")

The argument JSON schema comes from the type hints (``str``, ``int``,
``float``, ``bool``, ``list[...]``, ``dict``, ``Optional[...]``; parameters
without a default are required) and the description from the docstring. A
tool reports progress (``ctx.progress``), offers options (``ctx.options``)
and asks the person for input (``await ctx.ask(...)``): the first time, the
call ends with an input request; when the answer comes the orchestrator
calls the tool again and ``ask`` returns it, so a tool may ask several
questions, replayed in order (keep what runs before an ``ask`` idempotent).
A tool's return value is its output (anything but ``str`` as JSON); an
exception is an error the model sees.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
import sys
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc

from baton.v1 import tool_host_pb2 as pb, tool_host_pb2_grpc as pb_grpc

ToolFn = Callable[..., Awaitable[Any]]


class _NeedInput(Exception):
    def __init__(self, prompt: str, options: Sequence[str], token: str) -> None:
        super().__init__(prompt)
        self.prompt, self.options, self.token = prompt, list(options), token


class ToolContext:
    """What a running tool knows of its call, and how it talks back."""

    def __init__(self, request: pb.ExecuteRequest, events: asyncio.Queue, traceparent: str | None) -> None:
        c = request.context
        self.call_id: str = request.call_id
        self.tool: str = request.tool
        self.trace_id: str = c.trace_id
        self.run_id: str = c.run_id
        self.context_id: str = c.context_id
        self.depth: int = c.depth
        self.agent: str = c.agent
        #: ``{run_id}/{context_id}/{call_id}``: the same for every execution of
        #: this call, also when the run is resumed elsewhere and the call is
        #: done again (calls are at least once): key effects that must happen
        #: once on it.
        self.idempotency_key: str = request.idempotency_key
        #: The caller's W3C trace context (the orchestrator's tool span).
        self.traceparent: str | None = traceparent
        self._events = events
        answers: list[str] = json.loads(request.resume_token) if request.resume_token else []
        if request.resume_token:
            answers.append(request.input)
        self._answers = answers
        self._asked = 0

    async def progress(self, percent: int, message: str = "") -> None:
        """Reports progress (0–100) to the run's subscribers."""
        await self._events.put(
            pb.ExecuteResponse(progress=pb.ExecuteResponse.Progress(percent=max(0, min(100, percent)), message=message))
        )

    async def options(self, question: str, options: Sequence[str]) -> None:
        """Offers options while the tool runs."""
        await self._events.put(
            pb.ExecuteResponse(options=pb.ExecuteResponse.Options(question=question, options=list(options)))
        )

    async def ask(self, prompt: str, options: Sequence[str] = ()) -> str:
        """Asks the person and returns the answer (see the module docs)."""
        if self._asked < len(self._answers):
            answer = self._answers[self._asked]
            self._asked += 1
            return answer
        raise _NeedInput(prompt, options, json.dumps(self._answers))


def _schema(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _schema(rest[0]) if len(rest) == 1 else {}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint in (list, tuple) or origin in (list, tuple, Sequence):
        return {"type": "array", "items": _schema(args[0]) if args else {}}
    if hint is dict or origin is dict:
        return {"type": "object"}
    return {}


class _Tool:
    def __init__(self, fn: ToolFn, name: str, description: str) -> None:
        self.fn, self.name, self.description = fn, name, description
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters.values())[1:]  # after ctx
        self.schema: dict[str, Any] = {
            "type": "object",
            "properties": {p.name: _schema(hints.get(p.name, Any)) for p in params},
            "required": [p.name for p in params if p.default is inspect.Parameter.empty],
        }


class ToolServer(pb_grpc.ToolHostServicer):
    """A ToolHost server of decorated async functions."""

    def __init__(self) -> None:
        self._tools: dict[str, _Tool] = {}
        self._server: grpc.aio.Server | None = None

    def tool(self, fn: ToolFn | None = None, *, name: str | None = None, description: str | None = None) -> Any:
        """Registers ``async def f(ctx, ...)`` as a tool (usable bare or with arguments)."""

        def register(f: ToolFn) -> ToolFn:
            if not inspect.iscoroutinefunction(f):
                raise TypeError(f"tool {f.__name__}: must be an async function")
            tool_name = name or f.__name__
            self._tools[tool_name] = _Tool(f, tool_name, description or inspect.getdoc(f) or "")
            return f

        return register(fn) if fn is not None else register

    async def start(self, address: str = "127.0.0.1:0") -> int:
        """Serves on ``address``; returns the bound port."""
        self._server = grpc.aio.server()
        pb_grpc.add_ToolHostServicer_to_server(self, self._server)
        port = self._server.add_insecure_port(address)
        await self._server.start()
        return port

    def serve(self, address: str = "127.0.0.1:50061") -> None:
        """Serves on ``address`` until Ctrl-C or SIGTERM, then stops
        gracefully: blocks, for a script's last line (``tools.serve()``).
        Inside a running event loop use :meth:`start` and :meth:`stop`."""

        async def main() -> None:
            port = await self.start(address)
            host = address.rsplit(":", 1)[0]
            print(f"serving {', '.join(self._tools) or 'no tools'} on {host}:{port}", file=sys.stderr, flush=True)
            stopping = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stopping.set)
            await stopping.wait()
            await self.stop()

        asyncio.run(main())

    async def stop(self, grace: float | None = 1.0) -> None:
        if self._server is not None:
            await self._server.stop(grace)

    async def ListTools(self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext) -> pb.ListToolsResponse:
        return pb.ListToolsResponse(
            tools=[
                pb.ToolSpec(name=t.name, description=t.description, parameters_json_schema=json.dumps(t.schema))
                for t in self._tools.values()
            ]
        )

    async def Execute(
        self, request: pb.ExecuteRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ExecuteResponse]:
        tool = self._tools.get(request.tool)
        if tool is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"tool: no tool {request.tool!r} here")
        try:
            args = json.loads(request.arguments_json or "{}")
        except json.JSONDecodeError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"arguments_json: {e}")
        metadata = dict(context.invocation_metadata() or ())
        events: asyncio.Queue = asyncio.Queue()
        ctx = ToolContext(request, events, metadata.get("traceparent"))

        async def run() -> pb.ExecuteResponse:
            try:
                out = await tool.fn(ctx, **args)
            except _NeedInput as need:
                return pb.ExecuteResponse(
                    input_required=pb.ExecuteResponse.InputRequired(
                        prompt=need.prompt, options=need.options, resume_token=need.token
                    )
                )
            except Exception as e:  # the model sees the error
                return pb.ExecuteResponse(error=pb.ExecuteResponse.Error(message=f"{type(e).__name__}: {e}"))
            text = out if isinstance(out, str) else json.dumps(out)
            return pb.ExecuteResponse(result=pb.ExecuteResponse.Result(output=text))

        task = asyncio.ensure_future(run())
        try:
            while True:
                getter = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                while not events.empty():
                    yield events.get_nowait()
                yield task.result()
                return
        finally:
            # The caller went away (the run was cancelled): stop the tool.
            task.cancel()
