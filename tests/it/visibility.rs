//! Versions, TTL, max_versions and the write window (see `docs/model.md`).

use cellar::*;

use crate::common::*;

fn all_versions() -> ReadOptions {
    ReadOptions {
        max_versions: Some(100),
        ..Default::default()
    }
}

async fn versions_of(t: &Table, col: &str) -> Vec<i64> {
    let row = t
        .get_row(GetRow::new(pk(1, "a")).options(all_versions()))
        .await
        .unwrap()
        .row;
    row.and_then(|r| r.column(col).map(|c| c.iter().map(|c| c.version).collect()))
        .unwrap_or_default()
}

#[tokio::test]
async fn raising_max_versions_or_ttl_before_compaction_brings_versions_back() {
    let (_dir, _clock, db, t) = fixture(TableOptions {
        max_versions: 3,
        ..Default::default()
    })
    .await;
    for (i, v) in [T0 - 3000, T0 - 2000, T0 - 1000].iter().enumerate() {
        t.update_row(UpdateRow::new(pk(1, "a")).put_at("c", i as i64, *v))
            .await
            .unwrap();
    }
    t.flush().await.unwrap();
    assert_eq!(versions_of(&t, "c").await, vec![T0 - 1000, T0 - 2000, T0 - 3000]);
    set(&db, max_versions(1)).await;
    assert_eq!(versions_of(&t, "c").await, vec![T0 - 1000]);
    set(&db, max_versions(3)).await;
    assert_eq!(versions_of(&t, "c").await, vec![T0 - 1000, T0 - 2000, T0 - 3000]);

    // TTL 2 s at T0: versions below T0 - 2000 are expired
    set(&db, ttl_secs(2)).await;
    assert_eq!(versions_of(&t, "c").await, vec![T0 - 1000, T0 - 2000]);
    set(&db, ttl_secs(-1)).await;
    assert_eq!(versions_of(&t, "c").await.len(), 3);

    // after a compaction under max_versions 1, raising it brings nothing back
    set(&db, max_versions(1)).await;
    t.compact().await.unwrap();
    set(&db, max_versions(3)).await;
    assert_eq!(versions_of(&t, "c").await, vec![T0 - 1000]);
}

#[tokio::test]
async fn expired_rows_vanish_and_pk_only_rows_exist() {
    let (_dir, clock, _db, t) = fixture(TableOptions {
        ttl_secs: 10,
        ..Default::default()
    })
    .await;
    t.put_row(PutRow::new(pk(1, "a"))).await.unwrap();
    t.put_row(PutRow::new(pk(2, "b")).column("x", 1)).await.unwrap();
    let got = t.get_row(GetRow::new(pk(1, "a"))).await.unwrap().row.unwrap();
    assert!(got.columns.is_empty());
    assert_eq!(scan_all(&t, GetRange::new()).await.len(), 2);
    clock.advance(10_001);
    assert!(t.get_row(GetRow::new(pk(1, "a"))).await.unwrap().row.is_none());
    assert!(t.get_row(GetRow::new(pk(2, "b"))).await.unwrap().row.is_none());
    assert!(scan_all(&t, GetRange::new()).await.is_empty());
    t.compact().await.unwrap();
    assert_eq!(
        t.stats().segments,
        0,
        "a compaction of only expired rows leaves no segment"
    );
}

