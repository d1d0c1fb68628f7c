//! Monthly table series: one table per UTC month (`NAME_YYYYMM`), created
//! on the first write to it, under one name that writes are routed through
//! and SQL reads across.
//!
//! Invariants:
//! - A series is a catalog entry of its own (name, schema, options, time
//!   column, ages); its months are ordinary tables whose catalog entries
//!   name the series. A month has the series' schema and options as they
//!   were when it was created.
//! - A write to the series goes to the month of its time column (an
//!   INTEGER of milliseconds since the epoch, UTC), or of the write time
//!   when the series has none; a write whose month cannot be told is
//!   refused alone, naming the column and what is accepted.
//! - Month names sort in time order, and parse back to their month only
//!   when the prefix is the series' name.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Database;
use super::queued::QueuedWrites;
use crate::error::{Error, ErrorKind, Result};
use crate::model::api::{RowWrite, WriteResult};
use crate::model::schema::{OptionsUpdate, TableOptions, TableSchema};
use crate::model::types::{PkType, PkValue, Value, ValueType};
use crate::remote::RemoteLocation;

/// How a series splits and ages its months.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesOptions {
    /// The column whose value (INTEGER, milliseconds since the epoch) picks
    /// a row's month: a primary-key column or an attribute column. `None`:
    /// the month of the write time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_column: Option<String>,
    /// SQL shows the time column of the series as a TIMESTAMP (of
    /// milliseconds) instead of a BIGINT: set by `CREATE TABLE` when the
    /// column is declared TIMESTAMP. It is stored as INTEGER milliseconds
    /// either way, and each month table shows it as BIGINT.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub time_is_timestamp: bool,
    /// `Database::maintain` archives months at least this many months
    /// older than the current one (to `archive_to`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_after_months: Option<u32>,
    /// `Database::maintain` drops months at least this many months older
    /// than the current one, with their archives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_after_months: Option<u32>,
    /// Where months are archived: each month under `<archive_to>/<month>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_to: Option<RemoteLocation>,
}

/// A change to a series' own settings; `None` leaves one as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeriesUpdate {
    /// New `archive_after_months`.
    pub archive_after_months: Option<u32>,
    /// New `drop_after_months`.
    pub drop_after_months: Option<u32>,
    /// New archive location of months archived from now on.
    pub archive_to: Option<RemoteLocation>,
}

/// A series as the catalog records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SeriesDef {
    pub schema: TableSchema,
    pub options: TableOptions,
    pub series: SeriesOptions,
}

/// The months a table can be named after: 1970-01 to 9999-12.
const FIRST_MONTH: i64 = 1970 * 12;
const LAST_MONTH: i64 = 9999 * 12 + 11;

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil year and month of a day since 1970-01-01.
fn civil_month(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m)
}

/// A month as `year * 12 + month - 1`.
pub(crate) type Month = i64;

/// The UTC month of `ms` milliseconds since the epoch.
pub(crate) fn month_of(ms: i64) -> Option<Month> {
    let (y, m) = civil_month(ms.div_euclid(86_400_000));
    let month = y * 12 + m - 1;
    (FIRST_MONTH..=LAST_MONTH).contains(&month).then_some(month)
}

/// The month's first millisecond, and the next month's.
pub(crate) fn month_bounds(month: Month) -> (i64, i64) {
    let start = |mo: Month| days_from_civil(mo.div_euclid(12), mo.rem_euclid(12) + 1, 1) * 86_400_000;
    (start(month), start(month + 1))
}

/// `NAME_YYYYMM`.
pub(crate) fn month_table(series: &str, month: Month) -> String {
    format!("{series}_{:04}{:02}", month.div_euclid(12), month.rem_euclid(12) + 1)
}

/// The month a table name stands for in `series`, if it is one.
pub(crate) fn parse_month_table(series: &str, table: &str) -> Option<Month> {
    let digits = table.strip_prefix(series)?.strip_prefix('_')?;
    if digits.len() != 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (y, m): (i64, i64) = (digits[..4].parse().ok()?, digits[4..].parse().ok()?);
    let month = y * 12 + m - 1;
    ((1..=12).contains(&m) && (FIRST_MONTH..=LAST_MONTH).contains(&month)).then_some(month)
}

