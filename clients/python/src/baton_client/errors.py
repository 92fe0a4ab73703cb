"""Typed errors, one per gRPC status code Baton uses.

Every error carries the status ``code``, the server's ``message`` and, when
the server named the request field at fault (the ``baton-field`` trailer),
that ``field``. A compare-and-swap mismatch also carries the slot's
``current_version``.
"""

from __future__ import annotations

import grpc


class BatonError(Exception):
    """A call to Baton failed."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        field: str | None = None,
        current_version: int | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.field = field
        self.current_version = current_version


class InvalidArgument(BatonError):
    """A request field is malformed; ``field`` names it. Nothing changed."""


class NotFound(BatonError):
    """The run, approval, input request, conversation or slot does not exist."""


class AlreadyExists(BatonError):
    """What the request would create exists already (a conversation id)."""


class FailedPrecondition(BatonError):
    """The request is valid but the run is not in a state to take it."""


class ResourceExhausted(BatonError):
    """A size limit or quota refused the request; ``field`` names what."""


class Aborted(BatonError):
    """A version did not match (``current_version``), or a watch fell behind."""


class Unavailable(BatonError):
    """The server or its backend cannot be reached; retry."""


class DeadlineExceeded(BatonError):
    """The call's deadline passed."""


class Cancelled(BatonError):
    """The call was cancelled."""


class Unimplemented(BatonError):
    """The server does not implement this call yet."""


class Internal(BatonError):
    """The server failed unexpectedly."""


class Unauthenticated(BatonError):
    """The call carries no API key, or one the server does not know."""


class PermissionDenied(BatonError):
    """The caller may not do this."""


_BY_CODE: dict[grpc.StatusCode, type[BatonError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def from_rpc_error(e: grpc.aio.AioRpcError) -> BatonError:
    """The typed error for a failed call."""
    trailers = dict(e.trailing_metadata() or ())
    field = trailers.get("baton-field")
    version = trailers.get("baton-current-version")
    cls = _BY_CODE.get(e.code(), BatonError)
    return cls(
        e.code(),
        e.details() or "",
        field=field if isinstance(field, str) else None,
        current_version=int(version) if isinstance(version, str) and version.isdigit() else None,
    )
