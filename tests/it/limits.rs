//! Every limit of the data model, through every entry point that can break
//! it: single writes, batches of one table, BatchWriteRow, a series, a
//! local transaction, the CLI; reads, batch reads and transaction reads.
//! Each refusal has the error kind the model lists and changes nothing.

use cellar::*;

use crate::common::*;

/// A write over each limit, with the kind it must be refused with.
fn over_limits() -> Vec<(&'static str, RowWrite, ErrorKind)> {
    let k = || pk(1, "a");
    let mut wide = PutRow::new(k());
    for i in 0..=MAX_COLUMNS_PER_WRITE {
        wide = wide.column(format!("c{i}"), 1);
    }
    let mut wide_update = UpdateRow::new(k());
    for i in 0..=MAX_COLUMNS_PER_WRITE {
        wide_update = wide_update.increment(format!("c{i}"), 1);
    }
    let big = "x".repeat(MAX_VALUE_BYTES);
    vec![
        ("1025 columns", wide.into(), ErrorKind::OutOfColumnCountLimit),
        ("1025 actions", wide_update.into(), ErrorKind::OutOfColumnCountLimit),
        (
            "a 2 MiB + 1 value",
            PutRow::new(k()).column("s", format!("{big}x")).into(),
            ErrorKind::OutOfRowSizeLimit,
        ),
        (
            "a row write over 4 MiB",
            PutRow::new(k())
                .column("a", big.clone())
                .column("b", big.clone())
                .column("c", "y")
                .into(),
            ErrorKind::OutOfRowSizeLimit,
        ),
        (
            "a 1 KiB + 1 key value",
            PutRow::new(pk(1, &"k".repeat(MAX_PK_VALUE_BYTES + 1))).into(),
            ErrorKind::InvalidPk,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_entry_point_enforces_every_limit() {
    let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
    db.create_series(
        TableSchema::new("s")
            .pk("card", PkType::Integer)
            .pk("order", PkType::String),
        TableOptions::default(),
        SeriesOptions::default(),
    )
    .await
    .unwrap();
    let series = db.series("s").unwrap();
    for (what, w, kind) in over_limits() {
        let check = |via: &str, r: Result<WriteResult>| {
            let e = r.expect_err(&format!("{what} via {via} was accepted"));
            assert_eq!(e.kind(), kind, "{what} via {via}: {e}");
        };
        check("Table::write", t.write(w.clone()).await);
        let mut r = t.write_batch(vec![w.clone()]).await.unwrap();
        check("Table::write_batch", r.remove(0));
        let mut r = t.enqueue_batch(vec![w.clone()]).await.unwrap().durable().await.unwrap();
        check("Table::enqueue_batch", r.remove(0));
        let mut r = db.batch_write(vec![("t".into(), w.clone())]).await.unwrap();
        check("Database::batch_write", r.remove(0));
        let mut r = series.write_batch(vec![w.clone()]).await.unwrap();
        check("Series::write_batch", r.remove(0));
        let tx = t.start_transaction(1i64).await.unwrap();
        check("Transaction::write", tx.write(w.clone()).await);
        tx.abort().await.unwrap();
    }
    // Nothing was written by any of them.
    assert!(scan_all(&t, GetRange::new()).await.is_empty());
    // Batches: 200 rows at most, in every batch entry point.
    let writes = |n: usize| -> Vec<RowWrite> { (0..n).map(|i| PutRow::new(pk(i as i64, "b")).into()).collect() };
    for e in [
        t.write_batch(writes(201)).await.unwrap_err(),
        t.enqueue_batch(writes(201)).await.err().unwrap(),
        series.write_batch(writes(201)).await.unwrap_err(),
        db.batch_write(writes(201).into_iter().map(|w| ("t".to_string(), w)).collect())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::ParameterInvalid, "{e}");
        assert!(e.message().contains("at most 200"), "{e}");
    }
    assert!(t.write_batch(writes(200)).await.unwrap().iter().all(|r| r.is_ok()));
}

#[tokio::test]
async fn every_read_entry_point_enforces_every_limit() {
    let (_dir, _clock, db, t) = fixture(TableOptions::default()).await;
    t.put_row(PutRow::new(pk(1, "a")).column("c", 1)).await.unwrap();
    let many = ReadOptions {
        columns_to_get: Some((0..=MAX_COLUMNS_TO_GET).map(|i| format!("c{i}")).collect()),
        ..Default::default()
    };
    let get = || GetRow::new(pk(1, "a")).options(many.clone());
    let tx = t.start_transaction(1i64).await.unwrap();
    for (via, e) in [
        ("Table::get_row", t.get_row(get()).await.unwrap_err()),
        (
            "Table::get_range",
            t.get_range(GetRange::new().options(many.clone())).await.unwrap_err(),
        ),
        (
            "Database::batch_get",
            db.batch_get(vec![("t".into(), get())])
                .await
                .unwrap()
                .remove(0)
                .unwrap_err(),
        ),
        ("Transaction::get_row", tx.get_row(get()).await.unwrap_err()),
        (
            "Transaction::get_range",
            tx.get_range(GetRange::new().options(many.clone())).await.unwrap_err(),
        ),
    ] {
        assert_eq!(e.kind(), ErrorKind::OutOfColumnCountLimit, "{via}: {e}");
        assert!(e.message().contains("at most 128"), "{via}: {e}");
    }
    let gets: Vec<(String, GetRow)> = (0..=MAX_BATCH_GET_ROWS)
        .map(|i| ("t".to_string(), GetRow::new(pk(i as i64, "a"))))
        .collect();
    let e = db.batch_get(gets).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ParameterInvalid);
    assert!(e.message().contains("at most 100"), "{e}");
}

#[test]
fn the_cli_enforces_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let (code, _, err) = run_cli(&data, &["create", "t", "--pk", "k:integer"], "");
    assert_eq!(code, 0, "{err}");
    let cols: Vec<String> = (0..=MAX_COLUMNS_PER_WRITE).map(|i| format!("\"c{i}\":1")).collect();
    let wide = format!(
        "{{\"op\":\"put\",\"pk\":{{\"k\":1}},\"columns\":{{{}}}}}\n",
        cols.join(",")
    );
    let big = format!(
        "{{\"op\":\"put\",\"pk\":{{\"k\":2}},\"columns\":{{\"s\":\"{}\"}}}}\n",
        "x".repeat(MAX_VALUE_BYTES + 1)
    );
    let (code, out, _) = run_cli(&data, &["write", "t"], &format!("{wide}{big}"));
    assert_eq!(code, 1);
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["error"]["kind"], "OutOfColumnCountLimit");
    assert_eq!(lines[1]["error"]["kind"], "OutOfRowSizeLimit");
    let names: Vec<String> = (0..=MAX_COLUMNS_TO_GET).map(|i| format!("c{i}")).collect();
    let (code, _, err) = run_cli(&data, &["get", "t", r#"{"k":1}"#, "--columns", &names.join(",")], "");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("OutOfColumnCountLimit") || err.contains("at most 128"),
        "{err}"
    );
}
