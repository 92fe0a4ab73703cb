/**
 * Baton's TypeScript client: the orchestrator and the context store over
 * gRPC (@grpc/grpc-js), events as async iterators, and a ToolHost helper.
 */
export * from "./client";
export * from "./errors";
export * from "./toolhost";
export * as pb from "./gen/baton/v1/orchestrator";
export * as events from "./gen/baton/v1/events";
export * as store from "./gen/baton/v1/context_store";
export * as evals from "./gen/baton/v1/evals";
export * as webhooks from "./gen/baton/v1/webhooks";
