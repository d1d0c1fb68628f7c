//! Secondary indexes: CreateIndex, DropIndex, ListIndex and DescribeIndex,
//! linking index tables to their tables at an open, and the backfill of
//! existing rows.
//!
//! An index is a table of its own in the catalog (its entry carries the
//! definition and its phase), read by its name like any table and refusing
//! writes. A local index is kept by the committer with every write of its
//! table (`write/index.rs`). The backfill (`include_base_data`) scans a
//! snapshot of the table and sends each row's index row to the committer
//! (`CommitMsg::IndexSync`), which drops the rows written since the
//! snapshot: their own writes keep their index entries. Until it is done
//! the index is in phase FULL; a crash then resumes it at the next open.
//!
//! Invariants: an index is linked to its table (so every write reads its
//! row) before the backfill takes its snapshot; index names share one
//! namespace with tables and series; a table with indexes keeps one
//! version, and no TTL unless UpdateRow is refused.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::Database;
pub use super::catalog::IndexPhase;
use super::catalog::{CatalogEntry, CatalogFile, IndexRecord};
use super::index_follow::{self, sync};
use super::inner::DbInner;
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::TableManifest;
use crate::model::index::{IndexDef, IndexKind, IndexSpec, check_index_options};
use crate::model::schema::TableOptions;
use crate::state::{IndexTarget, TableInner};
use crate::write::index::SyncRow;

/// An index as ListIndex / DescribeIndex report it.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexInfo {
    /// The definition: name, table, kind, columns, included columns.
    pub def: IndexDef,
    /// The index's primary key, in order.
    pub primary_key: Vec<String>,
    /// FULL while existing rows are being indexed, then INCR.
    pub phase: IndexPhase,
    /// How far a global index is behind its table's writes, in ms of
    /// commit time (0: caught up; always 0 for a local index).
    pub lag_ms: u64,
}

/// Rows per backfill message to the committer.
const SYNC_ROWS: usize = 512;

impl Database {
    /// Creates a secondary index on `table` (Tablestore's CreateIndex):
    /// checks every rule, links the index to its table, then indexes the
    /// rows the table holds when `spec.include_base_data` (writes go on
    /// meanwhile; phase FULL until it is done, then INCR).
    pub async fn create_index(&self, table: &str, spec: IndexSpec) -> Result<()> {
        self.inner.writable("CREATE INDEX")?;
        let global = spec.kind == IndexKind::Global;
        if global && self.table_inner(table)?.stream.read().is_none() {
            // A global index follows the table's change stream.
            let enable = super::StreamChange {
                enable: Some(true),
                ..Default::default()
            };
            self.change_stream(table, enable).await?;
        }
        let (base, target, phase) = {
            let mut cat = self.inner.catalog.lock().await;
            let base = self.table_inner(table)?;
            if let Some(def) = &base.index_of {
                return Err(Error::param(format!(
                    "'{table}' is an index of table '{}'; an index cannot be indexed",
                    def.table
                )));
            }
            if base.series.is_some() || base.is_archived() {
                return Err(Error::param(format!(
                    "table '{table}' is {}; indexes are kept only on local tables outside series",
                    if base.is_archived() {
                        "archived"
                    } else {
                        "a month of a series"
                    }
                )));
            }
            if self.inner.shared.tables.read().contains_key(&spec.name)
                || self.inner.series.read().contains_key(&spec.name)
            {
                return Err(Error::new(
                    ErrorKind::ObjectAlreadyExist,
                    format!(
                        "the name '{}' is taken by a table, series or index; index names share the tables' namespace",
                        spec.name
                    ),
                ));
            }
            let existing: Vec<IndexDef> = base.indexes.read().iter().map(|i| (*i.def).clone()).collect();
            let base_schema = base.full_schema();
            let def = IndexDef::new(&spec, &base_schema, &base.options.read(), &existing)?;
            let schema = def.schema(&base_schema)?;
            let options = index_options(&base.options.read());
            let phase = if spec.include_base_data {
                IndexPhase::Full
            } else {
                IndexPhase::Incr
            };
            let mut next = cat.1.clone();
            let record = IndexRecord {
                def: def.clone(),
                phase,
            };
            let id = next.add_table(schema.clone(), options, None, Some(record));
            self.commit_catalog(&mut cat, next).await?;
            let mut manifest = TableManifest::default();
            let storage = &self.inner.shared.storage;
            let parts = crate::state::parts_of(&mut manifest, |m| Ok(storage.open_segment(m.clone())))?;
            let mut t = TableInner::new(id, schema, options, 0, manifest, parts);
            let def = Arc::new(def);
            t.index_of = Some(def.clone());
            let t = Arc::new(t);
            self.inner.shared.tables.write().insert(spec.name.clone(), t.clone());
            let target = IndexTarget::new(def, t, phase == IndexPhase::Full);
            link(&base, target.clone());
            (base, target, phase)
        };
        if global {
            // Its records start here: every write from now on reads its
            // row and records the old values of the index's columns.
            let tunnel = index_follow::tunnel_of(&spec.name);
            self.create_tunnel_named(table, &tunnel, super::tunnel_types::TunnelType::Stream)
                .await?;
        }
        if phase == IndexPhase::Full {
            backfill(&self.inner, &base, &spec.name).await?;
        }
        if global {
            index_follow::follow(self, table, target);
        }
        Ok(())
    }

