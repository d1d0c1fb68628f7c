//! Key order: negative and positive integers, strings and binaries with
//! shared prefixes, multi-column keys, both scan directions, in memtables
//! and in segments.

use std::sync::Arc;

use cellar::*;

use crate::common::*;

async fn check_order(t: &Table, expected: &[PrimaryKey]) {
    let fwd: Vec<_> = scan_all(t, GetRange::new())
        .await
        .into_iter()
        .map(|r| r.primary_key)
        .collect();
    assert_eq!(fwd, expected);
    let mut rev = expected.to_vec();
    rev.reverse();
    let bwd: Vec<_> = scan_all(t, GetRange::new().backward())
        .await
        .into_iter()
        .map(|r| r.primary_key)
        .collect();
    assert_eq!(bwd, rev);
    // paging with a small limit gives the same rows
    let paged: Vec<_> = scan_all(t, GetRange::new().limit(2))
        .await
        .into_iter()
        .map(|r| r.primary_key)
        .collect();
    assert_eq!(paged, expected);
}

#[tokio::test]
async fn integers_strings_binaries_and_composites_sort_by_column() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    db.create_table(
        TableSchema::new("k")
            .pk("i", PkType::Integer)
            .pk("s", PkType::String)
            .pk("b", PkType::Binary),
        TableOptions::default(),
    )
    .await
    .unwrap();
    let t = db.table("k").unwrap();
    let ints = [i64::MIN, -300, -1, 0, 1, 256, i64::MAX];
    let strs = ["", "a", "a\0", "ab", "b"];
    let bins: [&[u8]; 3] = [b"", b"\x00", b"\xff"];
    let mut expected = Vec::new();
    for i in ints {
        for s in strs {
            for b in bins {
                expected.push(PrimaryKey::new().with("i", i).with("s", s).with("b", b.to_vec()));
            }
        }
    }
    // insert in a scrambled order, half before a flush and half after
    let mut scrambled = expected.clone();
    scrambled.sort_by_key(|k| format!("{k:?}").len() * 7919 % 101);
    let half = scrambled.len() / 2;
    for k in &scrambled[..half] {
        t.put_row(PutRow::new(k.clone()).column("x", 1)).await.unwrap();
    }
    t.flush().await.unwrap();
    for k in &scrambled[half..] {
        t.put_row(PutRow::new(k.clone()).column("x", 1)).await.unwrap();
    }
    check_order(&t, &expected).await;
    t.compact().await.unwrap();
    check_order(&t, &expected).await;

    // INF_MIN / INF_MAX bounds and prefix bounds
    let r = scan_all(
        &t,
        GetRange::new()
            .start(PkBound::new().with("i", -1).with("s", PkBoundValue::InfMin))
            .end(
                PkBound::new()
                    .with("i", 1)
                    .with("s", "a")
                    .with("b", PkBoundValue::InfMax),
            ),
    )
    .await;
    let want: Vec<_> = expected
        .iter()
        .filter(|k| {
            let i = match k.columns[0].1 {
                PkValue::Integer(i) => i,
                _ => unreachable!(),
            };
            let s = match &k.columns[1].1 {
                PkValue::String(s) => s.clone(),
                _ => unreachable!(),
            };
            (-1..=0).contains(&i) || (i == 1 && s.as_str() <= "a")
        })
        .cloned()
        .collect();
    assert_eq!(r.into_iter().map(|r| r.primary_key).collect::<Vec<_>>(), want);
}

#[tokio::test]
async fn prefix_bounds_include_start_and_exclude_end_in_both_directions() {
    let (_dir, _clock, _db, t) = fixture(TableOptions::default()).await;
    for card in 0..5 {
        for order in ["x", "y"] {
            t.put_row(PutRow::new(pk(card, order)).column("n", card)).await.unwrap();
        }
    }
    let cards = |rows: Vec<Row>| -> Vec<i64> {
        rows.iter()
            .map(|r| {
                if let PkValue::Integer(c) = r.primary_key.columns[0].1 {
                    c
                } else {
                    -1
                }
            })
            .collect()
    };
    let fwd = scan_all(
        &t,
        GetRange::new()
            .start(PkBound::new().with("card", 1))
            .end(PkBound::new().with("card", 3)),
    )
    .await;
    assert_eq!(cards(fwd), vec![1, 1, 2, 2]);
    let bwd = scan_all(
        &t,
        GetRange::new()
            .start(PkBound::new().with("card", 3))
            .end(PkBound::new().with("card", 1))
            .backward(),
    )
    .await;
    assert_eq!(cards(bwd), vec![3, 3, 2, 2]);
    // a forward range whose start is past its end is refused
    let err = t
        .get_range(
            GetRange::new()
                .start(PkBound::new().with("card", 3))
                .end(PkBound::new().with("card", 1)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ParameterInvalid);
}
