//! `baton store`: the context store from the command line. Values go to
//! stdout as they are; metadata and listings print as JSON lines.

use std::{io::Read, time::Duration};

use anyhow::Context;
use baton_client::{DeleteSelection, PutEntry, PutOptions, StoreClient, pb};
use clap::{Args, Subcommand};
use futures::StreamExt;
use serde_json::json;

/// The media type of a value given as text on the command line.
const TEXT: &str = "text/plain; charset=utf-8";

/// `baton store` arguments.
#[derive(Args)]
pub struct StoreArgs {
    /// The context store's address.
    #[arg(
        long,
        env = "BATON_STORE_ENDPOINT",
        default_value = "http://127.0.0.1:50052",
        global = true
    )]
    endpoint: String,
    /// A client API key of the store's `auth.api_keys_file` (sent as
    /// `authorization: Bearer <key>`); the slots reached are its tenant's.
    #[arg(long, env = "BATON_API_KEY", hide_env_values = true, global = true)]
    api_key: Option<String>,
    /// For an `https://` endpoint: the CA (PEM) the server's certificate is
    /// checked against, instead of the system's roots.
    #[arg(long, env = "BATON_CA_FILE", global = true)]
    ca_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: StoreCmd,
}

#[derive(Subcommand)]
enum StoreCmd {
    /// Write a slot; VALUE `-` reads it from stdin. Prints version and expiry.
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store put $TRACE notes/plan \"step 1\" --ttl 10m
  baton store put $TRACE report.pdf - --content-type application/pdf < report.pdf
  baton store put $TRACE counter 2 --expected-version 1   only over version 1")]
    Put {
        /// The trace id (32 lowercase hex characters).
        trace_id: String,
        /// The key.
        key: String,
        /// The value, or `-` for stdin.
        value: String,
        /// Time to live: 500ms, 30s, 5m, 1h, 7d.
        #[arg(long, value_parser = baton_common::config::duration::parse)]
        ttl: Option<Duration>,
        /// The value's media type; default: text/plain for a value given
        /// here, application/octet-stream for stdin.
        #[arg(long, default_value = "")]
        content_type: String,
        /// Write only if the slot is at this version (0: only if absent).
        #[arg(long)]
        expected_version: Option<u64>,
    },
    /// Print a slot's value (with --meta, its metadata as JSON).
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store get $TRACE notes/plan
  baton store get $TRACE notes/plan --meta | jq .version")]
    Get {
        /// The trace id.
        trace_id: String,
        /// The key.
        key: String,
        /// Print the metadata instead of the value.
        #[arg(long)]
        meta: bool,
    },
    /// List a trace's slots as JSON lines, then its usage.
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store list $TRACE
  baton store list $TRACE --prefix notes/ | jq -r .key")]
    List {
        /// The trace id.
        trace_id: String,
        /// Only keys with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Delete a slot.
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store delete $TRACE notes/plan
  baton store delete $TRACE notes/plan --expected-version 3")]
    Delete {
        /// The trace id.
        trace_id: String,
        /// The key.
        key: String,
        /// Delete only if the slot is at this version.
        #[arg(long)]
        expected_version: Option<u64>,
    },
    /// Write several slots of a trace in one call, all or none. Prints each
    /// entry's version and expiry as JSON lines, in order.
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store put-many $TRACE a=1 b=2 --ttl 1h")]
    PutMany {
        /// The trace id.
        trace_id: String,
        /// The slots, `key=value` (up to 1000; values are text).
        #[arg(required = true, value_name = "KEY=VALUE")]
        entries: Vec<String>,
        /// Time to live of every slot: 500ms, 30s, 5m, 1h, 7d.
        #[arg(long, value_parser = baton_common::config::duration::parse)]
        ttl: Option<Duration>,
        /// The media type of every value.
        #[arg(long, default_value = TEXT)]
        content_type: String,
    },
    /// Delete several slots in one call: the keys given, or every slot
    /// under --prefix. Prints how many were removed.
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store delete-many $TRACE a b
  baton store delete-many $TRACE --prefix notes/")]
    DeleteMany {
        /// The trace id.
        trace_id: String,
        /// The keys (absent ones are skipped).
        #[arg(required_unless_present = "prefix", conflicts_with = "prefix")]
        keys: Vec<String>,
        /// Every slot whose key starts with this.
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Delete every slot of a trace.
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store clear $TRACE")]
    Clear {
        /// The trace id.
        trace_id: String,
    },
    /// Print a trace's changes as JSON lines until interrupted.
    #[command(after_help = "Examples (a trace id is 32 lowercase hex characters):
  baton store watch $TRACE
  baton store watch $TRACE --prefix research/ | jq -c .")]
    Watch {
        /// The trace id.
        trace_id: String,
        /// Only keys with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
    },
}

fn expires(ts: Option<baton_client::wkt::Timestamp>) -> serde_json::Value {
    ts.map_or(serde_json::Value::Null, |t| {
        json!(t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
    })
}

fn slot_json(s: &pb::SlotInfo) -> serde_json::Value {
    json!({
        "key": s.key,
        "version": s.version,
        "sizeBytes": s.size_bytes,
        "contentType": s.content_type,
        "expiresAtMs": expires(s.expires_at),
    })
}

/// Runs a `baton store` command.
pub async fn run(args: StoreArgs) -> anyhow::Result<()> {
    crate::run::key_travels_safely(&args.endpoint, &args.api_key)?;
    let client = StoreClient::connect_with(
        args.endpoint.clone(),
        &crate::run::client_tls(&args.ca_file),
    )
    .await?;
    let client = match &args.api_key {
        Some(key) => client.with_api_key(key)?,
        None => client,
    };
    match args.command {
        StoreCmd::Put {
            trace_id,
            key,
            value,
            ttl,
            content_type,
            expected_version,
        } => {
            // A value given on the command line is text; stdin is bytes
            // unless --content-type says what they are.
            let (value, content_type) = if value == "-" {
                let mut buf = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut buf)
                    .context("cannot read stdin")?;
                (buf, content_type)
            } else if content_type.is_empty() {
                (value.into_bytes(), TEXT.to_owned())
            } else {
                (value.into_bytes(), content_type)
            };
            let r = client
                .put_with(
                    &trace_id,
                    &key,
                    value,
                    PutOptions {
                        content_type,
                        ttl,
                        expected_version,
                    },
                )
                .await?;
            crate::out::outln!(
                "{}",
                json!({"version": r.version, "expiresAtMs": expires(r.expires_at)})
            )?;
        }
        StoreCmd::Get {
            trace_id,
            key,
            meta,
        } => {
            let r = client.get(&trace_id, &key).await?;
            if meta {
                crate::out::outln!("{}", r.slot.as_ref().map(slot_json).unwrap_or_default())?;
            } else {
                use std::io::{IsTerminal, Write};
                let mut out = std::io::stdout().lock();
                out.write_all(&r.value)?;
                // On a terminal the prompt starts on a line of its own;
                // into a pipe or a file the value stays byte for byte.
                if out.is_terminal() && !r.value.ends_with(b"\n") {
                    writeln!(out)?;
                }
            }
        }
        StoreCmd::List { trace_id, prefix } => {
            let r = client.list(&trace_id, &prefix).await?;
            for s in &r.slots {
                crate::out::outln!("{}", slot_json(s))?;
            }
            crate::out::outln!(
                "{}",
                json!({"usedBytes": r.used_bytes, "usedKeys": r.used_keys})
            )?;
        }
        StoreCmd::Delete {
            trace_id,
            key,
            expected_version,
        } => {
            let version = client.delete(&trace_id, &key, expected_version).await?;
            crate::out::outln!("{}", json!({"version": version}))?;
        }
        StoreCmd::PutMany {
            trace_id,
            entries,
            ttl,
            content_type,
        } => {
            let entries = entries
                .iter()
                .map(|e| {
                    let (key, value) = e
                        .split_once('=')
                        .with_context(|| format!("{e:?}: expected key=value"))?;
                    Ok(PutEntry {
                        key: key.to_owned(),
                        value: value.as_bytes().to_vec(),
                        options: PutOptions {
                            content_type: content_type.clone(),
                            ttl,
                            expected_version: None,
                        },
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let keys: Vec<String> = entries.iter().map(|e| e.key.clone()).collect();
            for (key, r) in keys.iter().zip(client.put_many(&trace_id, entries).await?) {
                crate::out::outln!(
                    "{}",
                    json!({"key": key, "version": r.version, "expiresAtMs": expires(r.expires_at)})
                )?;
            }
        }
        StoreCmd::DeleteMany {
            trace_id,
            keys,
            prefix,
        } => {
            let selection = match prefix {
                Some(p) => DeleteSelection::Prefix(p),
                None => DeleteSelection::Keys(keys),
            };
            let r = client.delete_many(&trace_id, selection).await?;
            crate::out::outln!("{}", json!({"deleted": r.deleted, "version": r.version}))?;
        }
        StoreCmd::Clear { trace_id } => {
            let deleted = client.clear(&trace_id).await?;
            crate::out::outln!("{}", json!({"deleted": deleted}))?;
        }
        StoreCmd::Watch { trace_id, prefix } => {
            let mut changes = client.watch(&trace_id, &prefix).await?;
            while let Some(change) = changes.next().await {
                let c = change?;
                crate::out::outln!(
                    "{}",
                    json!({
                        "kind": c.kind().as_str_name().trim_start_matches("SLOT_CHANGE_KIND_").to_lowercase(),
                        "key": c.key,
                        "version": c.version,
                        "sizeBytes": c.size_bytes,
                        "contentType": c.content_type,
                        "expiresAtMs": expires(c.expires_at),
                    })
                )?;
            }
        }
    }
    Ok(())
}
