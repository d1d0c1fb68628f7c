//! `cellar tunnel create|list|describe|delete|consume`: tunnels as JSON,
//! their records as NDJSON.
//!
//! Invariant: `consume` prints and flushes a batch before the worker may
//! checkpoint it, so a consumer killed at any moment misses nothing on
//! its next run (it prints again what came after its last checkpoint).

use std::io::Write;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use super::TunnelCommand;
use super::stdout;
use crate::error::{Error, Result};
use crate::{Database, TunnelDescription, TunnelType};

fn line(out: &mut impl Write, j: &Json) -> Result<()> {
    writeln!(out, "{j}").map_err(|e| Error::io("write to stdout", e))
}

fn summary(d: &TunnelDescription) -> Json {
    json!({"table": d.table, "name": d.name, "type": d.kind.as_str(), "stage": stage(d)})
}

fn stage(d: &TunnelDescription) -> &'static str {
    match d.stage {
        crate::TunnelStage::Full => "full",
        crate::TunnelStage::Stream => "stream",
        crate::TunnelStage::Finished => "finished",
    }
}

pub(super) async fn run(db: &Database, command: TunnelCommand) -> Result<()> {
    let mut out = stdout::stdout();
    match command {
        TunnelCommand::Create { table, name, kind } => {
            db.create_tunnel(&table, &name, TunnelType::parse(&kind)?).await?;
        }
        TunnelCommand::List { table } => {
            for d in db.list_tunnels(table.as_deref()).await? {
                line(&mut out, &summary(&d))?;
            }
        }
        TunnelCommand::Describe { table, name } => {
            let d = db.describe_tunnel(&table, &name).await?;
            let mut j = summary(&d);
            j["created_ms"] = json!(d.created_ms);
            j["lag_ms"] = json!(d.lag_ms);
            j["channels"] = d
                .channels
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "status": match c.status {
                            crate::ChannelStatus::Waiting => "waiting",
                            crate::ChannelStatus::Open => "open",
                            crate::ChannelStatus::Finished => "finished",
                        },
                        "checkpoint": c.checkpoint,
                        "delivered": c.delivered,
                        "last_commit_ms": c.last_commit_ms,
                    })
                })
                .collect();
            line(&mut out, &j)?;
        }
        TunnelCommand::Delete { table, name } => db.delete_tunnel(&table, &name).await?,
        TunnelCommand::Consume { table, name, follow } => {
            drop(out);
            let process = Arc::new(move |ctx: &crate::ChannelContext, records: &[crate::StreamRecord]| {
                let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout::stdout());
                for r in records {
                    super::stream::write_record(&mut out, r, &ctx.channel, Some(&ctx.channel))
                        .map_err(|e| Error::io("write to stdout", e))?;
                }
                // Printed before the worker checkpoints the batch.
                out.flush().map_err(|e| Error::io("write to stdout", e))
            });
            let worker = db.tunnel_worker(&table, &name, process, Arc::new(|_: &crate::ChannelContext| {}))?;
            let stop = worker.stopper();
            let ctrl_c = tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    stop.store(true, std::sync::atomic::Ordering::Release);
                }
            });
            let result = worker.run(follow).await;
            ctrl_c.abort();
            result?;
        }
    }
    Ok(())
}
