//! Golden SQL tests: every `queries/golden/NAME.sql` runs on a fresh
//! database (manual clock at T0, 2 partitions) and its output must equal
//! `queries/golden/NAME.out`. Set `CELLAR_BLESS=1` to rewrite the `.out`
//! files after a deliberate change, and review the diff.
//!
//! Directives on their own line: `-- @advance MS` moves the clock,
//! `-- @flush TABLE` and `-- @compact TABLE` flush or compact a table.

use std::path::Path;
use std::sync::Arc;

use cellar::sql::{SqlSession, StatementOutput, session_config, session_context_with, split_statements};
use cellar::*;
use datafusion::arrow::util::pretty::pretty_format_batches;
use futures::TryStreamExt;

use crate::common::{T0, open};

async fn render(sess: &SqlSession, stmt: &str) -> String {
    match sess.execute(stmt).await {
        Ok(StatementOutput::Done(msg)) => format!("{msg}\n"),
        Ok(StatementOutput::Rows(s)) => match s.try_collect::<Vec<_>>().await {
            Ok(batches) if batches.iter().all(|b| b.num_rows() == 0) => "(no rows)\n".to_string(),
            Ok(batches) => format!("{}\n", pretty_format_batches(&batches).unwrap()),
            Err(e) => format!("ERROR: {}\n", e.strip_backtrace()),
        },
        Err(e) => format!("ERROR: {}\n", e.strip_backtrace()),
    }
}

async fn run_file(path: &Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let db = open(dir.path(), &clock).await;
    let ctx = session_context_with(&db, session_config().with_target_partitions(2));
    let sess = SqlSession::with_context(db.clone(), ctx);
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut chunk = String::new();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.push("-- @end");
    for line in lines {
        let Some(directive) = line.trim().strip_prefix("-- @") else {
            chunk.push_str(line);
            chunk.push('\n');
            continue;
        };
        for stmt in split_statements(&chunk) {
            out.push_str(&format!("> {};\n", stmt.replace('\n', "\n  ")));
            out.push_str(&render(&sess, &stmt).await);
            out.push('\n');
        }
        chunk.clear();
        let mut parts = directive.split_whitespace();
        match (parts.next(), parts.next()) {
            (Some("advance"), Some(ms)) => clock.advance(ms.parse().unwrap()),
            (Some("flush"), Some(t)) => db.table(t).unwrap().flush().await.unwrap(),
            (Some("compact"), Some(t)) => db.table(t).unwrap().compact().await.unwrap(),
            (Some("end"), None) => {}
            other => panic!("unknown directive {other:?} in {}", path.display()),
        }
        if directive != "end" {
            out.push_str(&format!("-- @{directive}\n\n"));
        }
    }
    drop(sess);
    db.close().await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_sql_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/golden");
    let bless = std::env::var_os("CELLAR_BLESS").is_some();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut failed = Vec::new();
    for f in files {
        let got = run_file(&f).await;
        let expected_path = f.with_extension("out");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            let actual = f.with_extension("actual");
            std::fs::write(&actual, &got).unwrap();
            failed.push(format!(
                "{} differs from {} (got: {})",
                f.display(),
                expected_path.display(),
                actual.display()
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "golden mismatches (diff them; CELLAR_BLESS=1 rewrites):\n{}",
        failed.join("\n")
    );
}

/// Every demo query file is run by `cellar demo`.
#[test]
fn demo_lists_every_query_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/demo");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    files.sort();
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/demo.rs")).unwrap();
    for f in files {
        assert!(
            src.contains(&format!("include_str!(\"../../queries/demo/{f}\")")),
            "queries/demo/{f} is not in demo.rs QUERIES"
        );
    }
}