#[tokio::test]
async fn version_window_is_enforced_with_a_clear_error() {
    let (_dir, _clock, _db, t) = fixture(TableOptions::default()).await;
    t.put_row(PutRow::new(pk(1, "a")).column_at("v", 1, 1_468_972_800_000))
        .await
        .unwrap();
    let err = t
        .put_row(PutRow::new(pk(1, "a")).column_at("v", 1, 1_468_972_799_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ParameterInvalid);
    assert!(
        err.message().contains("'v'") && err.message().contains("1468972800000"),
        "{}",
        err.message()
    );
    let err = t
        .put_row(PutRow::new(pk(1, "a")).column_at("v", 1, 1_469_145_600_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ParameterInvalid);
    // the refused write changed nothing
    assert_eq!(versions_of(&t, "v").await, vec![1_468_972_800_000]);
}

#[tokio::test]
async fn deletes_act_in_write_order_and_limits_are_enforced() {
    let (_dir, _clock, db, t) = fixture(TableOptions {
        max_versions: 5,
        ..Default::default()
    })
    .await;
    t.update_row(UpdateRow::new(pk(1, "a")).put_at("c", 1, T0))
        .await
        .unwrap();
    t.flush().await.unwrap();
    t.delete_row(DeleteRow::new(pk(1, "a"))).await.unwrap();
    // an older version written after the delete is visible
    t.update_row(UpdateRow::new(pk(1, "a")).put_at("c", 2, T0 - 5000))
        .await
        .unwrap();
    t.flush().await.unwrap();
    assert_eq!(versions_of(&t, "c").await, vec![T0 - 5000]);
    // DELETE of one version and DELETE_ALL across segments
    t.update_row(UpdateRow::new(pk(1, "a")).put_at("c", 3, T0 - 4000).put_at("d", 1, T0))
        .await
        .unwrap();
    t.flush().await.unwrap();
    t.update_row(
        UpdateRow::new(pk(1, "a"))
            .delete_version("c", T0 - 5000)
            .delete_all("d"),
    )
    .await
    .unwrap();
    assert_eq!(versions_of(&t, "c").await, vec![T0 - 4000]);
    assert_eq!(versions_of(&t, "d").await, Vec::<i64>::new());
    t.compact().await.unwrap();
    assert_eq!(versions_of(&t, "c").await, vec![T0 - 4000]);

    // limits
    let big = "x".repeat(2 * 1024 * 1024 + 1);
    let e = t.put_row(PutRow::new(pk(1, "a")).column("s", big)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfRowSizeLimit);
    let e = t
        .put_row(PutRow::new(pk(1, &"k".repeat(1025))).column("s", 1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidPk);
    let mut p = PutRow::new(pk(1, "a"));
    for i in 0..1025 {
        p = p.column(format!("c{i}"), 1);
    }
    assert_eq!(t.put_row(p).await.unwrap_err().kind(), ErrorKind::OutOfColumnCountLimit);
    set(&db, allow_update(false)).await;
    let e = t.update_row(UpdateRow::new(pk(1, "a")).put("c", 1)).await.unwrap_err();
    assert!(e.message().contains("allow_update"));
}

#[tokio::test]
async fn reads_honour_columns_time_range_and_batches() {
    let (_dir, _clock, db, t) = fixture(TableOptions {
        max_versions: 3,
        ..Default::default()
    })
    .await;
    t.put_row(
        PutRow::new(pk(1, "a"))
            .column_at("a", 1, T0 - 2000)
            .column_at("a", 2, T0 - 1000)
            .column_at("b", "x", T0 - 1500)
            .column_at("c", true, T0),
    )
    .await
    .unwrap();
    let get = |o: ReadOptions| async { t.get_row(GetRow::new(pk(1, "a")).options(o)).await.map(|r| r.row) };
    let r = get(ReadOptions {
        columns_to_get: Some(vec!["b".into(), "c".into()]),
        ..Default::default()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        r.columns.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        vec!["b", "c"]
    );
    let r = get(ReadOptions {
        time_range: Some((T0 - 2000, T0 - 1000)),
        ..Default::default()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r.column("a").unwrap().len(), 1);
    assert_eq!(r.column("a").unwrap()[0].version, T0 - 2000);
    assert_eq!(r.column("b").unwrap()[0].version, T0 - 1500);
    assert!(r.column("c").is_none());
    assert!(
        get(ReadOptions {
            columns_to_get: Some(vec!["zz".into()]),
            ..Default::default()
        })
        .await
        .unwrap()
        .is_none()
    );

    let writes = vec![
        ("t".to_string(), RowWrite::from(PutRow::new(pk(2, "b")).column("n", 1))),
        (
            "nope".to_string(),
            RowWrite::from(PutRow::new(pk(2, "b")).column("n", 1)),
        ),
        (
            "t".to_string(),
            RowWrite::from(PutRow::new(PrimaryKey::new().with("card", 1)).column("n", 1)),
        ),
    ];
    let res = db.batch_write(writes).await.unwrap();
    assert!(res[0].is_ok());
    assert_eq!(res[1].as_ref().unwrap_err().kind(), ErrorKind::ObjectNotExist);
    assert_eq!(res[2].as_ref().unwrap_err().kind(), ErrorKind::InvalidPk);
    let gets = vec![
        ("t".to_string(), GetRow::new(pk(2, "b"))),
        ("t".to_string(), GetRow::new(pk(9, "z"))),
    ];
    let res = db.batch_get(gets).await.unwrap();
    assert!(res[0].as_ref().unwrap().row.is_some());
    assert!(res[1].as_ref().unwrap().row.is_none());
    let too_many = (0..201)
        .map(|i| ("t".to_string(), RowWrite::from(DeleteRow::new(pk(i, "a")))))
        .collect();
    assert_eq!(
        db.batch_write(too_many).await.unwrap_err().kind(),
        ErrorKind::ParameterInvalid
    );
}

async fn set(db: &Database, update: OptionsUpdate) {
    db.alter_table("t", update).await.unwrap();
}

fn max_versions(n: u32) -> OptionsUpdate {
    OptionsUpdate {
        max_versions: Some(n),
        ..Default::default()
    }
}

fn ttl_secs(s: i64) -> OptionsUpdate {
    OptionsUpdate {
        ttl_secs: Some(s),
        ..Default::default()
    }
}

fn allow_update(b: bool) -> OptionsUpdate {
    OptionsUpdate {
        allow_update: Some(b),
        ..Default::default()
    }
}

/// Regression: a key holding a tombstone-only column that sorts before a
/// written column lost the written value when flushed (the segment writer's
/// merge-join of the key's columns with the segment's stalled on the
/// tombstone's name). Found by the model test.
#[tokio::test]
async fn tombstone_only_columns_do_not_hide_later_columns_in_a_flush() {
    let (_dir, _clock, _db, t) = fixture(TableOptions::default()).await;
    t.update_row(UpdateRow::new(pk(1, "a")).put_at("a", 1, T0))
        .await
        .unwrap();
    t.flush().await.unwrap();
    t.update_row(UpdateRow::new(pk(1, "a")).delete_all("a").put_at("d", 2, T0))
        .await
        .unwrap();
    t.flush().await.unwrap();
    let row = t.get_row(GetRow::new(pk(1, "a"))).await.unwrap().row.unwrap();
    assert_eq!(row.columns.len(), 1);
    assert_eq!(row.latest("d"), Some(&Value::Integer(2)));
}
