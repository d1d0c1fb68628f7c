//! The data set as plain Parquet files, and DataFusion querying them.
//!
//! Plain Parquet is what an analytics user would otherwise keep: files
//! written once, in key order, then only read. So the file peers run the
//! load (writing the files), the SQL aggregates, and point and range reads
//! as SQL queries; updates, upserts and versions do not apply to immutable
//! files. The files hold each record's latest values.
//!
//! Writer settings: ZSTD level 3 (DataFusion's default compression for
//! the Parquet it writes), row groups of 122,880 rows (DuckDB's default
//! row group size, inside the 100k-1M rows both projects' docs suggest),
//! page statistics and page index on (the parquet crate's default), files
//! of at most 2M rows so that both engines can scan files in parallel.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Builder, Int64Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::{Key, Result};
use crate::data::{DataSet, Record, SPARSE, Sparse};

/// Rows per Parquet row group.
pub const ROW_GROUP_ROWS: usize = 122_880;
/// Rows per file at most.
pub const FILE_ROWS: usize = 2_000_000;
/// Rows per record batch handed to the writer.
const BATCH_ROWS: usize = 8_192;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The files' schema: the key, the three columns, then the sparse ones.
pub fn schema() -> SchemaRef {
    let mut fields = vec![
        Field::new("card_id", DataType::Int64, false),
        Field::new("seller_id", DataType::Utf8, false),
        Field::new("device_id", DataType::Utf8, false),
        Field::new("order_no", DataType::Int64, false),
        Field::new("amount", DataType::Float64, true),
        Field::new("category", DataType::Utf8, true),
        Field::new("device_time", DataType::Int64, true),
    ];
    for i in 0..SPARSE {
        let ty = if i % 2 == 0 { DataType::Int64 } else { DataType::Utf8 };
        fields.push(Field::new(Record::sparse_name(i), ty, true));
    }
    Arc::new(Schema::new(fields))
}

/// One record batch of `records` (latest values).
fn batch(schema: &SchemaRef, records: &[Record]) -> Result<RecordBatch> {
    let n = records.len();
    let (mut card, mut order, mut time) = (
        Int64Builder::with_capacity(n),
        Int64Builder::with_capacity(n),
        Int64Builder::with_capacity(n),
    );
    let (mut seller, mut device, mut category) = (
        StringBuilder::with_capacity(n, n * 6),
        StringBuilder::with_capacity(n, n * 3),
        StringBuilder::with_capacity(n, n * 8),
    );
    let mut amount = Float64Builder::with_capacity(n);
    let mut ints: Vec<Int64Builder> = (0..SPARSE / 2).map(|_| Int64Builder::with_capacity(n)).collect();
    let mut strs: Vec<StringBuilder> = (0..SPARSE / 2).map(|_| StringBuilder::with_capacity(n, n)).collect();
    for r in records {
        card.append_value(r.card_id);
        seller.append_value(&r.seller_id);
        device.append_value(&r.device_id);
        order.append_value(r.order_no);
        amount.append_value(r.amounts[0].1);
        category.append_value(r.category);
        time.append_value(r.device_time);
        let mut set = [false; SPARSE];
        for (i, v) in &r.sparse {
            set[*i] = true;
            match v {
                Sparse::Int(x) => ints[i / 2].append_value(*x),
                Sparse::Str(s) => strs[i / 2].append_value(s),
            }
        }
        for (i, was) in set.iter().enumerate() {
            if !was {
                if i % 2 == 0 {
                    ints[i / 2].append_null();
                } else {
                    strs[i / 2].append_null();
                }
            }
        }
    }
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(card.finish()),
        Arc::new(seller.finish()),
        Arc::new(device.finish()),
        Arc::new(order.finish()),
        Arc::new(amount.finish()),
        Arc::new(category.finish()),
        Arc::new(time.finish()),
    ];
    let (mut ints, mut strs) = (ints.into_iter(), strs.into_iter());
    for i in 0..SPARSE {
        if i % 2 == 0 {
            cols.push(Arc::new(ints.next().expect("one per even column").finish()));
        } else {
            cols.push(Arc::new(strs.next().expect("one per odd column").finish()));
        }
    }
    RecordBatch::try_new(schema.clone(), cols).map_err(err)
}

/// Writes the rows `order` (indices into `data`) to `path` as one Parquet
/// file, fsynced before it returns; `progress` gets each batch's rows.
pub fn write_file(data: &DataSet, order: &[u64], path: &Path, progress: &dyn Fn(u64)) -> Result<()> {
    let schema = schema();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(err)?))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build();
    let file = std::fs::File::create(path).map_err(err)?;
    let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(err)?;
    for chunk in order.chunks(BATCH_ROWS) {
        let records: Vec<Record> = chunk.iter().map(|&i| data.record(i)).collect();
        w.write(&batch(&schema, &records)?).map_err(err)?;
        progress(chunk.len() as u64);
    }
    let file = w.into_inner().map_err(err)?;
    file.sync_all().map_err(err)
}

/// An engine that only queries files: SQL over table `t`.
pub trait FileEngine {
    /// Runs `query`; the number of result rows.
    fn sql(&self, query: &str) -> Result<usize>;

    /// Whether the record with key `k` is there (C, as a query).
    fn get(&self, k: &Key) -> Result<bool> {
        Ok(self.sql(&format!(
            "SELECT amount FROM t WHERE card_id = {} AND seller_id = '{}' AND device_id = '{}' AND order_no = {}",
            k.card_id, k.seller_id, k.device_id, k.order_no
        ))? == 1)
    }

    /// Up to `limit` rows of one card in key order (E, as a query).
    fn card_rows(&self, card_id: i64, limit: usize) -> Result<usize> {
        self.sql(&format!(
            "SELECT * FROM t WHERE card_id = {card_id} ORDER BY seller_id, device_id, order_no LIMIT {limit}"
        ))
    }
}

/// DataFusion with its default configuration over the directory's files.
pub struct DataFusionFiles {
    rt: tokio::runtime::Runtime,
    ctx: SessionContext,
}

impl DataFusionFiles {
    pub fn open(dir: &Path) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(err)?;
        let ctx = SessionContext::new();
        let path = format!("{}/", dir.display());
        rt.block_on(ctx.register_parquet("t", &path, ParquetReadOptions::default()))
            .map_err(err)?;
        Ok(DataFusionFiles { rt, ctx })
    }
}

impl FileEngine for DataFusionFiles {
    fn sql(&self, query: &str) -> Result<usize> {
        self.rt.block_on(async {
            let batches = self.ctx.sql(query).await.map_err(err)?.collect().await.map_err(err)?;
            Ok(batches.iter().map(|b| b.num_rows()).sum())
        })
    }
}
