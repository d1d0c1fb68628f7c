//! The age policy of series: months past `archive_after_months` are
//! archived, months past `drop_after_months` dropped with their archives.
//!
//! Invariants: ages count whole calendar months (UTC) between a month and
//! the clock's current month; a step that fails leaves its month as it was
//! (an archive is atomic, see `db::archive`) and the others still run; a
//! second run does only what the first left undone.

use super::series::{month_of, month_table};
use super::{ArchiveOnDrop, Database};
use crate::archive::TransferProgress;
use crate::error::{Error, Result};

/// What `maintain` does to a month.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaintenanceAction {
    /// Archived to the series' `archive_to` location.
    Archive,
    /// Dropped, with its archive.
    Drop,
}

impl MaintenanceAction {
    /// `"archive"` or `"drop"`.
    pub fn as_str(self) -> &'static str {
        match self {
            MaintenanceAction::Archive => "archive",
            MaintenanceAction::Drop => "drop",
        }
    }
}

/// One step of [`Database::maintain`] and how it went.
#[derive(Debug, Clone)]
pub struct MaintenanceStep {
    /// The series.
    pub series: String,
    /// The month table.
    pub table: String,
    /// What was done to it.
    pub action: MaintenanceAction,
    /// `None`: done; else why not (the month is as it was).
    pub error: Option<Error>,
}

impl Database {
    /// Archives and drops the months of every series that passed their
    /// ages (see [`super::SeriesOptions`]), the oldest first. A month that
    /// fails is reported and left as it was; the others go on. Running it
    /// again does only what is left. `progress` is told the month being
    /// archived and how far its copy has got.
    pub async fn maintain(&self, progress: &(dyn Fn(&str, &TransferProgress) + Sync)) -> Result<Vec<MaintenanceStep>> {
        self.inner.writable("maintain")?;
        let now = self.inner.now_ms();
        let current =
            month_of(now).ok_or_else(|| Error::param(format!("the clock ({now} ms) is outside years 1970-9999")))?;
        let mut steps = Vec::new();
        for name in self.list_series() {
            let def = self.series_def(&name)?;
            for (month, table) in self.months_of(&name) {
                let age = current - month;
                let drop = def.series.drop_after_months.is_some_and(|d| age >= i64::from(d));
                let archive = !drop
                    && def.series.archive_after_months.is_some_and(|a| age >= i64::from(a))
                    && !self.table_inner(&table).is_ok_and(|t| t.is_archived());
                let (action, result) = if drop {
                    (
                        MaintenanceAction::Drop,
                        self.drop_table_with(&table, ArchiveOnDrop::Delete).await,
                    )
                } else if archive {
                    let result = match &def.series.archive_to {
                        Some(to) => {
                            let mut at = to.clone();
                            at.url = format!("{}/{}", to.url.trim_end_matches('/'), month_table(&name, month));
                            self.archive_table(&table, &at, &|p| progress(&table, p))
                                .await
                                .map(|_| ())
                        }
                        None => Err(Error::param(format!(
                            "series '{name}' names no archive location (archive_to)"
                        ))),
                    };
                    (MaintenanceAction::Archive, result)
                } else {
                    continue;
                };
                steps.push(MaintenanceStep {
                    series: name.clone(),
                    table,
                    action,
                    error: result.err(),
                });
            }
        }
        Ok(steps)
    }
}
