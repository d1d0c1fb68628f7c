//! The tunnel API's types: what a tunnel delivers, its stages and
//! channels as described, and a worker's callbacks.
//!
//! Invariant: these are plain data (and the callback wrapper); every rule
//! about them lives in `db/tunnel.rs`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::stream_record::StreamRecord;
use crate::error::{Error, Result};

/// What a tunnel delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TunnelType {
    /// The table's rows as of one snapshot, then done.
    Full,
    /// The changes committed after the tunnel was made.
    Stream,
    /// The rows as of one snapshot, then every change after it.
    FullAndStream,
}

impl TunnelType {
    /// `full`, `stream` or `full-and-stream`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "full" => Ok(TunnelType::Full),
            "stream" => Ok(TunnelType::Stream),
            "full-and-stream" => Ok(TunnelType::FullAndStream),
            other => Err(Error::param(format!(
                "tunnel type '{other}' is not known; accepted: full, stream, full-and-stream"
            ))),
        }
    }

    /// Its name as `parse` takes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            TunnelType::Full => "full",
            TunnelType::Stream => "stream",
            TunnelType::FullAndStream => "full-and-stream",
        }
    }
}

/// A tunnel's stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TunnelStage {
    /// Reading the table's rows.
    Full,
    /// Reading the change stream.
    Stream,
    /// A full tunnel that delivered every row.
    Finished,
}

/// A channel's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelStatus {
    /// Waiting for the channels it follows to finish.
    Waiting,
    /// Being read.
    Open,
    /// Read to its end (a full phase done, a closed shard read).
    Finished,
}

/// One channel, as `describe` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TunnelChannel {
    /// `full`, or the stream shard's id.
    pub id: String,
    /// Its status.
    pub status: ChannelStatus,
    /// The checkpoint: what the next read starts after (a key in the full
    /// phase, a log position in the stream phase), as text.
    pub checkpoint: String,
    /// Records delivered so far.
    pub delivered: u64,
    /// Commit time of the newest record delivered, ms (0: none).
    pub last_commit_ms: i64,
}

/// A tunnel, as `list` and `describe` show it.
#[derive(Debug, Clone, PartialEq)]
pub struct TunnelDescription {
    /// The tunnel's table.
    pub table: String,
    /// Its name.
    pub name: String,
    /// What it delivers.
    pub kind: TunnelType,
    /// Its stage.
    pub stage: TunnelStage,
    /// When it was made, ms since the epoch.
    pub created_ms: i64,
    /// Its channels.
    pub channels: Vec<TunnelChannel>,
    /// How far the stream phase is behind: now minus the commit time of
    /// the newest record delivered, ms (`None` before the stream phase).
    pub lag_ms: Option<i64>,
}

/// What a worker's callbacks are told about the channel.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelContext {
    /// The tunnel.
    pub tunnel: String,
    /// `full`, or the stream shard's id.
    pub channel: String,
}

/// Called with each batch of records of a channel, in order; an error
/// stops the worker before the batch is checkpointed (it comes again).
pub type ProcessFn = dyn Fn(&ChannelContext, &[StreamRecord]) -> Result<()> + Send + Sync;
/// [`ProcessFn`] that may wait (an index applying records).
pub(crate) type AsyncProcessFn =
    dyn Fn(ChannelContext, Vec<StreamRecord>) -> futures::future::BoxFuture<'static, Result<()>> + Send + Sync;

/// A worker's callback.
#[derive(Clone)]
pub(crate) enum Processor {
    Sync(Arc<ProcessFn>),
    Async(Arc<AsyncProcessFn>),
}

impl Processor {
    pub(super) async fn call(&self, ctx: ChannelContext, records: Vec<StreamRecord>) -> Result<()> {
        match self {
            Processor::Sync(f) => f(&ctx, &records),
            Processor::Async(f) => f(ctx, records).await,
        }
    }
}
/// Called once a channel is finished, or when the worker stops.
pub type ShutdownFn = dyn Fn(&ChannelContext) + Send + Sync;