impl SeriesDef {
    /// Checks the series' own settings against its schema.
    pub fn validate(&self) -> Result<()> {
        let name = &self.schema.name;
        // The month tables' names must be valid too.
        crate::model::schema::validate_name("series", &month_table(name, FIRST_MONTH))?;
        if let Some(col) = &self.series.time_column {
            let pk = self.schema.primary_key.iter().find(|c| c.name == *col);
            let declared = self.schema.columns.iter().find(|c| c.name == *col);
            match (pk, declared) {
                (Some(c), _) if c.pk_type != PkType::Integer => {
                    return Err(Error::param(format!(
                        "time column '{col}' of series '{name}' is a {:?} key column; it must be INTEGER (milliseconds since the epoch)",
                        c.pk_type
                    )));
                }
                (None, Some(c)) if c.value_type != ValueType::Integer => {
                    return Err(Error::param(format!(
                        "time column '{col}' of series '{name}' is declared {:?}; it must be INTEGER (milliseconds since the epoch)",
                        c.value_type
                    )));
                }
                (None, None) => crate::model::schema::validate_name("time column", col)?,
                _ => {}
            }
        }
        if let (Some(a), Some(d)) = (self.series.archive_after_months, self.series.drop_after_months)
            && d <= a
        {
            return Err(Error::param(format!(
                "drop_after_months ({d}) must be greater than archive_after_months ({a}): a month is archived before it is dropped"
            )));
        }
        if self.series.archive_after_months == Some(0) || self.series.drop_after_months == Some(0) {
            return Err(Error::param(
                "archive_after_months and drop_after_months must be at least 1 (the current month takes the writes)",
            ));
        }
        if self.series.archive_after_months.is_some() && self.series.archive_to.is_none() {
            return Err(Error::param(format!(
                "series '{name}' archives months after {} months but names no archive location; set archive_to (s3://BUCKET/PREFIX or a directory)",
                self.series.archive_after_months.unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// The month a write goes to (`now_ms`: the write time).
    pub fn month_of_write(&self, w: &RowWrite, now_ms: i64) -> Result<Month> {
        let name = &self.schema.name;
        let Some(col) = &self.series.time_column else {
            return month_of(now_ms)
                .ok_or_else(|| Error::param(format!("the clock ({now_ms} ms) is outside years 1970-9999")));
        };
        let value = if self.schema.primary_key.iter().any(|c| c.name == *col) {
            match w.primary_key().get(col) {
                Some(PkValue::Integer(ms)) => Some(Value::Integer(*ms)),
                Some(other) => Some(match other {
                    PkValue::String(s) => Value::String(s.clone()),
                    _ => Value::Binary(Vec::new()),
                }),
                None => None,
            }
        } else {
            match w {
                RowWrite::Put(p) => p.columns.iter().rev().find(|c| c.name == *col).map(|c| c.value.clone()),
                RowWrite::Update(u) => u.actions.iter().rev().find_map(|a| match a {
                    crate::model::api::UpdateAction::Put { name, value, .. } if name == col => Some(value.clone()),
                    _ => None,
                }),
                RowWrite::Delete(_) => {
                    return Err(Error::param(format!(
                        "a DeleteRow on series '{name}' cannot tell its month: the time column '{col}' is not in the \
                         primary key; delete from the month's table ({name}_YYYYMM) instead"
                    )));
                }
            }
        };
        match value {
            Some(Value::Integer(ms)) => month_of(ms).ok_or_else(|| {
                Error::param(format!(
                    "time column '{col}' of a write to series '{name}' is {ms}, outside years 1970-9999 in milliseconds since the epoch \
                     (a TIMESTAMP cast to BIGINT counts nanoseconds: in SQL write CAST(to_timestamp_millis(t) AS BIGINT))"
                ))
            }),
            Some(other) => Err(Error::param(format!(
                "time column '{col}' of a write to series '{name}' is a {:?}; it must be an INTEGER of milliseconds since the epoch (UTC)",
                other.value_type()
            ))),
            None => Err(Error::param(format!(
                "a write to series '{name}' has no value for its time column '{col}'; give it (INTEGER, milliseconds since the epoch), or write to a month table ({name}_YYYYMM)"
            ))),
        }
    }
}

/// A handle on a series: writes routed to their months.
#[derive(Clone)]
pub struct Series {
    db: Database,
    def: Arc<SeriesDef>,
}

impl std::fmt::Debug for Series {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Series").field("name", &self.def.schema.name).finish()
    }
}

impl Series {
    /// The series' name.
    pub fn name(&self) -> &str {
        &self.def.schema.name
    }

    /// The schema every month gets.
    pub fn schema(&self) -> &TableSchema {
        &self.def.schema
    }

    /// The options every month gets.
    pub fn options(&self) -> TableOptions {
        self.def.options
    }

    /// The time column and ages.
    pub fn series_options(&self) -> &SeriesOptions {
        &self.def.series
    }

    /// The month tables, oldest first.
    pub fn months(&self) -> Vec<String> {
        self.db.months_of(self.name()).into_iter().map(|(_, n)| n).collect()
    }

    /// One write, routed to its month; returns once durable.
    pub async fn write(&self, w: RowWrite) -> Result<WriteResult> {
        let mut r = self.write_batch(vec![w]).await?;
        r.pop().unwrap_or_else(|| Err(Error::closed()))
    }

    /// Several writes, each routed to its month, committed together; one
    /// result per write.
    pub async fn write_batch(&self, writes: Vec<RowWrite>) -> Result<Vec<Result<WriteResult>>> {
        self.enqueue_batch(writes).await?.durable().await
    }

    /// Like [`super::table::Table::enqueue_batch`]: queued in order, durable later.
    pub async fn enqueue_batch(&self, writes: Vec<RowWrite>) -> Result<QueuedWrites> {
        crate::model::schema::check_batch_len(writes.len())?;
        let name = self.name().to_string();
        self.db
            .enqueue_routed(writes.into_iter().map(|w| (name.clone(), w)).collect())
            .await
    }
}

impl Database {
    /// Creates a monthly series `schema.name`: writes through
    /// [`Database::series`] (or SQL INSERT, or `cellar write`) go to the
    /// table `NAME_YYYYMM` of their month, created on first write with
    /// this schema and these options; SQL `SELECT ... FROM NAME` reads every
    /// month.
    pub async fn create_series(&self, schema: TableSchema, options: TableOptions, series: SeriesOptions) -> Result<()> {
        self.inner.writable("CREATE TABLE (a series)")?;
        schema.validate()?;
        options.validate()?;
        let def = SeriesDef {
            schema,
            options,
            series,
        };
        def.validate()?;
        let name = def.schema.name.clone();
        let mut cat = self.inner.catalog.lock().await;
        if self.inner.shared.tables.read().contains_key(&name) || self.inner.series.read().contains_key(&name) {
            return Err(Error::new(
                ErrorKind::ObjectAlreadyExist,
                format!("a table or series named '{name}' already exists"),
            ));
        }
        let mut next = cat.1.clone();
        next.series.push(def.clone());
        self.commit_catalog(&mut cat, next).await?;
        self.inner.series.write().insert(name, Arc::new(def));
        Ok(())
    }

    /// A handle for writing to a series.
    pub fn series(&self, name: &str) -> Result<Series> {
        let def = self.series_def(name)?;
        Ok(Series { db: self.clone(), def })
    }

    pub(crate) fn series_def(&self, name: &str) -> Result<Arc<SeriesDef>> {
        self.inner
            .series
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::new(ErrorKind::ObjectNotExist, format!("series '{name}' does not exist")))
    }

    /// Series names, sorted.
    pub fn list_series(&self) -> Vec<String> {
        self.inner.series.read().keys().cloned().collect()
    }

    /// The months of a series that exist, oldest first.
    pub(crate) fn months_of(&self, series: &str) -> Vec<(Month, String)> {
        let tables = self.inner.shared.tables.read();
        let mut out: Vec<(Month, String)> = tables
            .iter()
            .filter(|(_, t)| t.series.as_deref() == Some(series))
            .filter_map(|(n, _)| parse_month_table(series, n).map(|m| (m, n.clone())))
            .collect();
        out.sort();
        out
    }

    /// The month table a write goes to, created when it does not exist.
    pub(super) async fn month_for_write(&self, def: &SeriesDef, month: Month) -> Result<String> {
        let series = &def.schema.name;
        let name = month_table(series, month);
        if let Some(t) = self.inner.shared.tables.read().get(&name) {
            if t.series.as_deref() == Some(series.as_str()) {
                return Ok(name);
            }
            return Err(Error::new(
                ErrorKind::ObjectAlreadyExist,
                format!("table '{name}' exists but is not a month of series '{series}'; rename or drop it"),
            ));
        }
        let mut schema = def.schema.clone();
        schema.name = name.clone();
        match self.create_table_in(schema, def.options, Some(series.clone())).await {
            Ok(()) => Ok(name),
            // Another writer created it first.
            Err(e) if e.kind() == ErrorKind::ObjectAlreadyExist => {
                let ours = self
                    .inner
                    .shared
                    .tables
                    .read()
                    .get(&name)
                    .map(|t| t.series.as_deref() == Some(series));
                if ours == Some(true) { Ok(name) } else { Err(e) }
            }
            Err(e) => Err(e),
        }
    }

    /// Queues writes to tables and series, each write to a series routed
    /// to its month (created when missing); a write whose month cannot be
    /// told is refused alone.
    pub(super) async fn enqueue_routed(&self, writes: Vec<(String, RowWrite)>) -> Result<QueuedWrites> {
        let now = self.inner.now_ms();
        let mut routed = Vec::with_capacity(writes.len());
        let mut refused = Vec::new();
        for (i, (name, w)) in writes.into_iter().enumerate() {
            let def = self.inner.series.read().get(&name).cloned();
            match def {
                None => routed.push((name, w)),
                Some(def) => match def.month_of_write(&w, now) {
                    Ok(month) => routed.push((self.month_for_write(&def, month).await?, w)),
                    Err(e) => refused.push((i, e)),
                },
            }
        }
        Ok(self.inner.enqueue_many(routed).await?.with_refused(refused))
    }

    /// Changes a series: its ages and archive location (months archived
    /// from now on, and the next `maintain`, use them) and the table
    /// options, of the months it has and of those it creates later. The
    /// series' settings are one catalog commit, checked whole first; the
    /// months' options follow one by one (a crash between leaves some
    /// months with the old options: the same call finishes it).
    pub async fn alter_series(&self, name: &str, update: OptionsUpdate, change: SeriesUpdate) -> Result<()> {
        self.inner.writable("ALTER TABLE (a series)")?;
        {
            let mut cat = self.inner.catalog.lock().await;
            let mut def = (*self.series_def(name)?).clone();
            def.options = update.apply(&def.options);
            def.options.validate()?;
            if let Some(a) = change.archive_after_months {
                def.series.archive_after_months = Some(a);
            }
            if let Some(d) = change.drop_after_months {
                def.series.drop_after_months = Some(d);
            }
            if let Some(to) = change.archive_to {
                def.series.archive_to = Some(to.absolute()?);
            }
            def.validate()?;
            let mut next = cat.1.clone();
            for s in next.series.iter_mut().filter(|s| s.schema.name == name) {
                *s = def.clone();
            }
            self.commit_catalog(&mut cat, next).await?;
            self.inner.series.write().insert(name.to_string(), Arc::new(def));
        }
        if update != OptionsUpdate::default() {
            for (_, m) in self.months_of(name) {
                self.alter_table(&m, update).await?;
            }
        }
        Ok(())
    }

    /// Drops a series with all its months; archived months as `archive`
    /// says ([`super::ArchiveOnDrop`]): with `Refuse`, an archived month
    /// refuses the whole drop before anything is dropped. Months go one at
    /// a time, oldest first, then the series: a crash part-way leaves the
    /// series with fewer months, and the same call finishes it.
    pub async fn drop_series_cascade(&self, name: &str, archive: super::ArchiveOnDrop) -> Result<()> {
        self.inner.writable("DROP TABLE .. CASCADE")?;
        self.series_def(name)?;
        let months = self.months_of(name);
        if archive == super::ArchiveOnDrop::Refuse {
            for (_, m) in &months {
                if let Some(r) = self.archive_record(self.table_inner(m)?.id).await {
                    return Err(Error::param(format!(
                        "month '{m}' of series '{name}' is archived at {}; nothing was dropped: drop the series \
                         with --keep-archive (archives stay) or --delete-archive (in SQL: DROP TABLE {name} \
                         CASCADE PURGE)",
                        r.location.describe()
                    )));
                }
            }
        }
        for (_, m) in months {
            self.drop_table_with(&m, archive).await?;
        }
        self.drop_series(name).await
    }

    /// Drops a series that has no months left.
    pub(super) async fn drop_series(&self, name: &str) -> Result<()> {
        let months = self.months_of(name);
        if !months.is_empty() {
            let list: Vec<&str> = months.iter().map(|(_, n)| n.as_str()).collect();
            return Err(Error::param(format!(
                "series '{name}' still has months ({}); drop them with it: `cellar drop {name} --cascade`, DROP TABLE {name} CASCADE",
                list.join(", ")
            )));
        }
        let mut cat = self.inner.catalog.lock().await;
        let mut next = cat.1.clone();
        next.series.retain(|s| s.schema.name != name);
        self.commit_catalog(&mut cat, next).await?;
        self.inner.series.write().remove(name);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_follow_the_utc_calendar() {
        let ms = |y, m, d| days_from_civil(y, m, d) * 86_400_000;
        assert_eq!(month_of(0), Some(1970 * 12));
        assert_eq!(month_of(-1), None);
        assert_eq!(month_of(ms(2024, 2, 29) + 86_399_999), Some(2024 * 12 + 1));
        assert_eq!(month_of(ms(2024, 3, 1)), Some(2024 * 12 + 2));
        assert_eq!(month_of(ms(9999, 12, 31)), Some(9999 * 12 + 11));
        assert_eq!(month_of(ms(10000, 1, 1)), None);
        for month in [1970 * 12, 2000 * 12 + 1, 2023 * 12 + 11, 2024 * 12 + 1] {
            let (a, b) = month_bounds(month);
            assert_eq!(
                (month_of(a), month_of(b - 1), month_of(b)),
                (Some(month), Some(month), Some(month + 1))
            );
            assert_eq!(parse_month_table("orders", &month_table("orders", month)), Some(month));
        }
        assert_eq!(month_table("orders", 2024 * 12), "orders_202401");
        for bad in [
            "orders_202413",
            "orders_2024011",
            "orders_x02401",
            "ordersx_202401",
            "orders_196912",
        ] {
            assert_eq!(parse_month_table("orders", bad), None, "{bad}");
        }
    }
}