    /// Drops index `index` of `table` (Tablestore's DropIndex) and deletes
    /// its files; the table's writes stop keeping it at once.
    pub async fn drop_index(&self, table: &str, index: &str) -> Result<()> {
        self.inner.writable("DROP INDEX")?;
        let t = self.index_table_of(index)?;
        let def = t.index_of.clone().expect("an index table");
        if def.table != table {
            return Err(Error::new(
                ErrorKind::ObjectNotExist,
                format!("'{index}' is an index of table '{}', not of '{table}'", def.table),
            ));
        }
        let target = self
            .table_inner(table)
            .ok()
            .and_then(|base| base.indexes.read().iter().find(|i| i.table.id == t.id).cloned());
        if let Ok(base) = self.table_inner(table) {
            unlink(&base, t.id);
        }
        if let Some(target) = target
            && def.kind == IndexKind::Global
        {
            // Stop the follower (it gives up at its next batch), then
            // delete its tunnel.
            t.dropped.store(true, Ordering::Release);
            let _stopped = target.follower.lock().await;
            match self.delete_tunnel_named(table, &index_follow::tunnel_of(index)).await {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::ObjectNotExist => {}
                Err(e) => return Err(e),
            }
        }
        self.drop_local_table(index).await
    }

    /// The indexes of `table` (ListIndex), by name.
    pub async fn list_indexes(&self, table: &str) -> Result<Vec<IndexInfo>> {
        let base = self.table_inner(table)?;
        let targets: Vec<IndexTarget> = base.indexes.read().iter().cloned().collect();
        let mut out = Vec::with_capacity(targets.len());
        for i in &targets {
            out.push(IndexInfo {
                def: (*i.def).clone(),
                primary_key: i.table.schema.primary_key.iter().map(|c| c.name.clone()).collect(),
                phase: match i.building.load(Ordering::Acquire) {
                    true => IndexPhase::Full,
                    false => IndexPhase::Incr,
                },
                lag_ms: index_follow::lag_ms(self, &base, i).await?,
            });
        }
        out.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        Ok(out)
    }

    /// One index by name (DescribeIndex).
    pub async fn describe_index(&self, index: &str) -> Result<IndexInfo> {
        let t = self.index_table_of(index)?;
        let def = t.index_of.as_ref().expect("an index table");
        self.list_indexes(&def.table)
            .await?
            .into_iter()
            .find(|i| i.def.name == index)
            .ok_or_else(|| not_an_index(index))
    }

    /// The table an index belongs to, when `name` is an index.
    pub fn index_base(&self, name: &str) -> Option<String> {
        let t = self.inner.shared.tables.read().get(name).cloned()?;
        t.index_of.as_ref().map(|d| d.table.clone())
    }

