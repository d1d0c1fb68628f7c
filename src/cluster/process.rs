//! The cluster's processes: a scheduler and executors with Cellar's
//! codecs, and a client session that sends its queries to them.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use ballista::prelude::{SessionConfigExt, SessionContextExt};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::SessionContext;

use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;

use super::codec::{CellarLogicalCodec, CellarPhysicalCodec};
use crate::db::Database;
use crate::error::{Error, ErrorKind, Result};

/// Which process of a cluster this is (names its scratch directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClusterRole {
    Scheduler,
    Executor,
}

/// An empty database in a fresh temporary directory, through which a
/// cluster process opens the archives it is sent; the directory goes with
/// the returned guard.
async fn scratch(role: ClusterRole) -> Result<(Database, tempfile::TempDir)> {
    let name = match role {
        ClusterRole::Scheduler => "cellar-scheduler-",
        ClusterRole::Executor => "cellar-executor-",
    };
    let dir = tempfile::Builder::new()
        .prefix(name)
        .tempdir()
        .map_err(|e| Error::io("a scratch directory for the cluster process", e))?;
    let db = Database::open(dir.path()).await?;
    Ok((db, dir))
}

/// Cellar's pair of codecs, opening archives through `db`: what every
/// process of a cluster, the client included, encodes and decodes with.
fn codecs(db: &Database) -> (Arc<dyn LogicalExtensionCodec>, Arc<dyn PhysicalExtensionCodec>) {
    (
        Arc::new(CellarLogicalCodec::new(db.clone())),
        Arc::new(CellarPhysicalCodec::new(db.clone())),
    )
}

fn ballista_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("{what}: {e}"))
}

/// Seconds between an executor's heartbeats, and between the scheduler's
/// sweeps for executors gone silent.
const HEARTBEAT_SECS: u64 = 5;
/// Seconds of silence after which the scheduler drops an executor (its
/// tasks go to others); with no executor left, running jobs fail after as
/// long.
const EXECUTOR_TIMEOUT_SECS: u64 = 20;

/// Runs a Ballista scheduler with Cellar's codecs on `bind` until the
/// process is stopped.
pub async fn run_scheduler(bind: SocketAddr) -> Result<()> {
    let (db, _dir) = scratch(ClusterRole::Scheduler).await?;
    let (logical, physical) = codecs(&db);
    let config = ballista_scheduler::config::SchedulerConfig {
        bind_host: bind.ip().to_string(),
        bind_port: bind.port(),
        external_host: bind.ip().to_string(),
        // A dead executor is noticed within seconds (Ballista's defaults:
        // 3 minutes), and with none left a job fails after as long
        // instead of waiting for one forever.
        executor_timeout_seconds: EXECUTOR_TIMEOUT_SECS,
        expire_dead_executor_interval_seconds: HEARTBEAT_SECS,
        no_executors_grace_period_seconds: EXECUTOR_TIMEOUT_SECS,
        override_logical_codec: Some(logical),
        override_physical_codec: Some(physical),
        ..Default::default()
    };
    let cluster = ballista_scheduler::cluster::BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| ballista_err("the scheduler's cluster state", e))?;
    ballista_scheduler::scheduler_process::start_server(cluster, bind, Arc::new(config))
        .await
        .map_err(|e| ballista_err(&format!("the scheduler on {bind}"), e))
}

/// Runs a Ballista executor with Cellar's codecs on `bind` (Arrow Flight
/// for shuffles; its gRPC service on the next port), registered with the
/// scheduler at `scheduler` (`HOST:PORT`), until the process is stopped.
/// `slots`: tasks run at once (0: one per core).
pub async fn run_executor(bind: SocketAddr, scheduler: &str, slots: usize) -> Result<()> {
    let (host, port) = host_port(scheduler)?;
    let (db, _dir) = scratch(ClusterRole::Executor).await?;
    let (logical, physical) = codecs(&db);
    let config = ballista_executor::executor_process::ExecutorProcessConfig {
        bind_host: bind.ip().to_string(),
        external_host: Some(bind.ip().to_string()),
        port: bind.port(),
        grpc_port: bind.port().checked_add(1).ok_or_else(|| {
            Error::param(format!(
                "executor port {}: its gRPC service takes the next port",
                bind.port()
            ))
        })?,
        scheduler_host: host,
        scheduler_port: port,
        scheduler_connect_timeout_seconds: 30,
        vcores: slots,
        print_thread_info: false,
        executor_heartbeat_interval_seconds: HEARTBEAT_SECS,
        override_logical_codec: Some(logical),
        override_physical_codec: Some(physical),
        ..Default::default()
    };
    ballista_executor::executor_process::start_executor_process(Arc::new(config))
        .await
        .map_err(|e| ballista_err(&format!("the executor on {bind}"), e))
}

