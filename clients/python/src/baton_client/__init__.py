"""Baton's Python client: the orchestrator and the context store over gRPC
(asyncio), and a helper to serve Python functions as tools.

>>> from baton_client import Orchestrator, kind
>>> async with Orchestrator("127.0.0.1:50051") as baton:
...     async for event in baton.run_agent("researcher", "tides", max_depth=2):
...         print(event.depth, event.context_id, kind(event))
"""

from .client import (
    Conversation,
    Orchestrator,
    RunEvent,
    RunStream,
    Store,
    generation_settings,
    is_terminal,
    kind,
)
from .errors import (
    Aborted,
    AlreadyExists,
    BatonError,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from .toolhost import ToolContext, ToolServer

__all__ = [
    "Aborted",
    "AlreadyExists",
    "BatonError",
    "Cancelled",
    "Conversation",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "Orchestrator",
    "PermissionDenied",
    "ResourceExhausted",
    "RunEvent",
    "RunStream",
    "Store",
    "ToolContext",
    "ToolServer",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "generation_settings",
    "is_terminal",
    "kind",
]
