//! `cellar index create|drop|list`, and the predefined columns of
//! `cellar create --columns` / `cellar alter --add-columns`.
//!
//! Invariant: every flag is honoured or refused with what is accepted.

use std::io::Write;

use serde_json::{Value as Json, json};

use super::IndexCommand;
use super::stdout;
use crate::error::{Error, Result};
use crate::{ColumnDef, Database, IndexInfo, IndexKind, IndexSpec};

/// `NAME:TYPE[,NAME:TYPE...]` as predefined columns.
pub(super) fn parse_columns(spec: &str, flag: &str) -> Result<Vec<ColumnDef>> {
    spec.split(',')
        .map(|part| {
            let (name, ty) = part.split_once(':').ok_or_else(|| {
                Error::param(format!(
                    "{flag} entry '{part}' must be NAME:TYPE with TYPE integer, double, boolean, string or binary"
                ))
            })?;
            Ok(ColumnDef {
                name: name.trim().to_string(),
                value_type: ty.trim().parse()?,
            })
        })
        .collect()
}

/// An index as `index list` and `describe` show it.
pub(super) fn index_json(i: &IndexInfo) -> Json {
    json!({
        "name": i.def.name,
        "table": i.def.table,
        "type": i.def.kind.as_str(),
        "columns": i.def.columns,
        "include": i.def.include,
        "primary_key": i.primary_key,
        "phase": i.phase.as_str(),
        "lag_ms": i.lag_ms,
    })
}

pub(super) async fn run(db: &Database, command: IndexCommand) -> Result<()> {
    match command {
        IndexCommand::Create {
            table,
            name,
            columns,
            include,
            kind,
            no_base_data,
        } => {
            let kind = match kind.to_ascii_lowercase().as_str() {
                "local" => IndexKind::Local,
                "global" => IndexKind::Global,
                other => {
                    return Err(Error::param(format!(
                        "--type '{other}' is not known; accepted: local, global"
                    )));
                }
            };
            let spec = IndexSpec {
                name,
                columns,
                include,
                kind,
                include_base_data: !no_base_data,
            };
            db.create_index(&table, spec).await
        }
        IndexCommand::Drop { table, name } => db.drop_index(&table, &name).await,
        IndexCommand::List { table } => {
            let mut out = stdout::stdout();
            for i in db.list_indexes(&table).await? {
                writeln!(out, "{}", index_json(&i)).map_err(|e| Error::io("write to stdout", e))?;
            }
            Ok(())
        }
    }
}