/// `HOST:PORT`, or a `df://HOST:PORT` URL.
fn host_port(s: &str) -> Result<(String, u16)> {
    let bare = s.strip_prefix("df://").unwrap_or(s).trim_end_matches('/');
    let bad = || {
        Error::param(format!(
            "'{s}' is not a scheduler address: give HOST:PORT or df://HOST:PORT (e.g. df://127.0.0.1:50050)"
        ))
    };
    let (host, port) = bare.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || host.contains('/') {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// How long a client waits for the scheduler to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A SQL context whose queries run on the cluster whose scheduler is at
/// `url` (`df://HOST:PORT`), over `db`'s tables: archived ones are read by
/// the cluster, a live one is refused when a query names it. An address
/// that is not one, or a scheduler that does not answer within seconds, is
/// an error here.
pub async fn cluster_context(db: &Database, url: &str) -> Result<SessionContext> {
    let (host, port) = host_port(url)?;
    let target = format!("{host}:{port}");
    let addrs: Vec<SocketAddr> = tokio::task::spawn_blocking({
        let target = target.clone();
        move || target.to_socket_addrs().map(|a| a.collect())
    })
    .await
    .map_err(|e| Error::io("resolving the scheduler's address", e))?
    .map_err(|e| Error::param(format!("scheduler address {target}: {e}")))?;
    let Some(addr) = addrs.first().copied() else {
        return Err(Error::param(format!("scheduler address {target} resolves to nothing")));
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            return Err(Error::new(
                ErrorKind::Io,
                format!("no scheduler answers at {target}: {e} (start one with `cellar scheduler --bind {target}`)"),
            ));
        }
        Err(_) => {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "the scheduler at {target} did not answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ),
            ));
        }
    }
    let (logical, physical) = codecs(db);
    let config = crate::sql::session_config()
        .upgrade_for_ballista()
        .with_ballista_logical_extension_codec(logical)
        .with_ballista_physical_extension_codec(physical);
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .build();
    let ctx = SessionContext::remote_with_state(&format!("df://{target}"), state)
        .await
        .map_err(|e| ballista_err(&format!("the cluster at {target}"), e))?;
    ctx.register_catalog(
        crate::sql::CATALOG,
        Arc::new(crate::sql::CellarCatalog::new(db.clone())),
    );
    Ok(ctx)
}

impl crate::sql::SqlSession {
    /// A session whose queries run on the Ballista cluster whose scheduler
    /// is at `url` (`df://HOST:PORT`): `db`'s archived tables are read by
    /// the cluster's executors straight from their object store; a query
    /// naming a live table is refused (archive it, or query it in a
    /// session of its own), and so is any statement that is not a query. A
    /// bad address, or a scheduler that does not answer within seconds, is
    /// an error here.
    pub async fn with_cluster(db: Database, url: &str) -> Result<Self> {
        let ctx = cluster_context(&db, url).await?;
        Ok(crate::sql::SqlSession::on_cluster(db, ctx, url))
    }
}

#[cfg(test)]
mod tests {
    use super::host_port;

    #[test]
    fn scheduler_addresses_parse_or_say_what_is_accepted() {
        assert_eq!(host_port("df://127.0.0.1:50050").unwrap(), ("127.0.0.1".into(), 50050));
        assert_eq!(host_port("localhost:7").unwrap(), ("localhost".into(), 7));
        for bad in ["df://host", "host:port", ":50050", "df://a/b:1", "127.0.0.1:70000"] {
            let e = host_port(bad).unwrap_err().to_string();
            assert!(e.contains("HOST:PORT"), "{bad}: {e}");
        }
    }
}
