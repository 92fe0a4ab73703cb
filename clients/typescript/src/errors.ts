/**
 * Typed errors, one class per gRPC status code Baton uses. Each carries the
 * status `code`, the server's message, the request `field` the server named
 * (the `baton-field` trailer) and, on a version mismatch, `currentVersion`.
 */
import { Metadata, ServiceError, status } from "@grpc/grpc-js";

export class BatonError extends Error {
  constructor(
    readonly code: status,
    readonly details: string,
    readonly field?: string,
    readonly currentVersion?: number,
  ) {
    super(`${status[code]}: ${details}`);
    this.name = new.target.name;
  }
}
/** A request field is malformed; `field` names it. Nothing changed. */
export class InvalidArgument extends BatonError {}
/** The run, approval, input request, conversation or slot does not exist. */
export class NotFound extends BatonError {}
/** What the request would create exists already (a conversation id). */
export class AlreadyExists extends BatonError {}
/** Valid, but the run is not in a state to take it. */
export class FailedPrecondition extends BatonError {}
/** A size limit or quota refused the request. */
export class ResourceExhausted extends BatonError {}
/** A version did not match (`currentVersion`), or a watch fell behind. */
export class Aborted extends BatonError {}
/** The server or its backend cannot be reached; retry. */
export class Unavailable extends BatonError {}
/** The call's deadline passed. */
export class DeadlineExceeded extends BatonError {}
/** The call was cancelled. */
export class Cancelled extends BatonError {}
/** The server does not implement this call yet. */
export class Unimplemented extends BatonError {}
/** The server failed unexpectedly. */
export class Internal extends BatonError {}
/** The call carries no API key, or one the server does not know. */
export class Unauthenticated extends BatonError {}
/** The caller may not do this. */
export class PermissionDenied extends BatonError {}

const byCode: Partial<Record<status, typeof BatonError>> = {
  [status.INVALID_ARGUMENT]: InvalidArgument,
  [status.NOT_FOUND]: NotFound,
  [status.ALREADY_EXISTS]: AlreadyExists,
  [status.FAILED_PRECONDITION]: FailedPrecondition,
  [status.RESOURCE_EXHAUSTED]: ResourceExhausted,
  [status.ABORTED]: Aborted,
  [status.UNAVAILABLE]: Unavailable,
  [status.DEADLINE_EXCEEDED]: DeadlineExceeded,
  [status.CANCELLED]: Cancelled,
  [status.UNIMPLEMENTED]: Unimplemented,
  [status.INTERNAL]: Internal,
  [status.UNAUTHENTICATED]: Unauthenticated,
  [status.PERMISSION_DENIED]: PermissionDenied,
};

function one(md: Metadata | undefined, key: string): string | undefined {
  const v = md?.get(key)[0];
  return typeof v === "string" ? v : undefined;
}

/** The typed error for a failed call (other errors pass through). */
export function fromServiceError(e: unknown): unknown {
  const se = e as Partial<ServiceError>;
  if (typeof se?.code !== "number") return e;
  const version = one(se.metadata, "baton-current-version");
  const Cls = byCode[se.code as status] ?? BatonError;
  return new Cls(
    se.code as status,
    se.details ?? "",
    one(se.metadata, "baton-field"),
    version !== undefined && /^\d+$/.test(version) ? Number(version) : undefined,
  );
}