    pub(super) fn index_table_of(&self, name: &str) -> Result<Arc<TableInner>> {
        let t = self.table_inner(name).map_err(|_| not_an_index(name))?;
        if t.index_of.is_none() {
            return Err(Error::param(format!("'{name}' is a table, not an index")));
        }
        Ok(t)
    }

    /// Drops the indexes of `table` (before the table itself goes).
    pub(super) async fn drop_indexes_of(&self, table: &str) -> Result<()> {
        let names: Vec<String> = match self.table_inner(table) {
            Ok(t) => t.indexes.read().iter().map(|i| i.def.name.clone()).collect(),
            Err(_) => return Ok(()),
        };
        for n in names {
            self.drop_index(table, &n).await?;
        }
        Ok(())
    }

    /// At an open: resumes the backfill of every index left in phase FULL
    /// (a crash during CREATE INDEX), and starts the follower of every
    /// global index (making its tunnel anew, and indexing the table's
    /// rows again, when a crash lost it), in the background.
    pub(super) fn resume_indexes(&self) {
        let Ok(cat) = self.inner.catalog.try_lock() else { return };
        let indexes: Vec<(String, String, IndexPhase, IndexKind)> = cat
            .1
            .tables
            .iter()
            .filter_map(|e| e.index.as_ref())
            .map(|r| (r.def.table.clone(), r.def.name.clone(), r.phase, r.def.kind))
            .collect();
        drop(cat);
        for (table, name, phase, kind) in indexes {
            if phase == IndexPhase::Incr && kind == IndexKind::Local {
                continue;
            }
            let weak: Weak<DbInner> = Arc::downgrade(&self.inner);
            tokio::spawn(async move {
                let Some(inner) = weak.upgrade() else { return };
                let db = Database { inner };
                if let Err(e) = db.resume_index(&table, &name, phase, kind).await
                    && !db.inner.shared.closed.load(Ordering::Acquire)
                {
                    eprintln!("cellar: index '{name}' of table '{table}' could not resume: {e}");
                }
            });
        }
    }

    async fn resume_index(&self, table: &str, name: &str, phase: IndexPhase, kind: IndexKind) -> Result<()> {
        let base = self.table_inner(table)?;
        let Some(target) = base.indexes.read().iter().find(|i| i.def.name == name).cloned() else {
            return Ok(());
        };
        let mut refill = phase == IndexPhase::Full;
        if kind == IndexKind::Global {
            let tunnel = index_follow::tunnel_of(name);
            if !self.tunnel_exists(table, &tunnel).await? {
                self.create_tunnel_named(table, &tunnel, super::tunnel_types::TunnelType::Stream)
                    .await?;
                refill = true;
            }
        }
        if refill {
            backfill(&self.inner, &base, name).await?;
        }
        if kind == IndexKind::Global {
            index_follow::follow(self, table, target);
        }
        Ok(())
    }
}

fn not_an_index(name: &str) -> Error {
    Error::new(ErrorKind::ObjectNotExist, format!("index '{name}' does not exist"))
}

/// An index table's options: one version, its table's TTL and write
/// window.
pub(super) fn index_options(base: &TableOptions) -> TableOptions {
    TableOptions {
        ttl_secs: base.ttl_secs,
        max_versions: 1,
        max_version_offset_secs: base.max_version_offset_secs,
        allow_update: true,
        partition_split_bytes: base.partition_split_bytes,
    }
}

/// Checks a change of `base`'s options against its indexes' rules, and
/// gives each index table its share of it (the TTL).
pub(super) fn options_changed(base: &TableInner, new: &TableOptions) -> Result<()> {
    let indexes = base.indexes.read().clone();
    if indexes.is_empty() {
        return Ok(());
    }
    check_index_options(&base.schema.name, new)?;
    for i in indexes.iter() {
        *i.table.options.write() = index_options(new);
    }
    Ok(())
}

