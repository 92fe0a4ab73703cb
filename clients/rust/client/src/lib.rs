//! Rust client for Baton's gRPC API.
//!
//! This crate depends on the generated API types only, never on the service
//! crates: [`OrchestratorClient`] runs agents and answers their questions,
//! [`StoreClient`] reads and writes the context store.
//!
//! The modules, bottom to top: `error` and `target` (how an endpoint is
//! written) are leaves; [`tls`] and [`balance`] make channels to one
//! address or to every address of a name; `channel` is the one way both
//! clients connect; `orchestrator` and `store` are the clients. This file
//! only declares them and re-exports what callers use.
//!
//! ```no_run
//! # async fn demo() -> Result<(), baton_client::Error> {
//! let store = baton_client::StoreClient::connect("http://127.0.0.1:50052").await?;
//! let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
//! let v = store.put(trace, "notes/plan", b"step 1".to_vec()).await?.version;
//! let slot = store.get(trace, "notes/plan").await?;
//! assert_eq!(slot.value, b"step 1");
//! # let _ = v; Ok(()) }
//! ```

pub mod balance;
mod channel;
mod conversations;
mod error;
mod experiments;
mod orchestrator;
mod schedules;
mod store;
mod target;
pub mod tls;
mod webhooks;

pub use balance::lazy_channel;
pub use baton_proto::v1 as pb;
/// `google.protobuf.Timestamp` and `Duration` as the `pb` messages hold them.
pub use baton_proto::wkt;
pub use channel::{channel, channel_with};
pub use error::{Error, cause_chain};
pub use orchestrator::{Events, Link, OrchestratorClient, REATTACH_FOR};
pub use store::{DeleteSelection, MetadataHook, PutEntry, PutOptions, StoreClient};
pub use target::with_scheme;
pub use tls::ClientTls;
