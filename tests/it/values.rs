//! Values read back exactly as written, through every entry point.
//!
//! A DOUBLE written through `cellar write` used to come back changed in its
//! last bits (`0.9733672253946435` read back as `0.9733672253946436`): the
//! NDJSON parser rounded decimal text with a fast, inexact algorithm. These
//! tests write doubles and the edges of every type through NDJSON, SQL and
//! the embedding API, across a flush and a reopen, and compare bits.

use std::io::Write;
use std::process::{Command, Stdio};

use cellar::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn cellar(data: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cellar"));
    c.arg("--data").arg(data);
    c
}

fn ok(c: &mut Command) -> String {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// 2,000 random finite doubles (random bit patterns: every exponent,
/// subnormals included) and the edges.
fn doubles() -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(7);
    let mut out = vec![
        0.9733672253946435,
        0.1 + 0.2,
        0.0,
        -0.0,
        f64::MIN_POSITIVE,
        f64::from_bits(1), // the smallest subnormal
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        1.0,
        -1.5e-300,
        9007199254740993.0,
    ];
    while out.len() < 2_000 {
        let d = f64::from_bits(rng.random());
        if d.is_finite() {
            out.push(d);
        }
    }
    // and 1,000 "ordinary" doubles, the kind the defect was found with
    out.extend((0..1_000).map(|_| rng.random::<f64>() * 1000.0));
    out
}

/// A double as NDJSON/serde_json prints it (shortest text that reads back).
fn text(d: f64) -> String {
    serde_json::to_string(&d).unwrap()
}

#[test]
fn doubles_read_back_bit_for_bit_through_ndjson_scan_get_and_sql() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    ok(cellar(data).args(["create", "t", "--pk", "k:integer"]));
    let ds = doubles();
    let mut input = String::new();
    for (k, d) in ds.iter().enumerate() {
        input.push_str(&format!(
            r#"{{"op":"put","pk":{{"k":{k}}},"columns":{{"d":{}}}}}"#,
            text(*d)
        ));
        input.push('\n');
    }
    let mut child = cellar(data)
        .args(["write", "t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());

    let check = |what: &str, k: usize, got: f64| {
        assert_eq!(
            got.to_bits(),
            ds[k].to_bits(),
            "{what}: key {k}: wrote {} read {}",
            text(ds[k]),
            text(got)
        );
    };
    // Twice: from the memtable (after WAL replay), then from a segment.
    for pass in ["memtable", "segment"] {
        let scan = ok(cellar(data).args(["scan", "t"]));
        let mut n = 0;
        for line in scan.lines() {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let k = row["pk"]["k"].as_u64().unwrap() as usize;
            check(
                &format!("scan ({pass})"),
                k,
                row["columns"]["d"][0]["value"].as_f64().unwrap(),
            );
            n += 1;
        }
        assert_eq!(n, ds.len());
        for k in [0usize, 1, 3, 5, 11, 1500, 2500] {
            let row: serde_json::Value =
                serde_json::from_str(&ok(cellar(data).args(["get", "t", &format!(r#"{{"k":{k}}}"#)]))).unwrap();
            check(
                &format!("get ({pass})"),
                k,
                row["columns"]["d"][0]["value"].as_f64().unwrap(),
            );
        }
        for format in ["json", "csv"] {
            let out = ok(cellar(data).args(["sql", "--format", format, "-c", "SELECT k, d FROM t ORDER BY k"]));
            let values: Vec<(usize, f64)> = if format == "json" {
                let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
                rows.iter()
                    .map(|r| (r["k"].as_u64().unwrap() as usize, r["d"].as_f64().unwrap()))
                    .collect()
            } else {
                out.lines()
                    .skip(1)
                    .map(|l| {
                        let (k, d) = l.split_once(',').unwrap();
                        (k.parse().unwrap(), d.parse().unwrap())
                    })
                    .collect()
            };
            assert_eq!(values.len(), ds.len());
            for (k, d) in values {
                check(&format!("sql --format {format} ({pass})"), k, d);
            }
        }
        ok(cellar(data).args(["compact", "t"]));
    }
}

#[tokio::test]
async fn every_type_at_its_edges_survives_flush_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<(&str, Value)> = vec![
        ("i_min", Value::Integer(i64::MIN)),
        ("i_max", Value::Integer(i64::MAX)),
        ("i_zero", Value::Integer(0)),
        ("d_neg_zero", Value::Double(-0.0)),
        ("d_sub", Value::Double(f64::from_bits(1))),
        ("d_max", Value::Double(f64::MAX)),
        ("d_nan", Value::Double(f64::from_bits(0x7ff8_0000_0000_0001))),
        ("d_inf", Value::Double(f64::NEG_INFINITY)),
        ("s_empty", Value::String(String::new())),
        ("s_unicode", Value::String("\u{0}é\u{10FFFF}\"\\\n".into())),
        ("s_huge", Value::String("x".repeat(MAX_VALUE_BYTES))),
        ("b_empty", Value::Binary(Vec::new())),
        ("b_all", Value::Binary((0..=255u8).collect())),
        ("b_huge", Value::Binary(vec![0xff; MAX_VALUE_BYTES])),
        ("t_true", Value::Boolean(true)),
        ("t_false", Value::Boolean(false)),
    ];
    let keys = [
        PrimaryKey::new().with("k", i64::MIN),
        PrimaryKey::new().with("k", -1),
        PrimaryKey::new().with("k", 0),
        PrimaryKey::new().with("k", i64::MAX),
    ];
    let same = |a: &Value, b: &Value| match (a, b) {
        (Value::Double(x), Value::Double(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    };
    let check = |t: Table, stage: &'static str| {
        let keys = keys.clone();
        let values = values.clone();
        async move {
            for pk in &keys {
                let row = t.get_row(GetRow::new(pk.clone())).await.unwrap().row.unwrap();
                for (name, v) in &values {
                    let got = row.latest(name).unwrap_or_else(|| panic!("{stage}: {name} missing"));
                    assert!(same(got, v), "{stage}: {name}: {got:?}");
                }
            }
        }
    };
    {
        let db = Database::open(dir.path()).await.unwrap();
        db.create_table(TableSchema::new("t").pk("k", PkType::Integer), TableOptions::default())
            .await
            .unwrap();
        let t = db.table("t").unwrap();
        for pk in &keys {
            // One row write is at most 4 MiB: the two huge values in rows of their own.
            let mut small = PutRow::new(pk.clone());
            for (name, v) in &values {
                if !name.ends_with("huge") {
                    small = small.column(*name, v.clone());
                }
            }
            t.put_row(small).await.unwrap();
            for (name, v) in values.iter().filter(|(n, _)| n.ends_with("huge")) {
                t.update_row(UpdateRow::new(pk.clone()).put(*name, v.clone()))
                    .await
                    .unwrap();
            }
        }
        check(t.clone(), "memtable").await;
        t.flush().await.unwrap();
        check(t.clone(), "segment").await;
        t.compact().await.unwrap();
        check(t.clone(), "compacted").await;
        drop(t);
        db.close().await.unwrap();
    }
    let db = Database::open(dir.path()).await.unwrap();
    check(db.table("t").unwrap(), "reopened").await;
}
