//! SQL scans of a compacted segment with memtable writes over it, checked
//! against the reference model after every few writes: UpdateRows laid
//! over their segment rows column by column (explicit versions newer,
//! equal and older than the segment's, deleted versions and columns,
//! increments), PutRows and DeleteRows replacing rows, keys new to the
//! table; projections of one column, a few or all, with and without a
//! `WHERE` on a column the memtable wrote or one it did not (the base's
//! values rise with the key, so statistics rule pages out); a TTL that
//! expires segment cells under memtable ones; overlays built by scans and
//! kept up to date in the background.

use cellar::sql::SqlSession;
use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{T0, pk};
use crate::model::{Key, Model, random_write, write_as_model};
use crate::read_diff::{COLS, ORDERS, sql_rows, sql_text, typed_write};

/// Whether a model row's visible value of a column passes a `WHERE`.
type Passes = Box<dyn Fn(Option<&Value>) -> bool>;

/// A `WHERE` on one column, and whether a model row's visible value
/// passes it (SQL's rules: a comparison with NULL is not true).
fn predicate(rng: &mut StdRng) -> Option<(String, Passes)> {
    let k = rng.random_range(-3..4i64);
    Some(match rng.random_range(0..8) {
        0 => (
            format!("a > {k}"),
            Box::new(move |v| matches!(v, Some(Value::Integer(x)) if *x > k)),
        ),
        1 => (format!("b = 's{}'", k.abs()), {
            let s = format!("s{}", k.abs());
            Box::new(move |v| matches!(v, Some(Value::String(x)) if *x == s))
        }),
        2 => (format!("c < {}", k as f64 / 2.0), {
            let lim = k as f64 / 2.0;
            Box::new(move |v| matches!(v, Some(Value::Double(x)) if *x < lim))
        }),
        3 => ("d = true".into(), Box::new(|v| matches!(v, Some(Value::Boolean(true))))),
        4 => ("a IS NULL".into(), Box::new(|v| v.is_none())),
        5 => ("b IS NOT NULL".into(), Box::new(|v| v.is_some())),
        _ => return None,
    })
}

/// The column a predicate's text names.
fn predicate_column(sql: &str) -> &str {
    &sql[..1]
}

async fn run(seed: u64, ttl: bool, background: bool) {
    let dir = tempfile::tempdir().unwrap();
    let clock = std::sync::Arc::new(ManualClock::new(T0));
    let options = DbOptions {
        row_group_rows: 32,
        page_rows: 4,
        page_bytes: 64,
        auto_compaction: false,
        background_overlays: background.then_some(std::time::Duration::from_millis(1)),
        ..DbOptions::default().clock(clock.clone())
    };
    let db = Database::open_with(dir.path(), options).await.unwrap();
    let mut schema = TableSchema::new("t")
        .pk("card", PkType::Integer)
        .pk("order", PkType::String);
    for (c, ty) in COLS {
        schema = schema.column(c, ty);
    }
    let table_options = TableOptions {
        max_versions: 3,
        ttl_secs: if ttl { 20 } else { -1 },
        ..Default::default()
    };
    db.create_table(schema, table_options).await.unwrap();
    let t = db.table("t").unwrap();
    let mut model = Model {
        opts: t.options(),
        ..Default::default()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let cards = 40i64;
    // The base: every key with every column, compacted into one segment.
    let mut base = Vec::new();
    for card in 0..cards {
        for order in ORDERS {
            let key: Key = (card, order.to_string());
            let mut p = PutRow::new(pk(card, order));
            // Mostly rising with the key, so that page and row-group
            // statistics rule pages out; now and then anything.
            for (c, _) in COLS {
                let v = match rng.random_range(0..4) {
                    0 => rng.random_range(-4..5),
                    _ => card * 9 / cards - 4,
                };
                p = p.column(c, Value::Integer(v));
            }
            let w = typed_write(p.into());
            assert_eq!(model.apply(clock.now_ms(), &key, &w), None);
            base.push(w);
        }
    }
    for r in t.write_batch(base).await.unwrap() {
        r.unwrap();
    }
    t.flush().await.unwrap();
    t.compact().await.unwrap();
    let sql = SqlSession::new(db.clone());
    let mut checked = 0;
    for round in 0..120 {
        for step in 0..rng.random_range(1..12) {
            let now = clock.now_ms();
            let key: Key = (
                rng.random_range(-2..cards + 2),
                ORDERS[rng.random_range(0..4)].to_string(),
            );
            let w = typed_write(random_write(&mut rng, now, &key));
            let what = format!("seed {seed} round {round} step {step}");
            write_as_model(&mut model, &t, now, &key, w, &what).await;
            if rng.random_range(0..4) == 0 {
                clock.advance(rng.random_range(0..2500));
            }
        }
        // Now and then the memtable goes into the segment: the next
        // writes lie over a new base.
        if round % 40 == 39 {
            t.flush().await.unwrap();
            t.compact().await.unwrap();
            model.compact(clock.now_ms());
        }
        let mut columns: Vec<String> = COLS
            .iter()
            .filter(|_| rng.random_range(0..3) > 0)
            .map(|(c, _)| c.to_string())
            .collect();
        if columns.is_empty() {
            columns.push(COLS[rng.random_range(0..4)].0.to_string());
        }
        let pred = predicate(&mut rng);
        let list: String = columns.iter().map(|c| format!(", {c}")).collect();
        let q = match &pred {
            Some((p, _)) => format!("SELECT card, \"order\"{list} FROM t WHERE {p}"),
            None => format!("SELECT card, \"order\"{list} FROM t"),
        };
        let batches = sql.query(&q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
        let got = sql_rows(&batches, &columns);
        let now = clock.now_ms();
        let mut want: Vec<String> = model
            .rows
            .iter()
            .filter_map(|(k, r)| {
                let cells = model.visible(now, r)?;
                let value = |c: &str| cells.iter().find(|(n, _)| n == c).map(|(_, v)| &v[0].value);
                if let Some((p, pass)) = &pred
                    && !pass(value(predicate_column(p)))
                {
                    return None;
                }
                let mut s = format!("{} {:?}", k.0, k.1);
                for c in &columns {
                    match value(c) {
                        Some(v) => s.push_str(&format!(" {c}={}", sql_text(v))),
                        None => s.push_str(&format!(" {c}=NULL")),
                    }
                }
                Some(s)
            })
            .collect();
        want.sort();
        assert_eq!(
            got, want,
            "seed {seed} (ttl {ttl}, background {background}) round {round}: {q}"
        );
        checked += 1;
    }
    assert_eq!(checked, 120);
    let s = t.stats();
    assert!(
        s.scan_overlay_builds + s.scan_overlay_extensions > 0,
        "seed {seed}: no scan used an overlay"
    );
    assert!(
        s.scan_overlay_laid_over > 0,
        "seed {seed}: no update was laid over its segment row"
    );
    assert!(
        s.scan_pages_read < s.scan_pages,
        "seed {seed}: statistics ruled out no page ({s:?})"
    );
    drop(sql);
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_lay_memtable_updates_over_segment_rows_as_the_model_does() {
    // CELLAR_OVERLAY_DIFF_SEEDS=N runs more seeds.
    let seeds = crate::common::seeds("CELLAR_OVERLAY_DIFF_SEEDS", 4);
    for seed in 0..seeds {
        run(seed, seed % 2 == 1, seed % 4 >= 2).await;
    }
}
