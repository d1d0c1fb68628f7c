//! Files into tables: `cellar import` and `COPY t FROM 'file'`, for CSV,
//! NDJSON and Parquet, with rejected lines, typing and write order.

use crate::common::{cli_fails, run_cli};

fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (code, _, err) = run_cli(
        &data,
        &[
            "sql",
            "-c",
            "CREATE TABLE orders (card BIGINT, seller VARCHAR, amount DOUBLE, category VARCHAR, \
             PRIMARY KEY (card, seller))",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    (dir, data)
}

fn csv_of(data: &std::path::Path, sql: &str) -> String {
    let (code, out, err) = run_cli(data, &["sql", "--format", "csv", "-c", sql], "");
    assert_eq!(code, 0, "{sql}: {err}");
    out
}

const CSV: &str = "\
card,seller,amount,category,qty,note
1,s1,12.5,food,3,first
abc,s1,1.0,food,1,bad key
2,s2,x,toys,1,bad amount
,s3,1.0,food,1,missing key
3,s3,7,books,,no qty
1,s1,13.25,food,4,overwrites line 2
";

#[test]
fn csv_rows_are_typed_by_the_table_and_bad_lines_are_rejected_alone() {
    let (dir, data) = setup();
    let file = dir.path().join("orders.csv");
    std::fs::write(&file, CSV).unwrap();
    let (code, out, err) = run_cli(&data, &["import", "orders", file.to_str().unwrap()], "");
    assert_eq!(code, 1, "some lines were rejected: {err}");
    assert_eq!(out, "");
    assert!(
        err.contains("line 3: primary-key column 'card': 'abc' is not an integer"),
        "{err}"
    );
    assert!(err.contains("line 4: column 'amount': 'x' is not a number"), "{err}");
    assert!(
        err.contains("line 5: primary-key column 'card' is missing or empty"),
        "{err}"
    );
    assert!(
        err.contains("cellar import: 3 rows into orders in ") && err.contains("3 lines rejected"),
        "{err}"
    );
    assert_eq!(
        csv_of(
            &data,
            "SELECT card, seller, amount, category, qty, note FROM orders ORDER BY card"
        ),
        "card,seller,amount,category,qty,note\n1,s1,13.25,food,4,overwrites line 2\n3,s3,7.0,books,,no qty\n"
    );
    // Undeclared columns take the type of their values.
    assert_eq!(
        csv_of(&data, "SELECT arrow_typeof(qty) AS t FROM orders LIMIT 1"),
        "t\nInt64\n"
    );
}

#[test]
fn copy_from_in_sql_reports_rows_and_rejects() {
    let (dir, data) = setup();
    let file = dir.path().join("orders.csv");
    std::fs::write(&file, CSV).unwrap();
    let sql = format!("COPY orders FROM '{}'", file.display());
    let out = csv_of(&data, &sql);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("rows,rejected,seconds,rows_per_second,rejects"));
    let row = lines.next().unwrap();
    assert!(row.starts_with("3,3,"), "{out}");
    assert!(out.contains("line 3: primary-key column 'card'"), "{out}");
    // Without a header, with another delimiter.
    let tsv = dir.path().join("more.txt");
    std::fs::write(&tsv, "7|s7|1.5|misc\n8|s8|2.5|misc\n").unwrap();
    let out = csv_of(
        &data,
        &format!(
            "COPY orders FROM '{}' WITH (header false, delimiter '|', format csv)",
            tsv.display()
        ),
    );
    assert!(out.lines().nth(1).unwrap().starts_with("2,0,"), "{out}");
    assert_eq!(
        csv_of(&data, "SELECT sum(amount) AS s FROM orders WHERE card > 5"),
        "s\n4.0\n"
    );
    // Bad statements say what is accepted.
    cli_fails(
        &data,
        &["sql", "-c", "COPY orders FROM 'x.csv' WITH (colour red)"],
        1,
        &["unknown option 'colour'", "the form is COPY table FROM"],
    );
}