/// Refuses to drop a predefined column an index uses.
pub(super) fn check_column_unused(cat: &CatalogFile, table: &str, column: &str) -> Result<()> {
    let users: Vec<&str> = cat
        .tables
        .iter()
        .filter_map(|e| e.index.as_ref())
        .filter(|r| r.def.table == table && r.def.uses_column(column))
        .map(|r| r.def.name.as_str())
        .collect();
    if !users.is_empty() {
        return Err(Error::param(format!(
            "column '{column}' of table '{table}' is used by index {}; drop the index first",
            users.join(", ")
        )));
    }
    Ok(())
}

/// Links the index tables of a freshly loaded catalog to their tables.
pub(super) fn link_loaded(cat: &CatalogFile, tables: &std::collections::BTreeMap<String, Arc<TableInner>>) {
    for e in &cat.tables {
        let Some(r) = &e.index else { continue };
        let (Some(base), Some(t)) = (tables.get(&r.def.table), tables.get(&e.schema.name)) else {
            continue;
        };
        if let Some(def) = &t.index_of {
            link(
                base,
                IndexTarget::new(def.clone(), t.clone(), r.phase == IndexPhase::Full),
            );
        }
    }
}

/// The definition an index table is loaded with (its columns bound to
/// its table's schema).
pub(super) fn loaded_def(e: &CatalogEntry, cat: &CatalogFile) -> Option<Arc<IndexDef>> {
    let r = e.index.as_ref()?;
    let base = cat.tables.iter().find(|b| b.schema.name == r.def.table)?;
    let mut def = r.def.clone();
    def.bind(&base.schema).ok()?;
    Some(Arc::new(def))
}

fn link(base: &TableInner, target: IndexTarget) {
    let mut all = base.indexes.write();
    let mut next: Vec<IndexTarget> = all.iter().cloned().collect();
    next.push(target);
    *all = Arc::new(next);
}

fn unlink(base: &TableInner, index_id: u64) {
    let mut all = base.indexes.write();
    let next: Vec<IndexTarget> = all.iter().filter(|i| i.table.id != index_id).cloned().collect();
    *all = Arc::new(next);
}

/// Indexes every row `base` holds now into index `name`, then marks the
/// index INCR in the catalog. Rows written meanwhile keep their own index
/// entries (the committer drops a synced row written after the snapshot).
async fn backfill(inner: &Arc<DbInner>, base: &Arc<TableInner>, name: &str) -> Result<()> {
    let Some(target) = base.indexes.read().iter().find(|i| i.def.name == name).cloned() else {
        return Ok(());
    };
    let snaps = base.checked_snapshots(&inner.shared.visible_seq);
    let chains: Vec<_> = snaps.iter().map(|(_, c)| c.clone()).collect();
    let at = snaps.first().map_or(0, |(s, _)| s.seq);
    let mut rows = Vec::new();
    for (snap, _) in &snaps {
        let mut scan = crate::read::MergeScan::new(snap, snap.range.clone(), false, None);
        while let Some((key, state)) = scan.next().await? {
            if let Some((k, m)) = target.def.row_of(&key, Some(&state)) {
                rows.push(SyncRow {
                    base_key: key,
                    always: Vec::new(),
                    writes: vec![(target.table.clone(), k, m)],
                });
            }
            if rows.len() >= SYNC_ROWS {
                sync(inner, base, at, &chains, std::mem::take(&mut rows)).await?;
                crate::crash_point::hit("index.backfill_synced");
            }
        }
    }
    if !rows.is_empty() {
        sync(inner, base, at, &chains, rows).await?;
    }
    if target.table.dropped.load(Ordering::Acquire) {
        return Ok(());
    }
    let db = Database { inner: inner.clone() };
    let mut cat = inner.catalog.lock().await;
    let mut next = cat.1.clone();
    for e in &mut next.tables {
        if e.id == target.table.id
            && let Some(r) = &mut e.index
        {
            r.phase = IndexPhase::Incr;
        }
    }
    db.commit_catalog(&mut cat, next).await?;
    target.building.store(false, Ordering::Release);
    Ok(())
}
