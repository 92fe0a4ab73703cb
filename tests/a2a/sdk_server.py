"""Shared scaffolding for the a2a-sdk (1.3.0) test servers in this folder.

`serve()` takes an `AgentExecutor` and serves it the way Baton's own A2A face
is laid out, so a client that works against one works against the other:

- JSON-RPC 2.0:   POST http://HOST:PORT/a2a/NAME
- HTTP+JSON:      http://HOST:PORT/a2a/NAME/message:send, /message:stream,
                  /tasks/{id}, /tasks, /tasks/{id}:cancel, /tasks/{id}:subscribe
- agent card:     GET http://HOST:PORT/a2a/NAME/.well-known/agent-card.json
                  and GET http://HOST:PORT/.well-known/agent-card.json
- gRPC (only with --grpc-port): lf.a2a.v1.A2AService on HOST:GRPC_PORT,
  published in the card as the bare target "HOST:GRPC_PORT".

With --key, every call except the card needs `Authorization: Bearer KEY`
(HTTP answers 401, gRPC UNAUTHENTICATED) and the card declares a bearer
security scheme, so the SDK's AuthInterceptor would attach the key too.

When everything is listening, one line is written to stdout and flushed:
`LISTENING <http-port>` or, with gRPC, `LISTENING <http-port> GRPC <grpc-port>`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys

import uvicorn

from starlette.applications import Starlette
from starlette.responses import JSONResponse

from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

log = logging.getLogger('a2a-test-server')


def add_server_args(parser: argparse.ArgumentParser) -> None:
    """The command-line options every test server shares."""
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument(
        '--port', type=int, default=0, help='HTTP port; 0 picks a free one'
    )
    parser.add_argument(
        '--grpc-port',
        type=int,
        default=None,
        help='also serve gRPC on this port (0 picks a free one); off if absent',
    )
    parser.add_argument(
        '--key', default=None, help='bearer token every call must carry'
    )
    parser.add_argument(
        '--log-level', default='WARNING', help='Python log level for stderr'
    )


def build_card(
    name: str,
    description: str,
    http_base: str,
    grpc_target: str | None,
    key: str | None,
) -> AgentCard:
    """An agent card listing JSON-RPC, HTTP+JSON and (optionally) gRPC."""
    interfaces = [
        AgentInterface(
            url=http_base, protocol_binding='JSONRPC', protocol_version='1.0'
        ),
        AgentInterface(
            url=http_base, protocol_binding='HTTP+JSON', protocol_version='1.0'
        ),
    ]
    if grpc_target:
        interfaces.append(
            AgentInterface(
                url=grpc_target, protocol_binding='GRPC', protocol_version='1.0'
            )
        )
    card = AgentCard(
        name=name,
        description=description,
        version='1.0.0',
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False
        ),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=[
            AgentSkill(
                id=name,
                name=name,
                description=description,
                tags=['test'],
            )
        ],
    )
    if key:
        # Declaring the scheme makes a2a-sdk's AuthInterceptor send the token.
        card.security_schemes['bearer'].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme='Bearer'
                )
            )
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={'bearer': StringList()})
        )
    return card


class BearerAuthMiddleware:
    """Plain ASGI middleware: refuse any request without the bearer token.

    The paths in `open_paths` (the agent cards) stay public. A pure ASGI
    wrapper is used instead of BaseHTTPMiddleware so SSE responses stream
    through untouched.
    """

    def __init__(self, app, key: str, open_paths: set[str]):
        self.app = app
        self.expected = f'Bearer {key}'.encode()
        self.open_paths = open_paths

    async def __call__(self, scope, receive, send):
        if scope['type'] == 'http' and scope['path'] not in self.open_paths:
            headers = dict(scope.get('headers') or [])
            if headers.get(b'authorization') != self.expected:
                response = JSONResponse(
                    {
                        'error': {
                            'code': 401,
                            'status': 'UNAUTHENTICATED',
                            'message': 'missing or wrong bearer token',
                        }
                    },
                    status_code=401,
                    headers={'WWW-Authenticate': 'Bearer'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _grpc_auth_interceptor(key: str):
    """A grpc.aio server interceptor that aborts calls without the token."""
    import grpc  # noqa: PLC0415  (only needed when gRPC is served)

    expected = f'Bearer {key}'

    async def _deny(_request, context):
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED, 'missing or wrong bearer token'
        )

    async def _deny_stream(_request, context):
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED, 'missing or wrong bearer token'
        )
        yield  # pragma: no cover  (makes this an async generator)

    class _Interceptor(grpc.aio.ServerInterceptor):
        async def intercept_service(self, continuation, details):
            handler = await continuation(details)
            metadata = dict(details.invocation_metadata or ())
            if metadata.get('authorization') == expected or handler is None:
                return handler
            # Keep the method's shape (unary or server-streaming) so gRPC
            # can deliver the abort status to the caller.
            if handler.unary_stream:
                return grpc.unary_stream_rpc_method_handler(
                    _deny_stream,
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
            return grpc.unary_unary_rpc_method_handler(
                _deny,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )

    return _Interceptor()


async def serve(
    executor: AgentExecutor,
    name: str,
    description: str,
    args: argparse.Namespace,
) -> None:
    """Serve `executor` over JSON-RPC + HTTP+JSON (+ gRPC) until signalled."""
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format='%(asctime)s %(levelname)s %(name)s: %(message)s',
    )

    # Bind the HTTP socket ourselves so that --port 0 tells us the real port
    # before the card (which names it) is built.
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted
    # sockets whose proto is IPPROTO_TCP (a bare socket() has proto 0), and
    # without it every reused keep-alive connection waits ~40 ms on Nagle +
    # delayed ACK. Setting it on the listener too is inherited on Linux.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)
    sock.setblocking(False)
    http_port = sock.getsockname()[1]

    grpc_server = None
    grpc_port = None
    if args.grpc_port is not None:
        import grpc  # noqa: PLC0415

        interceptors = [_grpc_auth_interceptor(args.key)] if args.key else []
        grpc_server = grpc.aio.server(interceptors=interceptors)
        grpc_port = grpc_server.add_insecure_port(
            f'{args.host}:{args.grpc_port}'
        )

    path = f'/a2a/{name}'
    card = build_card(
        name=name,
        description=description,
        http_base=f'http://{args.host}:{http_port}{path}',
        grpc_target=f'{args.host}:{grpc_port}' if grpc_port else None,
        key=args.key,
    )

    handler = DefaultRequestHandler(
        agent_executor=executor,
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )

    routes = []
    routes += create_agent_card_routes(card)  # /.well-known/agent-card.json
    routes += create_agent_card_routes(
        card, card_url=f'{path}/.well-known/agent-card.json'
    )
    routes += create_jsonrpc_routes(handler, rpc_url=path)
    routes += create_rest_routes(handler, path_prefix=path)
    app = Starlette(routes=routes)
    if args.key:
        app = BearerAuthMiddleware(
            app,
            args.key,
            {
                '/.well-known/agent-card.json',
                f'{path}/.well-known/agent-card.json',
            },
        )

    if grpc_server is not None:
        from a2a.server.request_handlers import GrpcHandler  # noqa: PLC0415
        from a2a.types import a2a_pb2_grpc  # noqa: PLC0415

        a2a_pb2_grpc.add_A2AServiceServicer_to_server(
            GrpcHandler(handler), grpc_server
        )
        await grpc_server.start()

    config = uvicorn.Config(
        app,
        log_level='warning',
        lifespan='off',
        # Close idle keep-alive connections quickly; SSE streams are unaffected.
        timeout_keep_alive=5,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving  # re-raise a start-up failure
            return
        await asyncio.sleep(0.01)

    line = f'LISTENING {http_port}'
    if grpc_port:
        line += f' GRPC {grpc_port}'
    print(line, flush=True)

    try:
        await serving  # returns after SIGINT/SIGTERM (uvicorn handles them)
    finally:
        await handler.aclose()
        if grpc_server is not None:
            await grpc_server.stop(grace=0.5)
