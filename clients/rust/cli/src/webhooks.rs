//! `baton webhooks …`: the tenant's webhooks (create, list, show, delete,
//! rotate a secret) and its dead letters (list, redeliver). A secret is
//! printed once, when it is made: to stdout alone with `--json`, so a
//! script can keep it.

use baton_client::{OrchestratorClient, pb};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::run::Target;
use crate::text::cols;

/// `baton webhooks …`.
#[derive(Args)]
pub struct WebhooksArgs {
    #[command(subcommand)]
    command: Cmd,
    #[command(flatten)]
    target: Target,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Subscribe a URL to what happens to your runs; prints its secret.
    #[command(after_help = "Events (repeat --event; none: the five run.* ones):
  run.started  run.waiting  run.completed  run.failed  run.cancelled
  event.<kind>   every event of a kind, e.g. event.tool_call_completed

Examples:
  baton webhooks create https://hooks.example.com/baton
  baton webhooks create https://hooks.example.com/b --event run.completed --event run.failed
  baton webhooks create URL --secret-file whsec.txt   sign with your own secret")]
    Create {
        /// Where deliveries are posted (https; http only to a host the
        /// server's webhooks.allowed_hosts names).
        url: String,
        /// What is delivered (repeatable).
        #[arg(long = "event", value_name = "TYPE")]
        events: Vec<String>,
        /// What it is for.
        #[arg(long, default_value = "")]
        description: String,
        /// A file holding the secret (`whsec_…`) to sign with; without,
        /// the server makes one.
        #[arg(long, value_name = "FILE")]
        secret_file: Option<std::path::PathBuf>,
    },
    /// Your tenant's webhooks.
    List,
    /// One webhook.
    Show {
        /// Its id.
        id: String,
    },
    /// Delete a webhook: nothing more is delivered to it.
    Delete {
        /// Its id.
        id: String,
    },
    /// Give a webhook a new secret; the old one signs too for a while.
    #[command(after_help = "Examples:
  baton webhooks rotate wh_0123…               the old secret signs for the server's overlap (24h)
  baton webhooks rotate wh_0123… --keep 1h
  baton webhooks rotate wh_0123… --keep 0s     the old secret stops at once")]
    Rotate {
        /// Its id.
        id: String,
        /// How long the previous secret stays valid.
        #[arg(long, value_parser = baton_common::config::duration::parse)]
        keep: Option<std::time::Duration>,
    },
    /// Deliveries that kept failing, newest first.
    Dead {
        /// Most to show.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Deliver a dead letter again (the same webhook-id).
    Redeliver {
        /// The delivery's id (msg_…), as `baton webhooks dead` shows it.
        delivery_id: String,
    },
}

fn webhook_json(w: &pb::Webhook) -> serde_json::Value {
    serde_json::to_value(w).unwrap_or_default()
}

pub async fn run(args: WebhooksArgs) -> anyhow::Result<()> {
    let client: OrchestratorClient = args.target.connect().await?;
    match args.command {
        Cmd::Create {
            url,
            events,
            description,
            secret_file,
        } => {
            let secret = match secret_file {
                Some(f) => std::fs::read_to_string(&f)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?
                    .trim()
                    .to_owned(),
                None => String::new(),
            };
            let made = client
                .create_webhook(pb::CreateWebhookRequest {
                    url,
                    events,
                    description,
                    secret,
                })
                .await?;
            let w = made.webhook.unwrap_or_default();
            if args.json {
                crate::out::outln!(
                    "{}",
                    json!({"webhook": webhook_json(&w), "secret": made.secret})
                )?;
            } else {
                crate::out::outln!("created {} → {}", w.webhook_id, w.url)?;
                crate::out::outln!("events: {}", w.events.join(" "))?;
                crate::out::outln!("secret: {}", made.secret)?;
                eprintln!(
                    "keep the secret: it is not shown again (check each delivery's webhook-signature with it)"
                );
            }
        }
        Cmd::List => {
            let list = client.list_webhooks().await?;
            if args.json {
                for w in &list {
                    crate::out::outln!("{}", webhook_json(w))?;
                }
            } else if list.is_empty() {
                eprintln!("no webhooks (make one: baton webhooks create URL)");
            } else {
                let id_cols = list.iter().map(|w| cols(&w.webhook_id)).max().unwrap_or(2);
                for w in &list {
                    print_webhook(w, id_cols)?;
                }
            }
        }
        Cmd::Show { id } => {
            let w = client.get_webhook(&id).await?;
            if args.json {
                crate::out::outln!("{}", webhook_json(&w))?;
            } else {
                print_webhook(&w, cols(&w.webhook_id))?;
                if !w.description.is_empty() {
                    crate::out::outln!("  {}", w.description)?;
                }
                crate::out::outln!("  created {}", crate::runs::date(&w.created_at))?;
                if w.previous_secret_expires_at.is_some() {
                    crate::out::outln!(
                        "  the previous secret signs too until {} UTC",
                        crate::runs::date(&w.previous_secret_expires_at)
                    )?;
                }
            }
        }
        Cmd::Delete { id } => {
            client.delete_webhook(&id).await?;
            if args.json {
                crate::out::outln!("{}", json!({"deleted": id}))?;
            } else {
                crate::out::outln!("deleted {id}")?;
            }
        }
        Cmd::Rotate { id, keep } => {
            let r = client.rotate_webhook_secret(&id, keep).await?;
            let w = r.webhook.unwrap_or_default();
            if args.json {
                crate::out::outln!(
                    "{}",
                    json!({"webhook": webhook_json(&w), "secret": r.secret})
                )?;
            } else {
                crate::out::outln!("new secret of {}: {}", w.webhook_id, r.secret)?;
                match &w.previous_secret_expires_at {
                    Some(_) => crate::out::outln!(
                        "the previous one signs too until {} UTC",
                        crate::runs::date(&w.previous_secret_expires_at)
                    )?,
                    None => crate::out::outln!("the previous one no longer signs")?,
                }
            }
        }
        Cmd::Dead { limit } => {
            let list = client.list_dead_letters(limit.min(1000)).await?;
            if args.json {
                for d in &list {
                    crate::out::outln!("{}", serde_json::to_value(d).unwrap_or_default())?;
                }
            } else if list.is_empty() {
                eprintln!("no dead letters");
            } else {
                let width = crate::text::terminal_columns().saturating_sub(1).max(40);
                for d in &list {
                    crate::out::outln!(
                        "{}  {}  {}",
                        d.delivery_id,
                        d.r#type,
                        crate::runs::date(&d.dead_at)
                    )?;
                    let what = format!(
                        "run {} → {}, {}: {}",
                        d.run_id,
                        d.url,
                        if d.attempts == 1 {
                            "1 try".to_owned()
                        } else {
                            format!("{} tries", d.attempts)
                        },
                        d.last_error
                    );
                    crate::out::outln!(
                        "{}",
                        crate::text::wrap_words(&format!("  {what}"), width, "  ")
                    )?;
                }
            }
        }
        Cmd::Redeliver { delivery_id } => {
            client.redeliver_dead_letter(&delivery_id).await?;
            if args.json {
                crate::out::outln!("{}", json!({"redelivered": delivery_id}))?;
            } else {
                crate::out::outln!("{delivery_id} is queued again")?;
            }
        }
    }
    Ok(())
}

/// A webhook on one line (its URL and events wrapped below its id when
/// they do not fit).
fn print_webhook(w: &pb::Webhook, id_cols: usize) -> anyhow::Result<()> {
    let width = crate::text::terminal_columns().saturating_sub(1).max(40);
    let from = if w.from_config { " (config)" } else { "" };
    let line = format!(
        "{:<id_cols$}  {}{from}  {}",
        w.webhook_id,
        w.url,
        w.events.join(" ")
    );
    let pad = " ".repeat((id_cols + 2).min(width / 2));
    crate::out::outln!("{}", crate::text::wrap_words(&line, width, &pad))?;
    Ok(())
}
