//! `baton`: the command line for Baton.
//!
//! `baton store …` reads and writes a context store's slots; the orchestrator
//! commands (`baton up`, `baton run`, `baton agents`) arrive with the
//! orchestrator.

mod store;

use clap::{Parser, Subcommand};

/// Baton: run LLM agents and pipelines, and inspect their shared context.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Read, write and watch a context store's slots.
    Store(store::StoreArgs),
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let result = match Args::parse().command {
        Cmd::Store(args) => store::run(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line a person can act on; the chain only when it adds to it.
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}
