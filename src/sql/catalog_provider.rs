//! The database as a DataFusion catalog: schema `public` lists every table
//! of the database (looked up on each query, so new tables and new columns
//! show up without registering anything), plus tables registered in the
//! session itself (external tables, views), which live only in memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::{DataFusionError, Result as DfResult};
use parking_lot::RwLock;

use super::provider::CellarTable;
use crate::db::Database;

/// The catalog: one schema, [`super::SCHEMA`].
#[derive(Debug)]
pub struct CellarCatalog {
    schema: Arc<CellarSchema>,
}

impl CellarCatalog {
    /// The catalog of every table of `db`, in one schema, [`super::SCHEMA`].
    pub fn new(db: Database) -> Self {
        CellarCatalog {
            schema: Arc::new(CellarSchema {
                db,
                session_tables: RwLock::new(BTreeMap::new()),
            }),
        }
    }
}

impl CatalogProvider for CellarCatalog {
    fn schema_names(&self) -> Vec<String> {
        vec![super::SCHEMA.to_string()]
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        (name == super::SCHEMA).then(|| self.schema.clone() as Arc<dyn SchemaProvider>)
    }
}

/// The tables of the database, plus session-only tables.
pub struct CellarSchema {
    db: Database,
    session_tables: RwLock<BTreeMap<String, Arc<dyn TableProvider>>>,
}

impl std::fmt::Debug for CellarSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellarSchema").field("db", &self.db).finish()
    }
}

#[async_trait]
impl SchemaProvider for CellarSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.db.list_tables();
        names.extend(self.db.list_series());
        names.extend(self.session_tables.read().keys().cloned());
        names.sort();
        names.dedup();
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.session_tables.read().get(name) {
            return Ok(Some(t.clone()));
        }
        if let Ok(s) = self.db.series(name) {
            return Ok(Some(Arc::new(super::series::SeriesTable::new(&self.db, s))));
        }
        match self.db.table(name) {
            Ok(t) => {
                let hint = super::index_scan::hint_for(name);
                Ok(Some(Arc::new(CellarTable::new(t).with_hint(hint))))
            }
            Err(e) if e.kind() == crate::ErrorKind::ObjectNotExist => Ok(None),
            Err(e) => Err(DataFusionError::External(Box::new(e))),
        }
    }

    fn register_table(&self, name: String, table: Arc<dyn TableProvider>) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if self.db.table(&name).is_ok() || self.db.series(&name).is_ok() {
            return Err(DataFusionError::Plan(format!(
                "a Cellar table named '{name}' already exists; pick another name or DROP TABLE {name} first"
            )));
        }
        if table.is::<datafusion::datasource::MemTable>() {
            return Err(DataFusionError::Plan(format!(
                "'{name}' would be an in-memory table; Cellar tables need a primary key: \
                 CREATE TABLE {name} (..., PRIMARY KEY (...)), then INSERT INTO {name} SELECT ..."
            )));
        }
        Ok(self.session_tables.write().insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(self.session_tables.write().remove(name))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.session_tables.read().contains_key(name) || self.db.table(name).is_ok() || self.db.series(name).is_ok()
    }
}

impl CellarSchema {
    /// True when `name` is a table registered in this session only.
    pub fn is_session_table(&self, name: &str) -> bool {
        self.session_tables.read().contains_key(name)
    }
}

/// The schema SQL shows for a table or series of `db` (`None`: there is
/// none of that name), without planning a query.
pub(crate) fn sql_schema(db: &Database, name: &str) -> Option<datafusion::arrow::datatypes::SchemaRef> {
    Some(match db.series(name) {
        Ok(s) => super::series::SeriesTable::new(db, s).schema(),
        Err(_) => CellarTable::new(db.table(name).ok()?).schema(),
    })
}

/// The column names SQL shows for a table or series of `db` (`None`: there
/// is none of that name): for completion and listings.
pub fn column_names(db: &Database, name: &str) -> Option<Vec<String>> {
    let schema = sql_schema(db, name)?;
    Some(schema.fields().iter().map(|f| f.name().clone()).collect())
}
