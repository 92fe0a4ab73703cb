//! `baton-bench`: Baton's benchmarks, each measured in one run against the
//! reference its issue names. Benchmarks never run in the test suite.
//!
//! - `store`: the context store's Put and Get through gRPC at concurrency 1
//!   and 64, beside `redis-benchmark` on the same Redis and a bare tonic
//!   handler doing one Redis GET (the floor any gRPC-over-Redis service pays).
//! - `agent`: RunAgent with an instant scripted model through gRPC, in the
//!   shapes of the OpenAI Agents SDK figures the orchestrator issue quotes.
//! - `durable`: shapes (a)–(c) of `agent` with runs kept in Redis
//!   (`runs.store = "redis"`) against memory mode, in one invocation.
//! - `http`: events per second on one SSE stream of the HTTP face against
//!   the same run over gRPC, in one invocation.
//! - `a2a`: the A2A face's SendMessage round trip and streamed updates per
//!   second against the `a2a-sdk` server, and what an A2A remote sub-agent
//!   costs over a local one.
//! - `mcp`: the MCP face's `tools/call` round trip to an instant agent
//!   beside the same run through gRPC, p50 and p99.
//! - `pipeline`: RunPipeline with no-op steps, in the shapes of the LangGraph
//!   figures the pipeline issue quotes, on memory and on Redis.
//! - `conversation`: a 50-message conversation's next run against the
//!   same run with the history in its request, on memory and Redis; the
//!   Redis commands it adds; the bytes a stored message takes; 20 senders
//!   racing on one conversation.
//! - `eval`: an experiment of 1,000 cases with four scorers against plain
//!   runs of the same agent; what its record holds in memory and in Redis.
//! - `chaos`: not a measurement but the chaos test's soak (faults on three
//!   replicas for half an hour, every run checked); it exits non-zero on
//!   any violation.

mod a2a;
mod agent;
mod chaos;
mod conversation;
mod durable;
mod eval;
mod failover;
mod fork;
mod heap;
mod http;
mod mcp;
mod pipeline;
mod store;
mod webhooks;

use clap::{Parser, Subcommand};

/// Baton's benchmarks.
#[derive(Parser)]
#[command(about)]
struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Context store Put/Get vs redis-benchmark and a bare tonic + Redis floor.
    Store(store::Options),
    /// RunAgent: tool-call loop, nesting, event rate, parked runs' memory.
    Agent(agent::Options),
    /// RunAgent with durable runs (Redis) against memory mode: (a)–(c).
    Durable(durable::Options),
    /// RunPipeline: a 200-step chain and a 1000-step fan-out with a join.
    Pipeline(pipeline::Options),
    /// The HTTP face: events per second on one SSE stream against gRPC.
    Http(http::Options),
    /// The A2A face against the a2a-sdk server; a remote sub-agent's cost.
    A2a(a2a::Options),
    /// The MCP face: tools/call round trip beside gRPC.
    Mcp(mcp::Options),
    /// The chaos soak: faults on three durable replicas, every run checked.
    Chaos(chaos::Options),
    /// Conversations: a 50-message conversation's next run against the
    /// history in the request; bytes per message; a 20-sender race.
    Conversation(conversation::Options),
    /// Evaluations: an experiment of 1,000 cases against plain runs.
    Eval(eval::Options),
    /// Webhooks: deliveries per second, run end to webhook p50/p99.
    Webhooks(webhooks::Options),
    /// ForkRun: fork to first live event for 100–10,000-turn runs; history's cost.
    Fork(fork::Options),
}

fn main() -> anyhow::Result<()> {
    // As the service binaries do.
    baton_common::runtime::disable_transparent_huge_pages();
    match Args::parse().bench {
        Bench::Store(options) => store::run(options),
        Bench::Agent(options) => agent::run(options),
        Bench::Durable(options) => durable::run(options),
        Bench::Pipeline(options) => pipeline::run(options),
        Bench::Http(options) => http::run(options),
        Bench::A2a(options) => a2a::run(options),
        Bench::Mcp(options) => mcp::run(options),
        Bench::Fork(options) => fork::run(options),
        Bench::Conversation(options) => conversation::run(options),
        Bench::Chaos(options) => chaos::run(options),
        Bench::Eval(options) => eval::run(options),
        Bench::Webhooks(options) => webhooks::run(options),
    }
}
