//! The fuzz targets' corpus (`fuzz/corpus/TARGET/`, seeds, minimized
//! corpus and every input a fuzzer once failed on), replayed on stable; and
//! property tests that feed the same entry points random bytes and random
//! JSON, so bad input at each door is tested without a fuzzer too.

use std::path::Path;

use proptest::prelude::*;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 6] = [
    ("wal_file", cellar::fuzzing::wal_file),
    ("manifest", cellar::fuzzing::manifest),
    ("segment", cellar::fuzzing::segment),
    ("key", cellar::fuzzing::key),
    ("ndjson_op", cellar::fuzzing::ndjson_op),
    ("sql", cellar::fuzzing::sql),
];

#[test]
fn every_corpus_input_is_handled_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut total = 0;
    for (name, target) in TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has no inputs", dir.display());
        for f in files {
            let data = match std::fs::read(&f) {
                Ok(d) => d,
                // A fuzzer running beside the test replaces its corpus files.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("{}: {e}", f.display()),
            };
            let r = std::panic::catch_unwind(|| target(&data));
            assert!(r.is_ok(), "{} panicked", f.display());
            total += 1;
        }
    }
    eprintln!("replayed {total} corpus inputs");
}

/// JSON of any shape, nested a little.
fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "\\PC{0,12}".prop_map(serde_json::Value::from),
        prop::sample::select(vec![
            "put", "update", "delete", "card", "order", "binary", "value", "version", "inf", "min"
        ])
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "op",
                    "pk",
                    "columns",
                    "put",
                    "delete",
                    "delete_all",
                    "card",
                    "order",
                    "value",
                    "version",
                    "binary",
                    "x",
                    "__pk"
                ])
                .prop_map(str::to_string),
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_at_every_door_are_refused_cleanly(data in prop::collection::vec(any::<u8>(), 0..512)) {
        for (_, target) in TARGETS.iter().filter(|(n, _)| *n != "sql") {
            target(&data);
        }
    }

    #[test]
    fn random_json_operations_are_refused_cleanly(op in json(), pk in json(), columns in json()) {
        cellar::fuzzing::ndjson_op(op.to_string().as_bytes());
        let shaped = serde_json::json!({"op": "put", "pk": pk, "columns": columns});
        cellar::fuzzing::ndjson_op(shaped.to_string().as_bytes());
        let update = serde_json::json!({"op": "update", "pk": {"card": 1, "order": "a"}, "put": columns, "delete": op});
        cellar::fuzzing::ndjson_op(update.to_string().as_bytes());
    }

    #[test]
    fn random_sql_is_refused_cleanly(text in "(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|WITH|EXPLAIN| |t|k|v|s|\\(|\\)|,|\\*|=|<|'|;|1|-|FROM|WHERE|TABLE|VALUES|PRIMARY KEY|cellar_versions|cellar_as_of){0,24}") {
        cellar::fuzzing::sql(text.as_bytes());
    }
}
