"""A command-line A2A client built on a2a-sdk 1.3.0, for Baton's tests.

    client.py --card-url URL [--binding JSONRPC|HTTP+JSON|GRPC] [--key K]
              [--version V] [--timeout S] SCENARIO [args]

--card-url is either an agent's base URL (the SDK appends
/.well-known/agent-card.json) or the full URL of a card (ending in ".json").
--binding makes the client use only that transport (ClientConfig
supported_protocol_bindings); without it the client takes the first
interface of the card it supports, in the card's order.
--key sends "Authorization: Bearer K" on every call, card fetch included.
--version overrides the A2A-Version header (the SDK sends "1.0"); "none"
removes it on HTTP transports. Over gRPC the SDK always sends
a2a-version: 1.0 and the override is added as a second value.

Scenarios:
  send TEXT [--context C]         SendMessage, blocking (returns when the
                                  task is terminal or waits for input)
  send-nowait TEXT [--context C]  SendMessage with returnImmediately=true
  stream TEXT [--context C]       SendStreamingMessage, one line per event
  get TASK [--history N]          GetTask
  list [--context C] [--status S] [--page-size N] [--include-artifacts]
                                  ListTasks (S: TASK_STATE_WORKING or working)
  cancel TASK                     CancelTask
  subscribe TASK                  SubscribeToTask, one line per event
  answer TASK TEXT [--context C] [--stream]
                                  a follow-up message on TASK (blocking, or
                                  streamed with --stream)
  card                            the resolved agent card
  raw METHOD URL [--header 'K: V']... [--body JSON]
                                  one plain HTTP request through httpx
                                  (--card-url not needed); prints status,
                                  headers and body (SSE: one line per event)

Output: one JSON object per line on stdout (protobuf JSON, camelCase, via
google.protobuf.json_format.MessageToDict). On failure one line
{"error": {"type": <exception class>, "message": ..., "data": ...}} and
exit code 3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid

from urllib.parse import urlparse

import httpx

from google.protobuf.json_format import MessageToDict

from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.interceptors import AfterArgs, BeforeArgs, ClientCallInterceptor
from a2a.client.client import ClientCallContext
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.constants import VERSION_HEADER

BINDINGS = ['JSONRPC', 'HTTP+JSON', 'GRPC']
ERROR_EXIT = 3


def emit(obj) -> None:
    """Write one JSON line to stdout (protobuf messages as ProtoJSON)."""
    if hasattr(obj, 'DESCRIPTOR'):
        obj = MessageToDict(obj)
    sys.stdout.write(json.dumps(obj, sort_keys=True) + '\n')
    sys.stdout.flush()


class HeaderInterceptor(ClientCallInterceptor):
    """Adds fixed headers (bearer key, A2A-Version override) to every call.

    The SDK turns `ClientCallContext.service_parameters` into HTTP headers
    (JSON-RPC, HTTP+JSON) or gRPC metadata, so this works on all bindings.
    """

    def __init__(self, headers: dict[str, str]):
        self.headers = headers

    async def before(self, args: BeforeArgs) -> None:
        if not self.headers:
            return
        if args.context is None:
            args.context = ClientCallContext()
        if args.context.service_parameters is None:
            args.context.service_parameters = {}
        args.context.service_parameters.update(self.headers)

    async def after(self, args: AfterArgs) -> None:
        return None


def grpc_channel(url: str):
    """The gRPC channel for an interface URL.

    a2a-sdk passes the card's GRPC url to this factory unchanged. Bare
    "host:port" (what the SDK's own samples publish) is used as is; a URL
    with a scheme is reduced to its host:port (https/grpcs -> TLS).
    """
    import grpc  # noqa: PLC0415  (only needed for the GRPC binding)

    secure = False
    target = url
    if '://' in url:
        parsed = urlparse(url)
        secure = parsed.scheme in ('https', 'grpcs')
        target = parsed.netloc
    if secure:
        return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())
    return grpc.aio.insecure_channel(target)


def split_card_url(card_url: str) -> tuple[str, str]:
    """(base URL, relative card path) for A2ACardResolver."""
    if card_url.rstrip('/').endswith('.json'):
        return card_url, ''  # the full card URL: fetch it as given
    return card_url.rstrip('/'), '/.well-known/agent-card.json'


def extra_headers(args: argparse.Namespace) -> dict[str, str]:
    headers = {}
    if args.key:
        headers['Authorization'] = f'Bearer {args.key}'
    if args.version is not None and args.version != 'none':
        headers[VERSION_HEADER] = args.version
    return headers


async def build_client(
    args: argparse.Namespace,
    *,
    streaming: bool = True,
    polling: bool = False,
):
    """Fetch the card and create an SDK client. Returns (client, card, http)."""
    http = httpx.AsyncClient(timeout=args.timeout)
    config = ClientConfig(
        streaming=streaming,
        polling=polling,
        httpx_client=http,
        grpc_channel_factory=grpc_channel,
        supported_protocol_bindings=[args.binding] if args.binding else BINDINGS,
    )
    # The factory sets A2A-Version: 1.0 as a default header of `http`.
    factory = ClientFactory(config)
    if args.version == 'none':
        http.headers.pop(VERSION_HEADER, None)
    headers = extra_headers(args)

    base, card_path = split_card_url(args.card_url)
    resolver = A2ACardResolver(http, base, agent_card_path=card_path)
    card = await resolver.get_agent_card(http_kwargs={'headers': headers})
    client = factory.create(card, interceptors=[HeaderInterceptor(headers)])
    return client, card, http


def user_message(text: str, task_id: str = '', context_id: str = '') -> Message:
    return Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


def parse_state(value: str) -> int:
    name = value.upper()
    if not name.startswith('TASK_STATE_'):
        name = 'TASK_STATE_' + name.replace('-', '_')
    return TaskState.Value(name)


async def run_raw(args: argparse.Namespace) -> None:
    """One plain HTTP request; prints status/headers and the body."""
    headers = {}
    if args.version != 'none':
        headers[VERSION_HEADER] = args.version or '1.0'
    if args.key:
        headers['Authorization'] = f'Bearer {args.key}'
    for h in args.header:
        name, _, value = h.partition(':')
        headers[name.strip()] = value.strip()
    content = args.body.encode() if args.body is not None else None
    if content is not None and not any(
        k.lower() == 'content-type' for k in headers
    ):
        headers['Content-Type'] = 'application/json'
    async with httpx.AsyncClient(timeout=args.timeout) as http:
        async with http.stream(
            args.method.upper(), args.url, headers=headers, content=content
        ) as resp:
            emit(
                {
                    'status': resp.status_code,
                    'headers': {k.lower(): v for k, v in resp.headers.items()},
                }
            )
            if 'text/event-stream' in resp.headers.get('content-type', ''):
                # One line per SSE event: {"event": name, "data": parsed}.
                event, data = 'message', []
                async for line in resp.aiter_lines():
                    if not line:
                        if data:
                            emit({'event': event, 'data': _maybe_json('\n'.join(data))})
                        event, data = 'message', []
                    elif line.startswith(':'):
                        continue
                    else:
                        key, _, val = line.partition(':')
                        val = val[1:] if val.startswith(' ') else val
                        if key == 'event':
                            event = val
                        elif key == 'data':
                            data.append(val)
                if data:
                    emit({'event': event, 'data': _maybe_json('\n'.join(data))})
            else:
                body = (await resp.aread()).decode('utf-8', 'replace')
                emit({'body': _maybe_json(body)})


def _maybe_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


async def run(args: argparse.Namespace) -> None:
    scenario = args.scenario
    if scenario == 'raw':
        await run_raw(args)
        return
    if not args.card_url:
        raise SystemExit('--card-url is required for this scenario')

    # Blocking sends use SendMessage; the SDK client would otherwise switch
    # to SendStreamingMessage whenever the card says streaming is supported.
    blocking = scenario in ('send', 'send-nowait') or (
        scenario == 'answer' and not args.stream
    )
    client, card, http = await build_client(
        args, streaming=not blocking, polling=scenario == 'send-nowait'
    )
    try:
        if scenario == 'card':
            emit(card)
        elif scenario in ('send', 'send-nowait', 'stream', 'answer'):
            if scenario == 'answer':
                msg = user_message(args.text, args.task, args.context or '')
            else:
                msg = user_message(args.text, context_id=args.context or '')
            request = SendMessageRequest(
                message=msg, configuration=SendMessageConfiguration()
            )
            async for event in client.send_message(request):
                emit(event)
        elif scenario == 'get':
            request = GetTaskRequest(id=args.task)
            if args.history is not None:
                request.history_length = args.history
            emit(await client.get_task(request))
        elif scenario == 'list':
            request = ListTasksRequest()
            if args.context:
                request.context_id = args.context
            if args.status:
                request.status = parse_state(args.status)
            if args.page_size is not None:
                request.page_size = args.page_size
            if args.include_artifacts:
                request.include_artifacts = True
            emit(await client.list_tasks(request))
        elif scenario == 'cancel':
            emit(await client.cancel_task(CancelTaskRequest(id=args.task)))
        elif scenario == 'subscribe':
            async for event in client.subscribe(
                SubscribeToTaskRequest(id=args.task)
            ):
                emit(event)
    finally:
        await client.close()
        await http.aclose()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='A2A client CLI (a2a-sdk 1.3.0)',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument('--card-url')
    parser.add_argument('--binding', choices=BINDINGS)
    parser.add_argument('--key')
    parser.add_argument('--version', help='A2A-Version override, or "none"')
    parser.add_argument('--timeout', type=float, default=30.0)
    sub = parser.add_subparsers(dest='scenario', required=True)

    for name in ('send', 'send-nowait', 'stream'):
        p = sub.add_parser(name)
        p.add_argument('text')
        p.add_argument('--context')
    p = sub.add_parser('answer')
    p.add_argument('task')
    p.add_argument('text')
    p.add_argument('--context')
    p.add_argument('--stream', action='store_true')
    p = sub.add_parser('get')
    p.add_argument('task')
    p.add_argument('--history', type=int)
    p = sub.add_parser('list')
    p.add_argument('--context')
    p.add_argument('--status')
    p.add_argument('--page-size', type=int)
    p.add_argument('--include-artifacts', action='store_true')
    for name in ('cancel', 'subscribe'):
        sub.add_parser(name).add_argument('task')
    sub.add_parser('card')
    p = sub.add_parser('raw')
    p.add_argument('method')
    p.add_argument('url')
    p.add_argument('--header', action='append', default=[])
    p.add_argument('--body')
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(run(args))
    except Exception as e:  # noqa: BLE001  (reported as one JSON line)
        error = {'type': type(e).__name__, 'message': str(e)}
        data = getattr(e, 'data', None)
        if data:
            error['data'] = data
        emit({'error': error})
        return ERROR_EXIT
    return 0


if __name__ == '__main__':
    sys.exit(main())