#[test]
fn ndjson_and_parquet_import_the_same_rows() {
    let (dir, data) = setup();
    let nd = dir.path().join("orders.ndjson");
    std::fs::write(
        &nd,
        concat!(
            r#"{"card":1,"seller":"s1","amount":12,"category":"food","qty":3}"#,
            "\n",
            r#"{"card":2,"seller":"s2","amount":"12"}"#,
            "\n\n",
            r#"{"card":3,"seller":"s3","amount":2.5,"tags":["a"]}"#,
            "\n",
            r#"not json"#,
            "\n",
            r#"{"card":4,"seller":"s4","amount":4.75,"ok":true,"category":null}"#,
            "\n",
        ),
    )
    .unwrap();
    let (code, _, err) = run_cli(&data, &["import", "orders", nd.to_str().unwrap()], "");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("line 2: column 'amount' is declared DOUBLE, and \"12\" is a string"),
        "{err}"
    );
    assert!(err.contains("line 4: column 'tags'"), "{err}");
    assert!(err.contains("line 5: not a JSON object"), "{err}");
    assert!(
        err.contains("2 rows into orders") && err.contains("3 lines rejected"),
        "{err}"
    );
    let want = "card,seller,amount,category,ok,qty\n1,s1,12.0,food,,3\n4,s4,4.75,,true,\n";
    let q = "SELECT card, seller, amount, category, ok, qty FROM orders ORDER BY card";
    assert_eq!(csv_of(&data, q), want);
    // The same rows through Parquet, into a second table.
    let pq = dir.path().join("orders.parquet");
    csv_of(&data, &format!("COPY (SELECT * FROM orders) TO '{}'", pq.display()));
    csv_of(
        &data,
        "CREATE TABLE copy2 (card BIGINT, seller VARCHAR, amount DOUBLE, category VARCHAR, PRIMARY KEY (card, seller))",
    );
    let (code, _, err) = run_cli(&data, &["import", "copy2", pq.to_str().unwrap(), "--quiet"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(csv_of(&data, &q.replace("orders", "copy2")), want);
}

#[test]
fn imported_overwrites_apply_in_file_order() {
    let (dir, data) = setup();
    // 20,000 lines over 50 keys: many batches in flight at once; each
    // key must end with its last line's value.
    let mut csv = String::from("card,seller,amount\n");
    for line in 2..20_002u64 {
        csv.push_str(&format!("{},s,{}\n", line % 50, line));
    }
    let file = dir.path().join("big.csv");
    std::fs::write(&file, csv).unwrap();
    let (code, _, err) = run_cli(&data, &["import", "orders", file.to_str().unwrap()], "");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("20000 rows into orders"), "{err}");
    let got = csv_of(&data, "SELECT card, amount FROM orders ORDER BY card");
    let want: String = std::iter::once("card,amount\n".to_string())
        .chain((0..50u64).map(|k| {
            let last = (2..20_002u64).filter(|l| l % 50 == k).max().unwrap();
            format!("{k},{last}.0\n")
        }))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn import_errors_name_what_was_wrong() {
    let (dir, data) = setup();
    let file = dir.path().join("rows.dat");
    std::fs::write(&file, "x").unwrap();
    cli_fails(
        &data,
        &["import", "orders", file.to_str().unwrap()],
        2,
        &["cannot tell the format", "csv, parquet or ndjson"],
    );
    cli_fails(&data, &["import", "orders", "/no/such.csv"], 1, &["/no/such.csv"]);
    let f = file.to_str().unwrap();
    cli_fails(&data, &["import", "nosuch", f, "--format", "csv"], 1, &["nosuch"]);
    cli_fails(
        &data,
        &["import", "orders", f, "--format", "xml"],
        2,
        &["csv", "parquet", "ndjson"],
    );
}
